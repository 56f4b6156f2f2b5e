package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/test/bench"
	"github.com/tollgate/tollgate/test/etcdserver"
	"github.com/tollgate/tollgate/test/loopback"
)

const replicaSection = "Replica mode (etcd election, loopback)"

// Names of the hop's servers, as the interleave subcommand reports them.
const (
	hopOwn    = "own"    // the scheduler's own replica
	hopFront  = "front"  // a front: the request crosses the peer channel
	hopSingle = "single" // one replica without --leader-elect
	hopNull   = serverNull
)

// Names of the throughput phase's setups.
const (
	fleetFronts = "fronts"
	fleetSingle = "single"
)

// replicaElectionFlags are the replicas' election timing, as replica
// mode's failover tests run it: a lost scheduler is replaced in seconds.
var replicaElectionFlags = []string{"--leader-elect-lease-duration=2s", "--leader-elect-retry-period=200ms"}

// linkTimeout bounds the wait for one scheduler with every replica linked.
const linkTimeout = 30 * time.Second

// hopRun is one round of the hop measurement, as saved in replicas.json.
type hopRun struct {
	Round   int                      `json:"round"`
	Results []bench.InterleaveResult `json:"results"`
	// SchedP50 and SchedP99 are the scheduler replica's
	// tollgate_decision_latency_seconds over the round (both its own
	// stream's submits and the front's), SingleP50 and SingleP99 the
	// replica without --leader-elect's; zero when none was observed.
	SchedP50  time.Duration `json:"scheduler_decision_p50_ns,omitempty"`
	SchedP99  time.Duration `json:"scheduler_decision_p99_ns,omitempty"`
	SingleP50 time.Duration `json:"single_decision_p50_ns,omitempty"`
	SingleP99 time.Duration `json:"single_decision_p99_ns,omitempty"`
}

// result returns the named server's result of the round.
func (h *hopRun) result(name string) (*bench.InterleaveResult, bool) {
	for i := range h.Results {
		if h.Results[i].Name == name {
			return &h.Results[i], true
		}
	}
	return nil, false
}

// fleetRun is one throughput measurement, as saved in replicas.json: the
// three fronts driven at once, or the replica without --leader-elect
// driven by the same three loads.
type fleetRun struct {
	Setup   string             `json:"setup"`
	Round   int                `json:"round"`
	Results []bench.LoadResult `json:"results"`
	// SchedCPU is the CPU time of the process that scheduled (the elected
	// replica, or the single one) while the loads ran, warm-up included;
	// AllCPU that of every replica of the setup.
	SchedCPU time.Duration `json:"scheduler_cpu_ns"`
	AllCPU   time.Duration `json:"all_replicas_cpu_ns"`
	// Decisions is the scheduling process's
	// tollgate_decision_latency_seconds_count over the run; DecisionP50
	// and DecisionP99 its quantiles.
	Decisions   float64       `json:"decisions"`
	DecisionP50 time.Duration `json:"decision_p50_ns,omitempty"`
	DecisionP99 time.Duration `json:"decision_p99_ns,omitempty"`
}

// totals sums the loads of a run: requests per second in the measured
// window, requests completed over the whole run, errors, and the first
// error.
func (f *fleetRun) totals() (rps float64, completed, errs int, first string) {
	for _, res := range f.Results {
		rps += res.RPS
		completed += res.Completed
		errs += res.Errors
		if first == "" {
			first = res.FirstError
		}
	}
	return rps, completed, errs, first
}

// perRequest is the scheduling process's and every replica's CPU per
// completed request of the run.
func (f *fleetRun) perRequest() (sched, all float64, ok bool) {
	_, completed, _, _ := f.totals()
	if completed == 0 {
		return 0, 0, false
	}
	return float64(f.SchedCPU) / float64(completed), float64(f.AllCPU) / float64(completed), true
}

// replicaMeta describes the phase's replicas for the report.
type replicaMeta struct {
	Scheduler string   `json:"scheduler"`
	Front     string   `json:"hop_front"`
	Fronts    []string `json:"fronts"`
}

