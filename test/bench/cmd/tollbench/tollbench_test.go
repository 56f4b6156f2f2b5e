package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/test/bench"
)

func TestRunDispatch(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"help"}, &out, &errb); err != nil || !strings.Contains(out.String(), "tollbench [run]") {
		t.Errorf("help: %v, output %q", err, out.String())
	}
	if err := run(context.Background(), []string{"nope"}, &out, &errb); !errors.Is(err, errUsage) {
		t.Errorf("unknown command: %v, want errUsage", err)
	}
	for _, args := range [][]string{
		{"run", "-skip", "everything"},
		{"run", "-concurrency", "1,x"},
		{"run", "-rounds", "0"},
		{"load"},
		{"hold", "--ext", "127.0.0.1:1"},
		{"serve"},
	} {
		if err := run(context.Background(), args, &out, &errb); err == nil {
			t.Errorf("%q was accepted", args)
		}
	}
}

func TestWorkerSubcommandServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var errb syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"worker"}, nil, &errb) }()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(errb.String(), `"msg":"serving"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no serving line: %q", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	m, ok := servingAddrs(strings.TrimSpace(errb.String()))
	if !ok || !strings.HasPrefix(m["http"], "127.0.0.1:") {
		t.Fatalf("serving line %q gave %v", errb.String(), m)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("worker did not stop")
	}
}

func TestStartChild(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	c, err := startChild(context.Background(), "fake", dir, []string{"sh", "-c",
		`echo 'not json' >&2; echo '{"msg":"serving","grpc":"127.0.0.1:1"}' >&2; exec sleep 30`})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := c.addr("grpc"); err != nil || a != "127.0.0.1:1" {
		t.Errorf("addr = %q, %v", a, err)
	}
	if _, err := c.addr("metrics"); err == nil {
		t.Error("an address that was not logged")
	}
	if err := c.stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	if _, err := startChild(context.Background(), "dies", dir, []string{"sh", "-c", "echo boom >&2; exit 3"}); err == nil ||
		!strings.Contains(err.Error(), "boom") {
		t.Errorf("a child that exits: %v, want an error quoting its log", err)
	}
}

func TestPackageOf(t *testing.T) {
	for fn, want := range map[string]string{
		"google.golang.org/grpc/internal/transport.(*http2Server).operateHeaders": "google.golang.org/grpc/internal/transport",
		"runtime.mallocgc": "runtime",
		"github.com/tollgate/tollgate/extproc.(*exchange).message": "github.com/tollgate/tollgate/extproc",
		"encoding/json.checkValid":                                 "encoding/json",
		"[unknown]":                                                "[unknown]",
	} {
		if got := packageOf(fn); got != want {
			t.Errorf("packageOf(%q) = %q, want %q", fn, got, want)
		}
	}
	got := byPackage([]topEntry{{10, "runtime.a"}, {5, "runtime.b"}, {20, "a/b.c"}, {1, "x.y"}})
	if got != "a/b 20.0%, runtime 15.0%, x 1.0%" {
		t.Errorf("byPackage = %q", got)
	}
}

func TestE2ERowsTargets(t *testing.T) {
	r := &runner{o: options{conc: []int{1, 64}, rounds: 2}, report: &bench.Report{Targets: newTargets()}}
	res := func(c int, rps float64, p50 time.Duration) bench.LoadResult {
		return bench.LoadResult{Mode: bench.ModeBuffered, Concurrency: c, RPS: rps, TotalP50: p50, TotalP99: 2 * p50}
	}
	r.e2eRows(bench.ModeBuffered, []e2eRun{
		{Server: serverNull, Round: 1, Result: res(1, 500, time.Millisecond), CPUPerRequest: 100 * time.Microsecond},
		{Server: serverTollgate, Round: 1, Result: res(1, 400, 1400*time.Microsecond), CPUPerRequest: 150 * time.Microsecond},
		// At 64 streams the ratio of the medians (1775/2000 = 0.89×)
		// misses the throughput target; the per-round ratios (0.95× and
		// 0.87×, median 0.91×) meet it, and they decide.
		{Server: serverNull, Round: 1, Result: res(64, 1000, 50*time.Millisecond), CPUPerRequest: 100 * time.Microsecond},
		{Server: serverTollgate, Round: 1, Result: res(64, 950, 60*time.Millisecond), CPUPerRequest: 130 * time.Microsecond},
		{Server: serverTollgate, Round: 2, Result: res(64, 2600, 60*time.Millisecond), CPUPerRequest: 130 * time.Microsecond},
		{Server: serverNull, Round: 2, Result: res(64, 3000, 50*time.Millisecond), CPUPerRequest: 100 * time.Microsecond},
	})
	var b strings.Builder
	if err := r.report.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"1.40× (per-round median 1.40×, target ≤ 1.10× null: missed)",
		"0.89× (per-round median 0.91×, target ≥ 0.90× null: met)",
		"1.30× (per-round median 1.30×, target ≤ 1.25× null: missed)",
		"1.00 ms (1.00 ms–1.00 ms)",
		"150.0 µs (150.0 µs–150.0 µs)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	got := map[string]bench.Target{}
	for _, tg := range r.report.Targets {
		got[tg.Name] = tg
	}
	for _, want := range []struct{ name, value, result string }{
		{e2eTargets[0].name, "0.91× (rounds 0.87–0.95×; medians 1775 / 2000 req/s)", "met"},
		{e2eTargets[1].name, "1.30× (rounds 1.30–1.30×; medians 130.0 µs / 100.0 µs)", "missed"},
		{e2eTargets[2].name, "1.40× (rounds 1.40–1.40×; medians 1.40 ms / 1.00 ms)", "missed"},
		{e2eTargets[3].name, "", "not measured"},
		{e2eTargets[4].name, "", "not measured"},
	} {
		if g := got[want.name]; g.Value != want.value || g.Result() != want.result {
			t.Errorf("target %q: %q, %s; want %q, %s", want.name, g.Value, g.Result(), want.value, want.result)
		}
	}
	if strings.Count(out, ", target ") != 3 {
		t.Errorf("want a target on 3 rows (not on p99 nor the 1-stream throughput):\n%s", out)
	}
}

func TestPairedRatios(t *testing.T) {
	run := func(srv string, round, c int, rps float64) e2eRun {
		return e2eRun{Server: srv, Round: round, Result: bench.LoadResult{Concurrency: c, RPS: rps}}
	}
	runs := []e2eRun{
		run(serverNull, 1, 16, 100), run(serverTollgate, 1, 16, 80),
		run(serverTollgate, 2, 16, 120), run(serverNull, 2, 16, 100),
		run(serverNull, 3, 16, 100), // its tollgate run is missing
		run(serverNull, 1, 64, 1), run(serverTollgate, 1, 64, 9),
	}
	got := pairedRatios(bench.ModeDuplex, runs, 16, measureThroughput)
	slices.Sort(got)
	if len(got) != 2 || got[0] != 0.8 || got[1] != 1.2 {
		t.Errorf("pairedRatios = %v, want [0.8 1.2]", got)
	}
}

func TestHeldRowsTargets(t *testing.T) {
	r := &runner{report: &bench.Report{Targets: newTargets()}}
	r.heldRows([]heldRun{
		{Server: serverTollgate, Result: bench.HoldResult{Held: 2500, RSSPerHeld: 10 << 10, BaseGoroutines: 20, HeldGoroutines: 2520,
			GoroutinesPerHeld: 1, GoroutineSource: "go_goroutines", Drain: time.Second, DrainPerHeld: 400 * time.Microsecond}},
		{Server: serverTollgate, Result: bench.HoldResult{Held: 10000, RSSPerHeld: 26.5 * 1024, BaseRSS: 20 << 20, HeldRSS: 279 << 20,
			BaseGoroutines: 20, HeldGoroutines: 20025, GoroutinesPerHeld: 2.0005, GoroutineSource: "go_goroutines",
			Drain: 4 * time.Second, DrainPerHeld: 400 * time.Microsecond}},
	})
	var rss, gr bench.Target
	for _, tg := range r.report.Targets {
		switch tg.Name {
		case heldRSSTargetName:
			rss = tg
		case heldGoroutinesTargetName:
			gr = tg
		}
	}
	if rss.Value != "26.5 KiB (RSS 20.0 MiB base → 279.0 MiB held)" || rss.Result() != "missed" {
		t.Errorf("RSS target: %q, %s", rss.Value, rss.Result())
	}
	if gr.Value != "2.00 (go_goroutines: 20 base → 20025 held)" || gr.Result() != "missed" {
		t.Errorf("goroutine target: %q, %s", gr.Value, gr.Result())
	}
	if !goroutinesMet(1.004) || goroutinesMet(1.006) || goroutinesMet(2) {
		t.Error("goroutinesMet does not compare to two decimals")
	}
}

func TestCoreAllocsTarget(t *testing.T) {
	for _, tt := range []struct {
		allocs        []float64
		value, result string
	}{
		{[]float64{0, 0}, "0 in all 2 benchmarks", "met"},
		{[]float64{0, 3}, "up to 3 (B1), 2 benchmarks", "missed"},
		{nil, "", "not measured"},
	} {
		r := &runner{report: &bench.Report{Targets: newTargets()}}
		run := &bench.GoBenchRun{}
		for i, a := range tt.allocs {
			run.Results = append(run.Results, bench.GoBench{Name: fmt.Sprintf("B%d", i), Metrics: map[string]float64{"allocs/op": a}})
		}
		r.coreAllocsTarget(run)
		tg := r.report.Targets[len(r.report.Targets)-1]
		if tg.Name != coreAllocsTargetName || tg.Value != tt.value || tg.Result() != tt.result {
			t.Errorf("allocs %v: %q %q %s; want %q %s", tt.allocs, tg.Name, tg.Value, tg.Result(), tt.value, tt.result)
		}
	}
}

func TestActivities(t *testing.T) {
	got := activities(map[string]float64{
		"runtime.selectgo": 9.5,
		"github.com/tollgate/tollgate/extproc/request/openai.Parse": 4,
		"unlisted.function": 50,
	})
	if got != "openai.Parse 4.0%, select 9.5%" {
		t.Errorf("activities = %q", got)
	}
	if funcName([]string{"a/b.F", "(inline)"}) != "a/b.F" {
		t.Error("funcName kept the inline marker")
	}
}

func TestIntList(t *testing.T) {
	if got, err := intList("1, 16,64"); err != nil || len(got) != 3 || got[2] != 64 {
		t.Errorf("intList = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "-1", "a"} {
		if _, err := intList(bad); err == nil {
			t.Errorf("intList(%q) accepted", bad)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
