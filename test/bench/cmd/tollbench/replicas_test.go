package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/test/bench"
)

func TestPickScheduler(t *testing.T) {
	for _, c := range []struct {
		states []replicaState
		want   int
		ok     bool
	}{
		{[]replicaState{{0, 1}, {1, 1}}, 1, true},
		{[]replicaState{{1, 1}, {0, 1}, {0, 1}, {0, 1}}, 0, true},
		{[]replicaState{{1, 1}, {0, 0}}, -1, false},   // a front not linked yet
		{[]replicaState{{1, 1}, {1, 1}}, -1, false},   // two schedulers
		{[]replicaState{{0, 1}, {0, 1}}, -1, false},   // none
		{[]replicaState{{1, 1}, {-1, -1}}, -1, false}, // metrics unreachable
		{nil, -1, false},
	} {
		if got, ok := pickScheduler(c.states); got != c.want || ok != c.ok {
			t.Errorf("pickScheduler(%v) = %d, %v; want %d, %v", c.states, got, ok, c.want, c.ok)
		}
	}
}

func TestHopPerRound(t *testing.T) {
	for _, c := range [][3]int{{3000, 3, 1000}, {3000, 7, 429}, {10, 1, 10}, {1, 5, 1}} {
		if got := hopPerRound(c[0], c[1]); got != c[2] {
			t.Errorf("hopPerRound(%d, %d) = %d, want %d", c[0], c[1], got, c[2])
		}
	}
}

func TestParseServers(t *testing.T) {
	got, err := parseServers("own=127.0.0.1:1, front=127.0.0.1:2,")
	if err != nil || len(got) != 2 || got[0] != (bench.InterleaveServer{Name: "own", Addr: "127.0.0.1:1"}) || got[1].Name != "front" {
		t.Errorf("parseServers = %+v, %v", got, err)
	}
	for _, bad := range []string{"", ",", "own", "=127.0.0.1:1", "own=", "a=1,a=2"} {
		if _, err := parseServers(bad); err == nil {
			t.Errorf("parseServers(%q) accepted", bad)
		}
	}
}

func TestReplicaSubcommandsCheckArguments(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{
		{"interleave"},
		{"interleave", "--servers", "a=127.0.0.1:1", "--mode", "streamed"},
		{"interleave", "--servers", "a=127.0.0.1:1", "--block", "0"},
		{"loads"},
		{"loads", "--ext", "127.0.0.1:1", "--mode", "streamed"},
		{"run", "-replica-block", "0"},
		{"run", "-replica-warmup-requests", "-1"},
		{"run", "-replica-duration", "0s"},
	} {
		if err := run(context.Background(), args, &out, &errb); err == nil {
			t.Errorf("%q was accepted", args)
		}
	}
	if o, err := phaseSet("-only", "replicas"); err != nil || !o["replicas"] {
		t.Errorf("-only replicas: %v, %v", o, err)
	}
}