// replicasPhase measures replica mode: the latency of the peer hop at one
// stream, then the scheduler's throughput with three fronts, each against
// references in the same run.
func (r *runner) replicasPhase(ctx context.Context) (err error) {
	etcdBin, err := exec.LookPath("etcd")
	if err != nil {
		return fmt.Errorf("no etcd binary in PATH (%w): the replicas phase elects over a real etcd; "+etcdserver.Install, err)
	}
	tg, err := r.build(ctx, "./cmd/tollgate")
	if err != nil {
		return err
	}
	nullBin, err := r.build(ctx, "./test/bench/nullextproc")
	if err != nil {
		return err
	}
	var stops []func() error // in start order; run backwards
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			err = errors.Join(err, stops[i]())
		}
	}()
	w, waddr, err := r.startWorker(ctx, "replicas-worker")
	if err != nil {
		return err
	}
	stops = append(stops, w.stop)
	workers, err := r.writeWorkers("workers-replicas.yaml", waddr, 0)
	if err != nil {
		return err
	}
	null, err := startChild(ctx, "replicas-null", r.logs, []string{nullBin, "--endpoint", waddr})
	if err != nil {
		return err
	}
	stops = append(stops, null.stop)
	single, err := startChild(ctx, "replicas-single", r.logs, tollgateArgs(tg, workers))
	if err != nil {
		return err
	}
	stops = append(stops, single.stop)
	etcd, err := etcdserver.New(etcdBin, filepath.Join(r.tmp, "etcd-data"), filepath.Join(r.logs, "replicas-etcd.log"))
	if err != nil {
		return err
	}
	if err := etcd.Run(ctx); err != nil {
		return err
	}
	stops = append(stops, etcd.Stop)
	r.progress("replicas: etcd %s at %s", etcdBin, etcd.ClientURL)

	var reps []*child
	// The replicas stop before etcd, fronts first, so that no front
	// re-links to another scheduler while the phase ends.
	var repStops []func() error
	stops = append(stops, func() error {
		var errs []error
		for i := len(repStops) - 1; i >= 0; i-- {
			errs = append(errs, repStops[i]())
		}
		return errors.Join(errs...)
	})
	startReplica := func(id string) error {
		peerAddr, err := loopback.FreeAddr()
		if err != nil {
			return err
		}
		argv := tollgateArgs(tg, workers, append([]string{"--leader-elect", "--leader-elect-backend", "etcd",
			"--etcd-endpoints", etcd.ClientURL, "--peer-addr", peerAddr, "--leader-elect-identity", id}, replicaElectionFlags...)...)
		c, err := startChild(ctx, "replicas-"+id, r.logs, argv)
		if err != nil {
			return err
		}
		reps = append(reps, c)
		repStops = append(repStops, c.stop)
		return nil
	}
	ids := func() []string {
		var out []string
		for _, c := range reps {
			out = append(out, strings.TrimPrefix(c.name, "replicas-"))
		}
		return out
	}
	for _, id := range []string{"r0", "r1"} {
		if err := startReplica(id); err != nil {
			return err
		}
	}
	t0 := time.Now()
	sched, err := r.awaitScheduler(ctx, reps)
	if err != nil {
		return err
	}
	r.progress("replicas: %s schedules, %s linked, after %s", ids()[sched], strings.Join(ids(), ", "), time.Since(t0).Round(time.Millisecond))
	front := 1 - sched
	meta := replicaMeta{Scheduler: ids()[sched], Front: ids()[front]}

	hops, err := r.hopRounds(ctx, reps[sched], reps[front], single, null)
	if err != nil {
		return err
	}

	for _, id := range []string{"r2", "r3"} {
		if err := startReplica(id); err != nil {
			return err
		}
	}
	t0 = time.Now()
	sched2, err := r.awaitScheduler(ctx, reps)
	if err != nil {
		return err
	}
	if sched2 != sched {
		r.fail("replicas: the scheduler changed from %s to %s when two replicas joined; see %s", ids()[sched], ids()[sched2], r.logs)
		sched = sched2
		meta.Scheduler = ids()[sched]
	}
	r.progress("replicas: %s schedules, %s linked, after %s", ids()[sched], strings.Join(ids(), ", "), time.Since(t0).Round(time.Millisecond))
	var fronts []*child
	for i, c := range reps {
		if i != sched {
			fronts = append(fronts, c)
			meta.Fronts = append(meta.Fronts, ids()[i])
		}
	}
	fleets, err := r.fleetRounds(ctx, reps, sched, fronts, single)
	if err != nil {
		return err
	}
	// The scheduler must not have changed while the phase measured.
	if last, err := r.awaitScheduler(ctx, reps); err != nil {
		r.fail("replicas: after the measurements: %v", err)
	} else if last != sched {
		r.fail("replicas: the scheduler changed from %s to %s during the throughput rounds; see %s", ids()[sched], ids()[last], r.logs)
	}

	data, err := json.MarshalIndent(map[string]any{"replicas": meta, "hop": hops, "throughput": fleets}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.o.out, "replicas.json"), data, 0o644); err != nil {
		return err
	}
	r.replicaRows(meta, hops, fleets)
	r.note("Replica mode: one etcd (%s, a single member on loopback) and tollgate replicas started as the end-to-end phase's tollgate "+
		"plus `--leader-elect --leader-elect-backend etcd --peer-addr 127.0.0.1:PORT --leader-elect-identity rN %s`, in front of one "+
		"upstream process, next to one tollgate without --leader-elect (single) and the null ext_proc server on the same upstream. "+
		"Hop: two replicas, measured once one is the scheduler and the other linked (tollgate_leader, tollgate_peer_linked); a "+
		"fresh load process per round sends one closed-loop stream, BUFFERED, through a simulated Envoy (one gRPC connection) per "+
		"server, in blocks of %d requests that visit the scheduler's own replica, the front, single and null in turn (the first "+
		"server rotating per cycle): %d warm-up then %d measured requests per server and round, %d rounds (%d measured per server "+
		"in all). Decision latency is "+
		"the client's time from the request headers to the routing decision; request latency the whole exchange with the upstream's "+
		"instant answer. Differences are per round (the servers measured over the same seconds), median and range over rounds. "+
		"Throughput: two more replicas join; the elected replica serves no Envoy and the three others (fronts) are each driven by "+
		"%d closed-loop streams over 2 gRPC connections, all three loads in one load process, started together (%s warm-up, %s "+
		"window); single gets the same three loads at once (%d streams in all); the two setups alternate over %d rounds. CPU per "+
		"decision is the scheduler process's CPU time (/proc schedstat) during the run over every request the fronts completed; "+
		"all replicas' CPU per request adds the fronts'.",
		etcdVersion(ctx, etcdBin), strings.Join(replicaElectionFlags, " "), r.o.replicaBlock, r.o.replicaWarmup,
		hopPerRound(r.o.replicaRequests, r.o.replicaRounds), r.o.replicaRounds, hopPerRound(r.o.replicaRequests, r.o.replicaRounds)*r.o.replicaRounds,
		r.o.replicaConc, r.o.warmup, r.o.replicaDuration, 3*r.o.replicaConc, r.o.replicaRounds)
	return nil
}

