package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/test/bench"
)

// The two ext_proc servers of the end-to-end phase.
const (
	serverNull     = "null"
	serverTollgate = "tollgate"
)

// e2eRun is one end-to-end measurement, as saved in e2e.json.
type e2eRun struct {
	Server string           `json:"server"`
	Round  int              `json:"round"`
	Result bench.LoadResult `json:"result"`
	// CPUPerRequest is the server process's CPU time while the load ran
	// (warm-up included) over every request it completed.
	CPUPerRequest time.Duration `json:"server_cpu_per_request_ns"`
	// DecisionP50 and DecisionP99 are tollgate's own scheduler decision
	// latency (tollgate_decision_latency_seconds, bucket-interpolated) over
	// this run, warm-up included; zero for the null server.
	DecisionP50 time.Duration `json:"decision_p50_ns,omitempty"`
	DecisionP99 time.Duration `json:"decision_p99_ns,omitempty"`
}

// decisionMetric is tollgate's histogram of scheduler decision latency.
const decisionMetric = "tollgate_decision_latency_seconds"

// scrape fetches and parses a server's /metrics.
func scrape(ctx context.Context, metricsAddr string) ([]bench.Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return bench.ParsePromText(string(body))
}

// stack is the processes of the end-to-end phase.
type stack struct {
	worker, null, tollgate *child
	workersFile            string
}

func (s *stack) stop() error {
	var errs []error
	for _, c := range []*child{s.tollgate, s.null, s.worker} {
		if c != nil {
			errs = append(errs, c.stop())
		}
	}
	return errors.Join(errs...)
}

// startWorker starts the upstream process and returns it with its address.
func (r *runner) startWorker(ctx context.Context, name string) (*child, string, error) {
	w, err := startChild(ctx, name, r.logs, []string{r.self, "worker"})
	if err != nil {
		return nil, "", err
	}
	addr, err := w.addr("http")
	if err != nil {
		_ = w.stop()
		return nil, "", err
	}
	return w, addr, nil
}

// writeWorkers writes a workers file with one worker at addr.
func (r *runner) writeWorkers(name, addr string, slots int) (string, error) {
	p := filepath.Join(r.tmp, name)
	line := fmt.Sprintf("workers:\n- {id: w0, address: %q", addr)
	if slots > 0 {
		line += ", max_running_requests: " + strconv.Itoa(slots)
	}
	return p, os.WriteFile(p, []byte(line+"}\n"), 0o644)
}

// tollgateArgs are the flags of every tollgate process of the run.
func tollgateArgs(bin, workersFile string, extra ...string) []string {
	return append([]string{bin, "serve", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
		"--workers", workersFile, "--tokenizer=estimate", "--drain-delay", "0", "--shutdown-timeout", "2s"}, extra...)
}

// startStack builds and starts the upstream, the null server and tollgate.
func (r *runner) startStack(ctx context.Context) (*stack, error) {
	tg, err := r.build(ctx, "./cmd/tollgate")
	if err != nil {
		return nil, err
	}
	null, err := r.build(ctx, "./test/bench/nullextproc")
	if err != nil {
		return nil, err
	}
	s := &stack{}
	var addr string
	if s.worker, addr, err = r.startWorker(ctx, "e2e-worker"); err != nil {
		return nil, err
	}
	if s.workersFile, err = r.writeWorkers("workers-e2e.yaml", addr, 0); err != nil {
		return nil, errors.Join(err, s.stop())
	}
	if s.null, err = startChild(ctx, "e2e-null", r.logs, []string{null, "--endpoint", addr}); err != nil {
		return nil, errors.Join(err, s.stop())
	}
	if s.tollgate, err = startChild(ctx, "e2e-tollgate", r.logs, tollgateArgs(tg, s.workersFile)); err != nil {
		return nil, errors.Join(err, s.stop())
	}
	return s, nil
}

// load runs one measurement in its own process.
func (r *runner) load(ctx context.Context, name, addr string, m bench.Mode, c int, warmup, d time.Duration) (*bench.LoadResult, error) {
	var res bench.LoadResult
	err := runJSON(ctx, name, r.logs, []string{r.self, "load", "--ext", addr, "--mode", string(m),
		"--concurrency", strconv.Itoa(c), "--warmup", warmup.String(), "--duration", d.String()}, &res)
	return &res, err
}