func TestReplicaRows(t *testing.T) {
	r := &runner{o: options{replicaConc: 32}, report: &bench.Report{Targets: newTargets()}}
	us := func(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }
	res := func(name string, dec, total float64, errs int) bench.InterleaveResult {
		x := bench.InterleaveResult{Name: name, Requests: 100, Errors: errs,
			DecisionP50: us(dec), DecisionP99: us(3 * dec), TotalP50: us(total), TotalP99: us(3 * total)}
		if errs > 0 {
			x.FirstError = "HTTP 503 (" + name + ")"
		}
		return x
	}
	hops := []hopRun{
		{Round: 1, Results: []bench.InterleaveResult{res(hopOwn, 500, 1000, 0), res(hopFront, 580, 1200, 0),
			res(hopSingle, 480, 990, 0), res(hopNull, 400, 900, 0)}, SchedP50: us(6), SchedP99: us(100)},
		// A slower round: the per-round differences (+80, +90 and
		// +60 µs, median +80 µs), not the medians of each side
		// (+60 µs), decide.
		{Round: 2, Results: []bench.InterleaveResult{res(hopFront, 790, 1500, 1), res(hopOwn, 700, 1300, 0),
			res(hopSingle, 690, 1290, 0), res(hopNull, 600, 1200, 0)}},
		{Round: 3, Results: []bench.InterleaveResult{res(hopOwn, 600, 1100, 0), res(hopFront, 660, 1150, 0),
			res(hopSingle, 590, 1090, 0), res(hopNull, 500, 1000, 0)}},
	}
	load := func(rps float64, completed, errs int) bench.LoadResult {
		return bench.LoadResult{RPS: rps, Completed: completed, Errors: errs}
	}
	fleets := []fleetRun{
		{Setup: fleetFronts, Round: 1, Results: []bench.LoadResult{load(300, 1000, 0), load(300, 1000, 0), load(300, 1000, 0)},
			SchedCPU: 150 * time.Millisecond, AllCPU: 900 * time.Millisecond, Decisions: 3000, DecisionP50: us(40), DecisionP99: us(900)},
		{Setup: fleetSingle, Round: 1, Results: []bench.LoadResult{load(400, 1500, 0), load(400, 1500, 0), load(400, 1500, 2)},
			SchedCPU: 900 * time.Millisecond, AllCPU: 900 * time.Millisecond, Decisions: 4500, DecisionP50: us(7), DecisionP99: us(500)},
	}
	r.replicaRows(replicaMeta{Scheduler: "r0", Front: "r1", Fronts: []string{"r1", "r2", "r3"}}, hops, fleets)
	var b strings.Builder
	if err := r.report.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"front − own p50 +80.00 µs (rounds +60.00 µs to +90.00 µs), goal ≤ +100.0 µs: met",
		"own − single p50 +10.00 µs (rounds +10.00 µs to +20.00 µs)",
		"front − own p50 +200.00 µs (rounds +50.00 µs to +200.00 µs)",
		"600.0 µs (500.0 µs–700.0 µs) ; 1.80 ms (1.50 ms–2.10 ms)",
		"own 0, front 1, single 0",
		"first: HTTP 503 (front)",
		"throughput: 3 fronts (r1, r2, r3) × 32 streams; the scheduler r0 serves no Envoy",
		"fronts / single 0.75× (per-round median, rounds 0.75–0.75×)",
		"| 900 (900–900)",
		"| 1200 (1200–1200)",
		// 150 ms over 3,000 decisions; the single replica 900 ms over 4,500.
		"| 50.0 µs (50.0 µs–50.0 µs)",
		"/ single's CPU per request 0.25× (per-round median, rounds 0.25–0.25×); the scheduler counted 3,000 decisions for 3,000 requests completed",
		"| 300.0 µs (300.0 µs–300.0 µs)",
		"/ single's 1.50×",
		"| 200.0 µs (200.0 µs–200.0 µs)",
		"fronts 0 of 3,000, single 2 of 4,500",
		"one replica without --leader-elect: 7.0 µs (7.0 µs–7.0 µs) ; 500.0 µs (500.0 µs–500.0 µs)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	var tgt bench.Target
	for _, tg := range r.report.Targets {
		if tg.Name == replicaHopTargetName {
			tgt = tg
		}
	}
	if tgt.Value != "+80.00 µs (rounds +60.00 µs to +90.00 µs; p50 front 660.0 µs, own 600.0 µs)" || tgt.Result() != "met" {
		t.Errorf("target: %q, %s", tgt.Value, tgt.Result())
	}

	// Without a round where both sides answered, the target stays
	// unmeasured.
	r = &runner{o: options{replicaConc: 32}, report: &bench.Report{Targets: newTargets()}}
	r.replicaRows(replicaMeta{}, []hopRun{{Round: 1, Results: []bench.InterleaveResult{res(hopOwn, 500, 1000, 0)}}}, nil)
	for _, tg := range r.report.Targets {
		if tg.Name == replicaHopTargetName && tg.Result() != "not measured" {
			t.Errorf("target without a front: %+v", tg)
		}
	}
}
