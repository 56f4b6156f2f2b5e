package main

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// defaultGCHeapFloor is --gc-heap-floor-bytes' default.
const defaultGCHeapFloor = 64 << 20

// gcFloor keeps the garbage collector from starting a cycle before the
// heap reaches floor bytes. Go's collector starts one each time the heap
// doubles its live part (GOGC=100); tollgate's live heap is about 5 MiB
// without a model tokenizer, so at 3,000 requests a second it collected
// about 18 times a second. After each cycle the floor sets GOGC so that
// the next one starts at the larger of the floor and twice the live heap:
// a heap above half the floor is collected as with GOGC=100. A memory
// limit (GOMEMLIMIT) still bounds the heap.
type gcFloor struct {
	floor uint64
	// liveHeap reads the live heap that the last cycle marked; setPercent
	// sets GOGC. Tests replace both.
	liveHeap   func() uint64
	setPercent func(int) int

	mu      sync.Mutex
	stopped bool
	percent int // the GOGC set last
}

// basePercent is the GOGC a heap above half the floor keeps: Go's default.
const basePercent = 100

// heapMinimum is Go's smallest heap goal at GOGC=100, 4 MiB; it scales
// with GOGC (runtime/mgcpacer.go, defaultHeapMinimum).
const heapMinimum = 4 << 20

// startGCFloor starts the floor when floor > 0 and GOGC is not set, and
// returns what stops it and restores GOGC=100. A GOGC in the environment
// is the operator's choice: the floor stays off (gcFloorWarnings says so).
func startGCFloor(floor int64, log *slog.Logger) (stop func()) {
	if _, set := os.LookupEnv("GOGC"); set || floor <= 0 {
		return func() {}
	}
	g := &gcFloor{floor: uint64(floor), liveHeap: readLiveHeap, setPercent: debug.SetGCPercent, percent: basePercent}
	g.cycle()
	log.Info("garbage collector heap floor", "bytes", floor)
	return g.stop
}

// gcFloorWarnings says why a floor cannot take effect: GOGC is set, or a
// memory limit below it starts the cycles first.
func gcFloorWarnings(floor int64) []string {
	if floor <= 0 {
		return nil
	}
	if v, set := os.LookupEnv("GOGC"); set {
		return []string{fmt.Sprintf("GOGC=%s is set, so --gc-heap-floor-bytes (%d) has no effect; pass --gc-heap-floor-bytes=0 to say so", v, floor)}
	}
	if limit := debug.SetMemoryLimit(-1); limit < floor {
		return []string{fmt.Sprintf("the memory limit (GOMEMLIMIT, %d bytes) is below --gc-heap-floor-bytes (%d): the collector starts its cycles at the limit", limit, floor)}
	}
	return nil
}

// gcSentinel is the object whose cleanup marks the end of a GC cycle. Its
// pointer field keeps it out of the tiny allocator, whose blocks may
// outlive a cycle.
type gcSentinel struct{ _ *byte }

// cycle sets GOGC for the live heap the last cycle left, then waits for
// the next cycle.
func (g *gcFloor) cycle() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	g.set(percentFor(g.floor, g.liveHeap()))
	runtime.AddCleanup(&gcSentinel{}, func(g *gcFloor) { g.cycle() }, g)
}

// stop ends the floor and restores GOGC=100.
func (g *gcFloor) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	g.set(basePercent)
}

// set sets GOGC to p unless it is already. g.mu is held.
func (g *gcFloor) set(p int) {
	if p != g.percent {
		g.setPercent(p)
		g.percent = p
	}
}

// percentFor is the GOGC that starts the next cycle at the larger of floor
// and twice live. It is at most the GOGC whose minimum heap goal is the
// floor: Go's goal is never below heapMinimum × GOGC/100, so a larger one
// would let an almost empty heap (or one before its first cycle) grow past
// the floor.
func percentFor(floor, live uint64) int {
	most := max(basePercent, floor*100/heapMinimum)
	if live >= floor/2 {
		return basePercent
	}
	if live == 0 {
		return int(most)
	}
	return int(min(floor*100/live-100, most))
}

// readLiveHeap reads the heap that the last GC cycle marked live.
func readLiveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return math.MaxUint64 // not reported: keep GOGC=100
	}
	return s[0].Value.Uint64()
}

// checkGCHeapFloor reports a negative --gc-heap-floor-bytes.
func checkGCHeapFloor(floor int64) error {
	if floor < 0 {
		return fmt.Errorf("--gc-heap-floor-bytes must not be negative, got %d (0 turns the floor off)", floor)
	}
	return nil
}
