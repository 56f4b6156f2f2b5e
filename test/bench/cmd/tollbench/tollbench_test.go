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
		{"run", "-only", "e2e", "-skip", "held"},
		{"run", "-only", "nothing"},
		{"run", "-long-tokenizers", "gpt-5"},
		{"run", "-long-tokens", "0"},
		{"run", "-chunks", "1"},
		{"load"},
		{"longctx"},
		{"longctx", "--null", "127.0.0.1:1", "--tollgate", "127.0.0.1:2", "--mode", "streamed"},
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
		"1.40× (per-round median 1.40×, target ≤ 1.15× null: missed)",
		"0.89× (per-round median 0.91×, target ≥ 0.95× null: missed)",
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
		{e2eTargets[0].name, "0.91× (rounds 0.87–0.95×; medians 1775 / 2000 req/s)", "missed"},
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

func TestPhaseSet(t *testing.T) {
	got, err := phaseSet("-only", "e2e, long-context,profile")
	if err != nil || len(got) != 3 || !got["long-context"] || !got["profile"] {
		t.Errorf("phaseSet = %v, %v", got, err)
	}
	if _, err := phaseSet("-skip", "profile"); err == nil {
		t.Error("-skip accepted profile, which -profile controls")
	}
}

func TestLongRowsGoals(t *testing.T) {
	r := &runner{o: options{longRequests: 4}, report: &bench.Report{Targets: newTargets()}}
	ms := func(v ...float64) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x*float64(time.Millisecond)))
		}
		return out
	}
	result := func(m bench.Mode, unseenTG, unseenNull, seenTG, seenNull []time.Duration) bench.LongResult {
		srv := func(name string, d []time.Duration) bench.LongServerResult {
			s := bench.LongServerResult{Name: name, Requests: len(d), Decisions: d}
			s.DecisionP50 = bench.Percentile(slices.Clone(d), 50)
			s.DecisionP99 = bench.Percentile(slices.Clone(d), 99)
			return s
		}
		return bench.LongResult{Mode: m, Requests: 4, BodyBytes: 450000, Passes: []bench.LongPass{
			{Name: bench.PassUnseen, Servers: []bench.LongServerResult{srv(serverNull, unseenNull), srv(serverTollgate, unseenTG)}},
			{Name: bench.PassSeen, Servers: []bench.LongServerResult{srv(serverNull, seenNull), srv(serverTollgate, seenTG)}},
		}}
	}
	null := ms(2, 2, 2, 2)
	toks := []longTokenizer{{name: estimateTokenizer}, {name: "llama3.1", chat: true}, {name: "qwen3", chat: true}}
	r.longRows(toks, []longRun{
		// The estimate is no real tokenizer: no goal.
		{Tokenizer: estimateTokenizer, Tokens: 100000, Counted: 99000,
			Result: result(bench.ModeDuplex, ms(3, 3, 3, 3), null, ms(3, 3, 3, 3), null)},
		// BUFFERED reads no goal either.
		{Tokenizer: "llama3.1", Tokens: 100000, Counted: 100123,
			Result: result(bench.ModeBuffered, ms(90, 90, 90, 90), null, ms(90, 90, 90, 90), null)},
		{Tokenizer: "llama3.1", Tokens: 100000, Counted: 100123,
			Result: result(bench.ModeDuplex, ms(12, 13, 14, 30), null, ms(5, 6, 6, 7), null)},
		// qwen3 is faster but priced by the estimate: the goal is missed.
		{Tokenizer: "qwen3", Tokens: 100000, Counted: 100456, Estimated: 2,
			Result: result(bench.ModeDuplex, ms(4, 4, 4, 4), null, ms(3, 3, 3, 3), null)},
	})
	var b strings.Builder
	if err := r.report.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"100k (100,123 tokens, 439.5 KiB body), hf:llama3.1, FULL_DUPLEX_STREAMED, unseen",
		"+11.00 ms ; +28.00 ms (per-request median +11.00 ms) — goal ≤ +15.00 ms: met",
		"+4.00 ms ; +5.00 ms (per-request median +4.00 ms) — goal ≤ +5.00 ms: met",
		"2 prompts priced by the estimate instead (tollgate_tokenize_estimated_total) — goal ≤ +5.00 ms: missed",
		"100k (99,000 tokens, 439.5 KiB body), estimate, FULL_DUPLEX_STREAMED, seen",
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
		{longGoals[0].name, "+4.00 ms (worst; hf:llama3.1 +4.00 ms, hf:qwen3 +1.00 ms (priced by the estimate))", "missed"},
		{longGoals[1].name, "+11.00 ms (worst; hf:llama3.1 +11.00 ms, hf:qwen3 +2.00 ms (priced by the estimate))", "missed"},
		{longGoals[2].name, "", "not measured"},
	} {
		if g := got[want.name]; g.Value != want.value || g.Result() != want.result {
			t.Errorf("goal %q: %q, %s; want %q, %s", want.name, g.Value, g.Result(), want.value, want.result)
		}
	}
}