// hopRounds runs the hop's rounds: a fresh interleave process per round
// through the scheduler's own replica, the front, single and null.
func (r *runner) hopRounds(ctx context.Context, own, front, single, null *child) ([]hopRun, error) {
	servers := []struct {
		name string
		c    *child
	}{{hopOwn, own}, {hopFront, front}, {hopSingle, single}, {hopNull, null}}
	var list []string
	for _, s := range servers {
		a, err := s.c.addr("grpc")
		if err != nil {
			return nil, err
		}
		list = append(list, s.name+"="+a)
	}
	ownMetrics, err := own.addr("metrics")
	if err != nil {
		return nil, err
	}
	singleMetrics, err := single.addr("metrics")
	if err != nil {
		return nil, err
	}
	perRound := hopPerRound(r.o.replicaRequests, r.o.replicaRounds)
	var runs []hopRun
	for round := 1; round <= r.o.replicaRounds; round++ {
		// Rotate the servers' order, so that no server always opens
		// the stream.
		k := (round - 1) % len(list)
		order := append(slices.Clone(list[k:]), list[:k]...)
		b0, err := scrape(ctx, ownMetrics)
		if err != nil {
			return nil, err
		}
		s0, err := scrape(ctx, singleMetrics)
		if err != nil {
			return nil, err
		}
		var res []bench.InterleaveResult
		if err := runJSON(ctx, fmt.Sprintf("replicas-hop-r%d", round), r.logs, []string{r.self, "interleave",
			"--servers", strings.Join(order, ","), "--mode", string(bench.ModeBuffered),
			"--requests", strconv.Itoa(perRound), "--warmup", strconv.Itoa(r.o.replicaWarmup),
			"--block", strconv.Itoa(r.o.replicaBlock)}, &res); err != nil {
			return nil, err
		}
		b1, err := scrape(ctx, ownMetrics)
		if err != nil {
			return nil, err
		}
		s1, err := scrape(ctx, singleMetrics)
		if err != nil {
			return nil, err
		}
		run := hopRun{Round: round, Results: res}
		run.SchedP50, run.SchedP99 = histogramQuantiles(b0, b1)
		run.SingleP50, run.SingleP99 = histogramQuantiles(s0, s1)
		var parts []string
		for _, name := range []string{hopOwn, hopFront, hopSingle, hopNull} {
			if x, ok := run.result(name); ok {
				parts = append(parts, fmt.Sprintf("%s %s/%s errors %d", name, bench.FormatDuration(x.DecisionP50),
					bench.FormatDuration(x.TotalP50), x.Errors))
			}
		}
		r.progress("replicas hop round %d/%d, decision/request p50: %s", round, r.o.replicaRounds, strings.Join(parts, ", "))
		runs = append(runs, run)
	}
	return runs, nil
}

