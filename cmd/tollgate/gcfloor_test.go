package main

import (
	"bytes"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPercentFor(t *testing.T) {
	const floor = 64 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{live: 5 << 20, want: 1180}, // next cycle at 64 MiB
		{live: 16 << 20, want: 300},
		{live: 32 << 20, want: basePercent}, // twice the live heap is the floor
		{live: 1 << 30, want: basePercent},
		// Go's minimum goal, 4 MiB × GOGC/100, reaches the floor at 1600.
		{live: 4 << 20, want: 1500},
		{live: 1 << 20, want: 1600},
		{live: 1, want: 1600},
		{live: 0, want: 1600}, // before the first cycle
	} {
		if got := percentFor(floor, c.live); got != c.want {
			t.Errorf("percentFor(64 MiB, %d) = %d, want %d", c.live, got, c.want)
		}
	}
}

// fakeGC records the GOGC values a gcFloor sets.
type fakeGC struct {
	mu   sync.Mutex
	live uint64
	set  []int
}

func (f *fakeGC) liveHeap() uint64 { f.mu.Lock(); defer f.mu.Unlock(); return f.live }

func (f *fakeGC) setPercent(p int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set = append(f.set, p)
	return 0
}

func (f *fakeGC) calls() []int { f.mu.Lock(); defer f.mu.Unlock(); return append([]int(nil), f.set...) }

// collectUntil runs GC cycles until cond holds, for at most 5 s: the
// floor's cleanup runs on its own goroutine after a cycle.
func collectUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 5 s of GC cycles", what)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

func TestGCFloor_FollowsTheLiveHeapEachCycleUntilStopped(t *testing.T) {
	f := &fakeGC{live: 4 << 20}
	g := &gcFloor{floor: 64 << 20, liveHeap: f.liveHeap, setPercent: f.setPercent, percent: basePercent}
	g.cycle()
	if got := f.calls(); len(got) != 1 || got[0] != 1500 {
		t.Fatalf("at the start: set %v, want [1500]", got)
	}
	f.mu.Lock()
	f.live = 16 << 20
	f.mu.Unlock()
	collectUntil(t, "GOGC for the new live heap", func() bool { c := f.calls(); return c[len(c)-1] == 300 })
	g.stop()
	if c := f.calls(); c[len(c)-1] != basePercent {
		t.Fatalf("stop set %v last, want GOGC=%d", c[len(c)-1], basePercent)
	}
	n := len(f.calls())
	f.mu.Lock()
	f.live = 1 << 20
	f.mu.Unlock()
	for range 5 {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if c := f.calls(); len(c) != n {
		t.Fatalf("set GOGC after stop: %v", c[n:])
	}
}

func TestStartGCFloor_SetsGOGCAndStopRestoresIt(t *testing.T) {
	unsetGOGC(t)
	var logs bytes.Buffer
	stop := startGCFloor(1<<40, slog.New(slog.NewTextHandler(&logs, nil)))
	got := debug.SetGCPercent(-1)
	debug.SetGCPercent(got)
	stop()
	if got <= basePercent {
		t.Fatalf("GOGC with a 1 TiB floor: %d", got)
	}
	if p := debug.SetGCPercent(basePercent); p != basePercent {
		t.Fatalf("GOGC after stop: %d", p)
	}
	if !strings.Contains(logs.String(), "heap floor") {
		t.Fatalf("no log line:\n%s", logs.String())
	}
	if w := gcFloorWarnings(64 << 20); len(w) != 0 {
		t.Fatalf("warnings without GOGC: %v", w)
	}
}

func TestStartGCFloor_OffWithAWarningWhenGOGCIsSet(t *testing.T) {
	startGCFloor(0, slog.New(slog.DiscardHandler))()
	t.Setenv("GOGC", "200")
	startGCFloor(64<<20, slog.New(slog.DiscardHandler))()
	if p := debug.SetGCPercent(basePercent); p != basePercent {
		t.Fatalf("GOGC changed to %d", p)
	}
	if w := gcFloorWarnings(64 << 20); len(w) != 1 || !strings.Contains(w[0], "GOGC=200 is set") {
		t.Fatalf("warnings with GOGC set: %v", w)
	}
	if w := gcFloorWarnings(0); len(w) != 0 {
		t.Fatalf("warnings for no floor: %v", w)
	}
}

func TestGCFloorWarnings_MemoryLimitBelowTheFloor(t *testing.T) {
	unsetGOGC(t)
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(32 << 20))
	if w := gcFloorWarnings(64 << 20); len(w) != 1 || !strings.Contains(w[0], "GOMEMLIMIT") {
		t.Fatalf("warnings: %v", w)
	}
}

// unsetGOGC unsets GOGC for the test; t.Setenv restores it after.
func unsetGOGC(t *testing.T) {
	t.Setenv("GOGC", "")
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
}

// The runtime's own heap goal follows the floor.
func TestStartGCFloor_HeapGoalIsTheFloor(t *testing.T) {
	unsetGOGC(t)
	const floor = 256 << 20
	stop := startGCFloor(floor, slog.New(slog.DiscardHandler))
	defer stop()
	goal := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	collectUntil(t, "heap goal near the floor", func() bool { return goal() >= floor*9/10 })
	if g := goal(); g > 2*floor {
		t.Fatalf("heap goal %d MiB, over twice the %d MiB floor", g>>20, floor>>20)
	}
	stop()
	runtime.GC()
	if g := goal(); g >= floor/2 {
		t.Fatalf("heap goal %d MiB after stop", g>>20)
	}
}