// e2ePhase alternates the null server and tollgate over every mode,
// concurrency and round, and reports the medians.
func (r *runner) e2ePhase(ctx context.Context) (err error) {
	s, err := r.startStack(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.stop()) }()
	addrs, pids := map[string]string{}, map[string]int{}
	for name, c := range map[string]*child{serverNull: s.null, serverTollgate: s.tollgate} {
		if addrs[name], err = c.addr("grpc"); err != nil {
			return err
		}
		pids[name] = c.pid()
	}
	metricsAddr, err := s.tollgate.addr("metrics")
	if err != nil {
		return err
	}
	all := map[bench.Mode][]e2eRun{}
	for _, m := range []bench.Mode{bench.ModeBuffered, bench.ModeDuplex} {
		for round := 1; round <= r.o.rounds; round++ {
			for ci, c := range r.o.conc {
				order := []string{serverNull, serverTollgate}
				if (round+ci)%2 == 0 {
					order[0], order[1] = order[1], order[0]
				}
				for _, srv := range order {
					name := fmt.Sprintf("load-%s-c%d-r%d-%s", m, c, round, srv)
					cpu0, err := bench.ProcCPU(pids[srv])
					if err != nil {
						return err
					}
					var before []bench.Sample
					if srv == serverTollgate {
						if before, err = scrape(ctx, metricsAddr); err != nil {
							return err
						}
					}
					res, err := r.load(ctx, name, addrs[srv], m, c, r.o.warmup, r.o.duration)
					if err != nil {
						return err
					}
					cpu1, err := bench.ProcCPU(pids[srv])
					if err != nil {
						return err
					}
					run := e2eRun{Server: srv, Round: round, Result: *res}
					if res.Completed > 0 {
						run.CPUPerRequest = (cpu1 - cpu0) / time.Duration(res.Completed)
					}
					if srv == serverTollgate {
						after, err := scrape(ctx, metricsAddr)
						if err != nil {
							return err
						}
						p50, _ := bench.HistogramQuantile(before, after, decisionMetric, 0.50)
						p99, _ := bench.HistogramQuantile(before, after, decisionMetric, 0.99)
						run.DecisionP50 = time.Duration(p50 * float64(time.Second))
						run.DecisionP99 = time.Duration(p99 * float64(time.Second))
					}
					r.progress("e2e %s round %d/%d c=%d %-8s %6.0f req/s  p50 %-9s p99 %-9s  server CPU %s/req  errors %d",
						m, round, r.o.rounds, c, srv, res.RPS, bench.FormatDuration(latency(m, res, 50)),
						bench.FormatDuration(latency(m, res, 99)), bench.FormatDuration(run.CPUPerRequest), res.Errors)
					all[m] = append(all[m], run)
				}
			}
		}
	}
	var procs2 []e2eRun
	if r.serverProcs() != smallProcs {
		if procs2, err = r.e2eSmallProcs(ctx, s); err != nil {
			return err
		}
	}
	r.note("End-to-end: tollgate (`tollgate serve --tokenizer=estimate`, default flags, a workers file with one worker) and "+
		"the null ext_proc server (test/bench/nullextproc: answers every message at once, same reply shapes and route) each run "+
		"in their own process in front of one upstream process that answers a one-token completion at once. Each measurement "+
		"is a fresh load process (test/envoysim over loopback TCP, 2 gRPC connections, closed loop, 2 KiB /v1/completions "+
		"bodies with a shared first half) with a %s warm-up and a %s window; %d rounds alternate the two servers. Cells are "+
		"median (min–max) over rounds; ratios are tollgate/null of the medians. A target is read from the median of the "+
		"per-round ratios (the two servers of a round measured back to back, so that the machine's drifting load cancels); "+
		"the Targets table gives their range over the rounds and the medians of the two servers. BUFFERED latency is the whole request as the "+
		"client sees it; FULL_DUPLEX_STREAMED latency is from the request headers to the route plus the echoed body. Server "+
		"CPU per request is the server process's CPU time during the load over the requests it completed. Scheduler decision "+
		"latency is tollgate's own tollgate_decision_latency_seconds (from a stream handing its request to the dispatcher until "+
		"the scheduler dispatched, queued or rejected it; queue time excluded), interpolated within its buckets over each run.",
		r.o.warmup, r.o.duration, r.o.rounds)
	saved := map[string][]e2eRun{}
	for m, runs := range all {
		saved[string(m)] = runs
	}
	if len(procs2) > 0 {
		saved[fmt.Sprintf("%s-gomaxprocs%d", bench.ModeBuffered, smallProcs)] = procs2
	}
	data, err := json.MarshalIndent(saved, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.o.out, "e2e.json"), data, 0o644); err != nil {
		return err
	}
	r.e2eRows(bench.ModeBuffered, all[bench.ModeBuffered])
	r.smallProcsRows(all[bench.ModeBuffered], procs2)
	r.e2eRows(bench.ModeDuplex, all[bench.ModeDuplex])
	return nil
}