// hopPerRound is the hop's measured requests per server and round: the
// total split evenly between the rounds, rounded up.
func hopPerRound(total, rounds int) int {
	return (total + rounds - 1) / max(rounds, 1)
}

// histogramQuantiles returns the p50 and p99 of the decision histogram
// between two scrapes, zero when nothing was observed.
func histogramQuantiles(before, after []bench.Sample) (p50, p99 time.Duration) {
	q50, _ := bench.HistogramQuantile(before, after, decisionMetric, 0.50)
	q99, _ := bench.HistogramQuantile(before, after, decisionMetric, 0.99)
	return time.Duration(q50 * float64(time.Second)), time.Duration(q99 * float64(time.Second))
}

// fleetRounds alternates the three fronts and single under the same three
// loads.
func (r *runner) fleetRounds(ctx context.Context, reps []*child, sched int, fronts []*child, single *child) ([]fleetRun, error) {
	ext := map[string][]string{}
	for _, f := range fronts {
		a, err := f.addr("grpc")
		if err != nil {
			return nil, err
		}
		ext[fleetFronts] = append(ext[fleetFronts], a)
	}
	sa, err := single.addr("grpc")
	if err != nil {
		return nil, err
	}
	for range fronts {
		ext[fleetSingle] = append(ext[fleetSingle], sa)
	}
	schedOf := map[string]*child{fleetFronts: reps[sched], fleetSingle: single}
	allOf := map[string][]*child{fleetFronts: reps, fleetSingle: {single}}
	var runs []fleetRun
	for round := 1; round <= r.o.replicaRounds; round++ {
		order := []string{fleetFronts, fleetSingle}
		if round%2 == 0 {
			order[0], order[1] = order[1], order[0]
		}
		for _, setup := range order {
			metrics, err := schedOf[setup].addr("metrics")
			if err != nil {
				return nil, err
			}
			before, err := scrape(ctx, metrics)
			if err != nil {
				return nil, err
			}
			cpu0, err := cpuOf(schedOf[setup], allOf[setup])
			if err != nil {
				return nil, err
			}
			var res []bench.LoadResult
			if err := runJSON(ctx, fmt.Sprintf("replicas-load-r%d-%s", round, setup), r.logs, []string{r.self, "loads",
				"--ext", strings.Join(ext[setup], ","), "--mode", string(bench.ModeBuffered),
				"--concurrency", strconv.Itoa(r.o.replicaConc), "--warmup", r.o.warmup.String(),
				"--duration", r.o.replicaDuration.String()}, &res); err != nil {
				return nil, err
			}
			cpu1, err := cpuOf(schedOf[setup], allOf[setup])
			if err != nil {
				return nil, err
			}
			after, err := scrape(ctx, metrics)
			if err != nil {
				return nil, err
			}
			run := fleetRun{Setup: setup, Round: round, Results: res, SchedCPU: cpu1[0] - cpu0[0], AllCPU: cpu1[1] - cpu0[1]}
			n0, _ := bench.SumSamples(before, decisionMetric+"_count")
			n1, _ := bench.SumSamples(after, decisionMetric+"_count")
			run.Decisions = n1 - n0
			run.DecisionP50, run.DecisionP99 = histogramQuantiles(before, after)
			rps, completed, errs, _ := run.totals()
			sc, all, _ := run.perRequest()
			r.progress("replicas throughput round %d/%d %-6s %6.0f req/s, scheduler CPU %s/decision, all replicas %s/request, "+
				"%.0f decisions for %d completed, errors %d", round, r.o.replicaRounds, setup, rps,
				bench.FormatDuration(time.Duration(sc)), bench.FormatDuration(time.Duration(all)), run.Decisions, completed, errs)
			runs = append(runs, run)
		}
	}
	return runs, nil
}