func TestChunkRows(t *testing.T) {
	r := &runner{o: options{chunks: 64, chunkGap: time.Millisecond, chunkConc: 16}, report: &bench.Report{Targets: newTargets()}}
	run := func(srv string, round int, oneWrite bool, cpu time.Duration, msgs uint64) chunkRun {
		return chunkRun{Server: srv, Round: round, OneWrite: oneWrite, CPU: cpu,
			Result: bench.LoadResult{Completed: 100, MsgsSent: msgs, RPS: 150}}
	}
	r.chunkRows([]chunkRun{
		// Per request: 65 more messages cost 650 µs more (10 µs each) in
		// the null server, 975 µs (15 µs) in tollgate.
		run(serverNull, 1, false, 100*time.Millisecond, 7000), run(serverNull, 1, true, 35*time.Millisecond, 500),
		run(serverTollgate, 1, false, 150*time.Millisecond, 7000), run(serverTollgate, 1, true, 52500*time.Microsecond, 500),
		// A round with errors is left out.
		{Server: serverTollgate, Round: 2, Result: bench.LoadResult{Completed: 10, MsgsSent: 700, Errors: 1, FirstError: "HTTP 503"}},
		run(serverTollgate, 2, true, time.Millisecond, 50),
	})
	var tgt bench.Target
	for _, tg := range r.report.Targets {
		if tg.Name == chunkCPUTargetName {
			tgt = tg
		}
	}
	if tgt.Value != "+5.00 µs (tollgate 15.0 µs, null 10.0 µs per chunk)" || tgt.Result() != "met" {
		t.Errorf("target: %q, %s", tgt.Value, tgt.Result())
	}
	var b strings.Builder
	if err := r.report.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "65.0 extra body messages per response") || !strings.Contains(out, "first: HTTP 503") {
		t.Errorf("table:\n%s", out)
	}
}

func TestSmallProcsRowsPointsAtTheRunsOwn(t *testing.T) {
	r := &runner{o: options{conc: []int{1, 64}}, report: &bench.Report{}}
	res := func(rps float64) bench.LoadResult {
		return bench.LoadResult{Concurrency: 64, RPS: rps, TotalP50: time.Millisecond}
	}
	r.smallProcsRows([]e2eRun{
		{Server: serverNull, Round: 1, Result: res(100), CPUPerRequest: 10},
		{Server: serverTollgate, Round: 1, Result: res(90), CPUPerRequest: 12},
	}, nil)
	if len(r.report.Rows) != 1 || r.report.Rows[0].Value != "0.90× ; 1.00× ; 1.20×" {
		t.Errorf("rows: %+v", r.report.Rows)
	}
	r = &runner{o: options{conc: []int{1}}, report: &bench.Report{}}
	r.smallProcsRows(nil, nil)
	if len(r.report.Rows) != 1 || !strings.HasPrefix(r.report.Rows[0].Value, "not measured") {
		t.Errorf("rows without 64 streams: %+v", r.report.Rows)
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

func TestSigned(t *testing.T) {
	if got := signedMs(-4 * time.Microsecond); got != "+0.00 ms" {
		t.Errorf("signedMs(-4µs) = %q", got)
	}
	if got := signedMs(-1500 * time.Microsecond); got != "-1.50 ms" {
		t.Errorf("signedMs(-1.5ms) = %q", got)
	}
	if got := signedNs(-3); got != "+0.00 µs" {
		t.Errorf("signedNs(-3) = %q", got)
	}
	if got := signedNs(2650); got != "+2.65 µs" {
		t.Errorf("signedNs(2650) = %q", got)
	}
}