// smallProcs is the GOMAXPROCS of the small-server case: a pod of two
// cores on a larger machine.
const (
	smallProcs = 2
	smallConc  = 64
)

// serverProcs is the GOMAXPROCS the servers of the run get by default:
// this process's, whose environment and CPU limits they inherit.
func (r *runner) serverProcs() int { return runtime.GOMAXPROCS(0) }

// smallProcsCase labels the small-server rows.
var smallProcsCase = fmt.Sprintf("concurrency %d, servers at GOMAXPROCS=%d", smallConc, smallProcs)

// e2eSmallProcs measures BUFFERED at smallConc streams against a second
// null server and tollgate started with GOMAXPROCS=smallProcs, in front
// of the same upstream, alternating them over the rounds.
func (r *runner) e2eSmallProcs(ctx context.Context, s *stack) (runs []e2eRun, err error) {
	tg, err := r.build(ctx, "./cmd/tollgate")
	if err != nil {
		return nil, err
	}
	null, err := r.build(ctx, "./test/bench/nullextproc")
	if err != nil {
		return nil, err
	}
	waddr, err := s.worker.addr("http")
	if err != nil {
		return nil, err
	}
	env := []string{fmt.Sprintf("GOMAXPROCS=%d", smallProcs)}
	servers := map[string]*child{}
	defer func() {
		for _, c := range servers {
			err = errors.Join(err, c.stop())
		}
	}()
	if servers[serverNull], err = startChildEnv(ctx, "e2e-null-procs2", r.logs, []string{null, "--endpoint", waddr}, env); err != nil {
		return nil, err
	}
	if servers[serverTollgate], err = startChildEnv(ctx, "e2e-tollgate-procs2", r.logs, tollgateArgs(tg, s.workersFile), env); err != nil {
		return nil, err
	}
	for round := 1; round <= r.o.rounds; round++ {
		order := []string{serverNull, serverTollgate}
		if round%2 == 0 {
			order[0], order[1] = order[1], order[0]
		}
		for _, srv := range order {
			addr, err := servers[srv].addr("grpc")
			if err != nil {
				return nil, err
			}
			cpu0, err := bench.ProcCPU(servers[srv].pid())
			if err != nil {
				return nil, err
			}
			res, err := r.load(ctx, fmt.Sprintf("load-procs2-c%d-r%d-%s", smallConc, round, srv), addr, bench.ModeBuffered, smallConc, r.o.warmup, r.o.duration)
			if err != nil {
				return nil, err
			}
			cpu1, err := bench.ProcCPU(servers[srv].pid())
			if err != nil {
				return nil, err
			}
			run := e2eRun{Server: srv, Round: round, Result: *res}
			if res.Completed > 0 {
				run.CPUPerRequest = (cpu1 - cpu0) / time.Duration(res.Completed)
			}
			r.progress("e2e buffered GOMAXPROCS=%d round %d/%d c=%d %-8s %6.0f req/s  p50 %-9s  server CPU %s/req  errors %d",
				smallProcs, round, r.o.rounds, smallConc, srv, res.RPS, bench.FormatDuration(res.TotalP50),
				bench.FormatDuration(run.CPUPerRequest), res.Errors)
			runs = append(runs, run)
		}
	}
	return runs, nil
}