// cpuOf returns the CPU time so far of sched and of every process of all.
func cpuOf(sched *child, all []*child) ([2]time.Duration, error) {
	var out [2]time.Duration
	s, err := bench.ProcCPU(sched.pid())
	if err != nil {
		return out, err
	}
	out[0] = s
	for _, c := range all {
		v, err := bench.ProcCPU(c.pid())
		if err != nil {
			return out, err
		}
		out[1] += v
	}
	return out, nil
}

// awaitScheduler polls the replicas' /metrics until exactly one is the
// scheduler (tollgate_leader 1) and every one is linked
// (tollgate_peer_linked 1), and returns the scheduler's index.
func (r *runner) awaitScheduler(ctx context.Context, reps []*child) (int, error) {
	deadline := time.Now().Add(linkTimeout)
	var last string
	for {
		states := make([]replicaState, len(reps))
		var seen []string
		for i, c := range reps {
			select {
			case <-c.done:
				return -1, fmt.Errorf("%s exited (%w); see %s:\n%s", c.name, c.err, c.log, tail(c.log))
			default:
			}
			st := replicaState{leader: -1, linked: -1}
			if m, err := c.addr("metrics"); err == nil {
				if samples, err := scrape(ctx, m); err == nil {
					if v, ok := bench.SumSamples(samples, "tollgate_leader"); ok {
						st.leader = v
					}
					if v, ok := bench.SumSamples(samples, "tollgate_peer_linked"); ok {
						st.linked = v
					}
				}
			}
			states[i] = st
			seen = append(seen, fmt.Sprintf("%s leader=%g linked=%g", c.name, st.leader, st.linked))
		}
		if i, ok := pickScheduler(states); ok {
			return i, nil
		}
		last = strings.Join(seen, ", ")
		if time.Now().After(deadline) {
			var logs []string
			for _, c := range reps {
				logs = append(logs, fmt.Sprintf("%s:\n%s", c.log, tail(c.log)))
			}
			return -1, fmt.Errorf("no single scheduler with every replica linked within %v (last: %s; -1: metric absent); logs:\n%s",
				linkTimeout, last, strings.Join(logs, "\n"))
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// replicaState is what one replica's /metrics said: tollgate_leader and
// tollgate_peer_linked, -1 when absent or unreachable.
type replicaState struct{ leader, linked float64 }

// pickScheduler returns the index of the one replica that is the
// scheduler, when there is exactly one and every replica is linked.
func pickScheduler(states []replicaState) (int, bool) {
	sched := -1
	for i, s := range states {
		if s.linked != 1 {
			return -1, false
		}
		if s.leader == 1 {
			if sched >= 0 {
				return -1, false
			}
			sched = i
		}
	}
	return sched, sched >= 0
}

// etcdVersion is the first line of `etcd --version`, or "etcd".
func etcdVersion(ctx context.Context, bin string) string {
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "etcd"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}

// replicaRows adds the phase's rows and reads the hop target.
func (r *runner) replicaRows(meta replicaMeta, hops []hopRun, fleets []fleetRun) {
	r.hopRows(meta, hops)
	r.fleetRows(meta, fleets)
}

// hopFigure is one figure of a server's hop result.
type hopFigure func(*bench.InterleaveResult) time.Duration

var (
	decisionP50 hopFigure = func(x *bench.InterleaveResult) time.Duration { return x.DecisionP50 }
	decisionP99 hopFigure = func(x *bench.InterleaveResult) time.Duration { return x.DecisionP99 }
	totalP50    hopFigure = func(x *bench.InterleaveResult) time.Duration { return x.TotalP50 }
	totalP99    hopFigure = func(x *bench.InterleaveResult) time.Duration { return x.TotalP99 }
)

// hopValues returns a figure of the named server over the rounds, leaving
// out rounds where it is missing.
func hopValues(hops []hopRun, name string, f hopFigure) []float64 {
	var out []float64
	for i := range hops {
		if x, ok := hops[i].result(name); ok && f(x) > 0 {
			out = append(out, float64(f(x)))
		}
	}
	return out
}

// hopDiffs returns a figure of server a minus that of b, per round where
// both have it.
func hopDiffs(hops []hopRun, a, b string, f hopFigure) []float64 {
	var out []float64
	for i := range hops {
		x, okA := hops[i].result(a)
		y, okB := hops[i].result(b)
		if okA && okB && f(x) > 0 && f(y) > 0 {
			out = append(out, float64(f(x)-f(y)))
		}
	}
	return out
}

// durCell is a duration's median (range) over rounds, or "–".
func durCell(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf("%s (%s–%s)", bench.FormatDuration(time.Duration(bench.Median(v))),
		bench.FormatDuration(time.Duration(slices.Min(v))), bench.FormatDuration(time.Duration(slices.Max(v))))
}

// diffText is a difference's median and range over rounds.
func diffText(v []float64) string {
	return fmt.Sprintf("%s (rounds %s to %s)", signedNs(bench.Median(v)), signedNs(slices.Min(v)), signedNs(slices.Max(v)))
}

func (r *runner) hopRows(meta replicaMeta, hops []hopRun) {
	if len(hops) == 0 {
		return
	}
	cases := map[string]string{
		hopOwn:    fmt.Sprintf("hop, 1 stream: through the scheduler's own replica (%s)", meta.Scheduler),
		hopFront:  fmt.Sprintf("hop, 1 stream: through a front (%s → %s over the peer channel)", meta.Front, meta.Scheduler),
		hopSingle: "hop, 1 stream: one replica without --leader-elect",
	}
	pair := func(name string, p50, p99 hopFigure) string {
		return durCell(hopValues(hops, name, p50)) + " ; " + durCell(hopValues(hops, name, p99))
	}
	const (
		decMeasure = "decision latency p50 ; p99 (client: headers → route)"
		reqMeasure = "request latency p50 ; p99 (client: whole exchange)"
	)
	for _, name := range []string{hopOwn, hopFront, hopSingle} {
		dec := bench.Row{Section: replicaSection, Case: cases[name], Measure: decMeasure,
			Value: pair(name, decisionP50, decisionP99), Baseline: pair(hopNull, decisionP50, decisionP99)}
		req := bench.Row{Section: replicaSection, Case: cases[name], Measure: reqMeasure,
			Value: pair(name, totalP50, totalP99), Baseline: pair(hopNull, totalP50, totalP99)}
		switch name {
		case hopFront:
			if d := hopDiffs(hops, hopFront, hopOwn, decisionP50); len(d) > 0 {
				diff := bench.Median(d)
				met := diff <= float64(replicaHopTarget)
				dec.Target = fmt.Sprintf("front − own p50 %s, goal ≤ +%s: %s", diffText(d), bench.FormatDuration(replicaHopTarget), bench.Verdict(met))
				r.measured(replicaHopTargetName, fmt.Sprintf("%s (rounds %s to %s; p50 front %s, own %s)", signedNs(diff),
					signedNs(slices.Min(d)), signedNs(slices.Max(d)),
					bench.FormatDuration(time.Duration(bench.Median(hopValues(hops, hopFront, decisionP50)))),
					bench.FormatDuration(time.Duration(bench.Median(hopValues(hops, hopOwn, decisionP50))))), met)
			} else {
				dec.Target = "not measured: no round where both answered"
			}
			if d := hopDiffs(hops, hopFront, hopOwn, totalP50); len(d) > 0 {
				req.Target = "front − own p50 " + diffText(d)
			}
		case hopOwn:
			if d := hopDiffs(hops, hopOwn, hopSingle, decisionP50); len(d) > 0 {
				dec.Target = "own − single p50 " + diffText(d)
			}
			if d := hopDiffs(hops, hopOwn, hopSingle, totalP50); len(d) > 0 {
				req.Target = "own − single p50 " + diffText(d)
			}
		case hopSingle:
			if d := hopDiffs(hops, hopSingle, hopNull, decisionP50); len(d) > 0 {
				dec.Target = "single − null p50 " + diffText(d)
			}
			if d := hopDiffs(hops, hopSingle, hopNull, totalP50); len(d) > 0 {
				req.Target = "single − null p50 " + diffText(d)
			}
		}
		r.report.Add(dec)
		r.report.Add(req)
	}
	var s50, s99, g50, g99 []float64
	for _, h := range hops {
		if h.SchedP50 > 0 {
			s50, s99 = append(s50, float64(h.SchedP50)), append(s99, float64(h.SchedP99))
		}
		if h.SingleP50 > 0 {
			g50, g99 = append(g50, float64(h.SingleP50)), append(g99, float64(h.SingleP99))
		}
	}
	r.report.Add(bench.Row{Section: replicaSection, Case: "hop, 1 stream: the scheduler's own submits and the front's",
		Measure: "scheduler submit overhead p50 ; p99 (" + decisionMetric + ")",
		Value:   durCell(s50) + " ; " + durCell(s99),
		Target:  "one replica without --leader-elect: " + durCell(g50) + " ; " + durCell(g99)})
	errs, first := map[string]int{}, ""
	for _, h := range hops {
		for _, x := range h.Results {
			errs[x.Name] += x.Errors
			if first == "" {
				first = x.FirstError
			}
		}
	}
	row := bench.Row{Section: replicaSection, Case: "hop, 1 stream", Measure: "requests not answered 200, all rounds",
		Value:    fmt.Sprintf("own %d, front %d, single %d", errs[hopOwn], errs[hopFront], errs[hopSingle]),
		Baseline: strconv.Itoa(errs[hopNull])}
	if first != "" {
		row.Target = "first: " + first
	}
	r.report.Add(row)
}

func (r *runner) fleetRows(meta replicaMeta, fleets []fleetRun) {
	if len(fleets) == 0 {
		return
	}
	type figs struct {
		rps, sched, all, d50, d99 []float64
		errs, completed           int
		decisions                 float64
		first                     string
	}
	fig := map[string]*figs{fleetFronts: {}, fleetSingle: {}}
	type pair struct{ fronts, single *fleetRun }
	rounds := map[int]*pair{}
	for i := range fleets {
		f := &fleets[i]
		g := fig[f.Setup]
		if g == nil {
			continue
		}
		rps, completed, errs, first := f.totals()
		g.rps = append(g.rps, rps)
		if sc, all, ok := f.perRequest(); ok {
			g.sched, g.all = append(g.sched, sc), append(g.all, all)
		}
		if f.DecisionP50 > 0 {
			g.d50, g.d99 = append(g.d50, float64(f.DecisionP50)), append(g.d99, float64(f.DecisionP99))
		}
		g.errs += errs
		g.completed += completed
		g.decisions += f.Decisions
		if g.first == "" {
			g.first = first
		}
		p := rounds[f.Round]
		if p == nil {
			p = &pair{}
			rounds[f.Round] = p
		}
		if f.Setup == fleetFronts {
			p.fronts = f
		} else {
			p.single = f
		}
	}
	// paired returns the per-round ratios fronts/single of a figure.
	paired := func(get func(*fleetRun) (float64, bool)) []float64 {
		var out []float64
		for _, p := range rounds {
			if p.fronts == nil || p.single == nil {
				continue
			}
			a, okA := get(p.fronts)
			b, okB := get(p.single)
			if okA && okB && a > 0 && b > 0 {
				out = append(out, a/b)
			}
		}
		return out
	}
	ratioText := func(v []float64, what string) string {
		if len(v) == 0 {
			return "–"
		}
		return fmt.Sprintf("%s %.2f× (per-round median, rounds %.2f–%.2f×)", what, bench.Median(v), slices.Min(v), slices.Max(v))
	}
	count := func(v []float64) string {
		if len(v) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.0f (%.0f–%.0f)", bench.Median(v), slices.Min(v), slices.Max(v))
	}
	fr, sg := fig[fleetFronts], fig[fleetSingle]
	conc := r.o.replicaConc
	frontsCase := fmt.Sprintf("throughput: 3 fronts (%s) × %d streams; the scheduler %s serves no Envoy", strings.Join(meta.Fronts, ", "), conc, meta.Scheduler)
	singleCase := fmt.Sprintf("throughput: one replica without --leader-elect, 3 loads × %d streams", conc)
	r.report.Add(bench.Row{Section: replicaSection, Case: frontsCase, Measure: "requests per second, the three loads together",
		Value: count(fr.rps), Target: ratioText(paired(func(f *fleetRun) (float64, bool) {
			rps, _, _, _ := f.totals()
			return rps, true
		}), "fronts / single")})
	r.report.Add(bench.Row{Section: replicaSection, Case: singleCase, Measure: "requests per second, the three loads together",
		Value: count(sg.rps)})
	r.report.Add(bench.Row{Section: replicaSection, Case: frontsCase, Measure: "scheduler CPU per decision",
		Value: durCell(fr.sched), Target: ratioText(paired(func(f *fleetRun) (float64, bool) {
			sc, _, ok := f.perRequest()
			return sc, ok
		}), "/ single's CPU per request") + fmt.Sprintf("; the scheduler counted %s decisions for %s requests completed",
			bench.FormatCount(fr.decisions), bench.FormatCount(float64(fr.completed)))})
	r.report.Add(bench.Row{Section: replicaSection, Case: frontsCase, Measure: "CPU per request, all four replicas",
		Value: durCell(fr.all), Target: ratioText(paired(func(f *fleetRun) (float64, bool) {
			_, all, ok := f.perRequest()
			return all, ok
		}), "/ single's")})
	r.report.Add(bench.Row{Section: replicaSection, Case: singleCase, Measure: "server CPU per request",
		Value: durCell(sg.sched), Target: fmt.Sprintf("%s decisions for %s requests completed",
			bench.FormatCount(sg.decisions), bench.FormatCount(float64(sg.completed)))})
	r.report.Add(bench.Row{Section: replicaSection, Case: frontsCase, Measure: "scheduler submit overhead p50 ; p99 (" + decisionMetric + ")",
		Value: durCell(fr.d50) + " ; " + durCell(fr.d99), Target: "one replica without --leader-elect: " + durCell(sg.d50) + " ; " + durCell(sg.d99)})
	row := bench.Row{Section: replicaSection, Case: "throughput", Measure: "requests not answered 200, all rounds",
		Value: fmt.Sprintf("fronts %d of %s, single %d of %s", fr.errs, bench.FormatCount(float64(fr.completed)),
			sg.errs, bench.FormatCount(float64(sg.completed)))}
	if first := fr.first + sg.first; first != "" {
		row.Target = "first: " + first
	}
	r.report.Add(row)
}

// runInterleave runs one bench.RunInterleaved and prints its result as
// JSON.
func runInterleave(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("interleave", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg bench.InterleaveConfig
	servers := fs.String("servers", "", "NAME=ADDR[,NAME=ADDR...]: the ext_proc servers, in the order of each cycle (required)")
	cfg.Mode = bench.ModeBuffered
	fs.Var(&cfg.Mode, "mode", "processing mode: buffered or duplex")
	fs.IntVar(&cfg.Requests, "requests", 3000, "measured requests per server")
	fs.IntVar(&cfg.Warmup, "warmup", 300, "unmeasured requests per server first")
	fs.IntVar(&cfg.Block, "block", 50, "requests sent to one server before the next")
	if err := parse(fs, args); err != nil {
		return err
	}
	var err error
	if cfg.Servers, err = parseServers(*servers); err != nil {
		return err
	}
	res, err := bench.RunInterleaved(ctx, cfg)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}

// parseServers parses NAME=ADDR[,NAME=ADDR...] with distinct names.
func parseServers(list string) ([]bench.InterleaveServer, error) {
	var out []bench.InterleaveServer
	for item := range strings.SplitSeq(list, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		name, addr, ok := strings.Cut(item, "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("--servers: %q is not NAME=ADDR", item)
		}
		if slices.ContainsFunc(out, func(s bench.InterleaveServer) bool { return s.Name == name }) {
			return nil, fmt.Errorf("--servers: %q named twice", name)
		}
		out = append(out, bench.InterleaveServer{Name: name, Addr: addr})
	}
	if len(out) == 0 {
		return nil, errors.New("--servers is required")
	}
	return out, nil
}

// runLoads runs one bench.LoadConfig per --ext address at once and prints
// their results as JSON.
func runLoads(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loads", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg bench.LoadConfig
	ext := fs.String("ext", "", "ADDR[,ADDR...]: one load per address, an address may repeat (required)")
	cfg.Mode = bench.ModeBuffered
	fs.Var(&cfg.Mode, "mode", "processing mode: buffered or duplex")
	fs.IntVar(&cfg.Concurrency, "concurrency", 32, "requests in flight per load")
	fs.IntVar(&cfg.Conns, "conns", 2, "gRPC connections per load")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "unmeasured warm-up")
	fs.DurationVar(&cfg.Duration, "duration", 3*time.Second, "measured window")
	if err := parse(fs, args); err != nil {
		return err
	}
	var cfgs []bench.LoadConfig
	for a := range strings.SplitSeq(*ext, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c := cfg
			c.ExtProcAddr = a
			cfgs = append(cfgs, c)
		}
	}
	if len(cfgs) == 0 {
		return errors.New("--ext is required")
	}
	res, err := bench.RunLoads(ctx, cfgs)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}