// smallProcsRows adds the small-server case: its own runs, or, when the
// run's servers already had GOMAXPROCS=smallProcs, a pointer to the
// BUFFERED rows at smallConc streams.
func (r *runner) smallProcsRows(buffered, procs2 []e2eRun) {
	if len(procs2) > 0 {
		r.e2eCase(bench.ModeBuffered, procs2, smallConc, smallProcsCase, false)
		r.note("End-to-end, %s: a second null server and tollgate started with GOMAXPROCS=%d (a two-core pod on this %d-CPU machine), "+
			"same upstream, load and rounds as the BUFFERED rows; no target of its own.", smallProcsCase, smallProcs, r.report.CPUs)
		return
	}
	row := bench.Row{Section: e2eSections[bench.ModeBuffered], Case: smallProcsCase,
		Measure: "throughput ; p50 ; server CPU per request, tollgate / null (per-round medians)"}
	if !slices.Contains(r.o.conc, smallConc) {
		row.Value = fmt.Sprintf("not measured: -concurrency has no %d", smallConc)
		r.report.Add(row)
		return
	}
	var cells []string
	for _, kind := range []e2eMeasure{measureThroughput, measureP50, measureCPU} {
		pr := pairedRatios(bench.ModeBuffered, buffered, smallConc, kind)
		if len(pr) == 0 {
			cells = append(cells, "–")
			continue
		}
		cells = append(cells, fmt.Sprintf("%.2f×", bench.Median(pr)))
	}
	row.Value = strings.Join(cells, " ; ")
	row.Target = fmt.Sprintf("the concurrency %d rows above: this run's servers already had GOMAXPROCS %d", smallConc, smallProcs)
	r.report.Add(row)
}

// latency is the latency reported for mode m: the whole exchange in
// BUFFERED mode, the routing decision with the echoed body in
// FULL_DUPLEX_STREAMED mode.
func latency(m bench.Mode, res *bench.LoadResult, p int) time.Duration {
	if m == bench.ModeDuplex {
		if p == 50 {
			return res.DecisionP50
		}
		return res.DecisionP99
	}
	if p == 50 {
		return res.TotalP50
	}
	return res.TotalP99
}

// figure is one end-to-end figure of a run.
func figure(m bench.Mode, run *e2eRun, kind e2eMeasure) float64 {
	switch kind {
	case measureThroughput:
		return run.Result.RPS
	case measureP50:
		return float64(latency(m, &run.Result, 50))
	case measureP99:
		return float64(latency(m, &run.Result, 99))
	case measureCPU:
		return float64(run.CPUPerRequest)
	}
	panic(fmt.Sprintf("tollbench: unknown measure %d", kind))
}

// pairedRatios are the ratios tollgate/null of one figure within each
// round at concurrency c: the two runs of a round are back to back, so
// the machine's load drifts less between them than over the whole phase.
func pairedRatios(m bench.Mode, runs []e2eRun, c int, kind e2eMeasure) []float64 {
	type pair struct{ tg, nl float64 }
	rounds := map[int]*pair{}
	for i := range runs {
		run := &runs[i]
		if run.Result.Concurrency != c {
			continue
		}
		p := rounds[run.Round]
		if p == nil {
			p = &pair{}
			rounds[run.Round] = p
		}
		switch run.Server {
		case serverTollgate:
			p.tg = figure(m, run, kind)
		case serverNull:
			p.nl = figure(m, run, kind)
		}
	}
	var out []float64
	for _, p := range rounds {
		if p.tg > 0 && p.nl > 0 {
			out = append(out, p.tg/p.nl)
		}
	}
	return out
}

// e2eSections name the end-to-end sections of the table.
var e2eSections = map[bench.Mode]string{
	bench.ModeBuffered: "End-to-end BUFFERED",
	bench.ModeDuplex:   "End-to-end FULL_DUPLEX_STREAMED",
}

// spread is the median and range of one figure over the rounds.
type spread struct{ med, lo, hi float64 }

func spreadOf(v []float64) spread {
	if len(v) == 0 {
		return spread{}
	}
	return spread{bench.Median(v), slices.Min(v), slices.Max(v)}
}

// e2eRows adds the rows of one mode: per concurrency, the medians over
// rounds (and their range) of throughput, p50, p99 and server CPU per
// request, with the tollgate/null ratios and the targets.
func (r *runner) e2eRows(m bench.Mode, runs []e2eRun) {
	for _, c := range r.o.conc {
		r.e2eCase(m, runs, c, fmt.Sprintf("concurrency %d", c), true)
	}
}

// e2eCase adds the rows of one mode and concurrency, labelled cs, with
// the targets on them when withTargets.
func (r *runner) e2eCase(m bench.Mode, runs []e2eRun, c int, cs string, withTargets bool) {
	section := e2eSections[m]
	type figures struct {
		rps, p50, p99, cpu spread
		errs               int
		first              string
	}
	fig := map[string]*figures{}
	for _, srv := range []string{serverNull, serverTollgate} {
		var rps, p50, p99, cpu []float64
		f := &figures{}
		for _, run := range runs {
			if run.Server != srv || run.Result.Concurrency != c {
				continue
			}
			res := run.Result
			rps = append(rps, res.RPS)
			p50 = append(p50, float64(latency(m, &res, 50)))
			p99 = append(p99, float64(latency(m, &res, 99)))
			cpu = append(cpu, float64(run.CPUPerRequest))
			f.errs += res.Errors
			if f.first == "" {
				f.first = res.FirstError
			}
		}
		f.rps, f.p50, f.p99, f.cpu = spreadOf(rps), spreadOf(p50), spreadOf(p99), spreadOf(cpu)
		fig[srv] = f
	}
	tg, nl := fig[serverTollgate], fig[serverNull]
	count := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	dur := func(v float64) string { return bench.FormatDuration(time.Duration(v)) }
	// row builds one row; a target on the figure adds its verdict to
	// the row and records it for the Targets table.
	row := func(measure string, kind e2eMeasure, t, n spread, format func(float64) string, unit string) bench.Row {
		cell := func(s spread) string {
			return fmt.Sprintf("%s (%s–%s)", format(s.med), format(s.lo), format(s.hi))
		}
		out := bench.Row{Section: section, Case: cs, Measure: measure, Value: cell(t), Baseline: cell(n), Target: bench.Ratio(t.med, n.med)}
		if tgt, ok := e2eTargetFor(m, c, kind); ok && withTargets && n.med > 0 && t.med > 0 {
			// The target is read from the median of the per-round
			// ratios: the two runs of a round are back to back, so the
			// machine's drifting load cancels better than between the
			// medians over all rounds.
			ratio, rounds := t.med/n.med, ""
			if pr := pairedRatios(m, runs, c, kind); len(pr) > 0 {
				ratio = bench.Median(pr)
				rounds = fmt.Sprintf("rounds %.2f–%.2f×; ", slices.Min(pr), slices.Max(pr))
			}
			met := tgt.met(ratio)
			out.Target += fmt.Sprintf(" (per-round median %.2f×, target %s: %s)", ratio, tgt.boundText(), bench.Verdict(met))
			r.measured(tgt.name, fmt.Sprintf("%.2f× (%smedians %s / %s%s)", ratio, rounds, format(t.med), format(n.med), unit), met)
		} else if !withTargets {
			if pr := pairedRatios(m, runs, c, kind); len(pr) > 0 {
				out.Target += fmt.Sprintf(" (per-round median %.2f×, rounds %.2f–%.2f×)", bench.Median(pr), slices.Min(pr), slices.Max(pr))
			}
		}
		return out
	}
	r.report.Add(row("throughput, req/s", measureThroughput, tg.rps, nl.rps, count, " req/s"))
	r.report.Add(row("p50 latency", measureP50, tg.p50, nl.p50, dur, ""))
	r.report.Add(row("p99 latency", measureP99, tg.p99, nl.p99, dur, ""))
	r.report.Add(row("server CPU per request", measureCPU, tg.cpu, nl.cpu, dur, ""))
	var d50, d99 []float64
	for _, run := range runs {
		if run.Server == serverTollgate && run.Result.Concurrency == c {
			d50 = append(d50, float64(run.DecisionP50))
			d99 = append(d99, float64(run.DecisionP99))
		}
	}
	if sp50, sp99 := spreadOf(d50), spreadOf(d99); sp99.med > 0 {
		cell := func(x spread) string { return fmt.Sprintf("%s (%s–%s)", dur(x.med), dur(x.lo), dur(x.hi)) }
		r.report.Add(bench.Row{Section: section, Case: cs, Measure: "scheduler decision latency p50 ; p99 (" + decisionMetric + ")",
			Value: cell(sp50) + " ; " + cell(sp99)})
	}
	if tg.errs+nl.errs > 0 {
		r.report.Add(bench.Row{Section: section, Case: cs, Measure: "requests not answered 200",
			Value: strconv.Itoa(tg.errs), Baseline: strconv.Itoa(nl.errs), Target: "first: " + tg.first + nl.first})
	}
}
