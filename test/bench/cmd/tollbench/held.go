package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/test/bench"
)

const heldSection = "Held requests"

// heldMessageTimeout is Envoy's message_timeout in the held phase, and
// tollgate's --envoy-message-timeout: longer than the shipped 1 s so that a
// starved CPU while thousands of streams open does not end requests with
// 504 before tollgate has queued them. The timer is not what the phase
// measures.
const heldMessageTimeout = "5s"

// priorityFile is the SMG file of the held phase: no reservations (64
// slots could not hold the defaults' 178), a default-class queue deep
// enough for every held request, and no starvation promotion during the
// run.
const priorityFile = `classes:
  system: {reserved_floor: 0, reserved_per_slot: 0, queue_size: 64, queue_timeout_secs: 30, starvation_threshold_secs: 5, can_preempt: true}
  interactive: {reserved_floor: 0, reserved_per_slot: 0, queue_size: 256, queue_timeout_secs: 30, starvation_threshold_secs: 5, can_preempt: true}
  default: {reserved_floor: 0, reserved_per_slot: 0, queue_size: %d, queue_timeout_secs: 300, starvation_threshold_secs: 3600, can_preempt: false}
  bulk: {reserved_floor: 0, reserved_per_slot: 0, queue_size: 1024, queue_timeout_secs: 300, starvation_threshold_secs: 120, can_preempt: false}
`

// heldRun is one held-request measurement, as saved in held.json.
type heldRun struct {
	Server string           `json:"server"`
	Result bench.HoldResult `json:"result"`
}

// heldPhase holds each size in a fresh tollgate, then the smallest size in
// the harness server, whose pprof endpoint counts goroutines.
func (r *runner) heldPhase(ctx context.Context) (err error) {
	tg, err := r.build(ctx, "./cmd/tollgate")
	if err != nil {
		return err
	}
	w, waddr, err := r.startWorker(ctx, "held-worker")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.stop()) }()
	workers, err := r.writeWorkers("workers-held.yaml", waddr, r.o.running)
	if err != nil {
		return err
	}
	prio := filepath.Join(r.tmp, "priority-held.yaml")
	if err := os.WriteFile(prio, fmt.Appendf(nil, priorityFile, slices.Max(r.o.held)+1000), 0o644); err != nil {
		return err
	}

	var runs []heldRun
	for _, n := range r.o.held {
		argv := tollgateArgs(tg, workers, "--priority-scheduler-enabled", "--priority-scheduler-config", prio,
			"--envoy-message-timeout", heldMessageTimeout)
		res, err := r.hold(ctx, fmt.Sprintf("held-%d-tollgate", n), argv, waddr, n, false)
		if err != nil {
			return err
		}
		runs = append(runs, heldRun{Server: serverTollgate, Result: *res})
	}
	n := slices.Min(r.o.held)
	argv := []string{r.self, "serve", "--workers", workers, "--priority-scheduler-config", prio, "--envoy-message-timeout", heldMessageTimeout}
	harness, err := r.hold(ctx, fmt.Sprintf("held-%d-harness", n), argv, waddr, n, true)
	if err != nil {
		r.fail("held: harness goroutine count: %v", err)
	} else {
		runs = append(runs, heldRun{Server: "harness", Result: *harness})
	}
	r.note("Held requests: tollgate with --priority-scheduler-enabled and a priority file without reservations (default-class "+
		"queue_size N+1000), one worker with max_running_requests %d whose %d requests the upstream parks, then N more sent "+
		"in batches of 200 over 8 gRPC connections, each batch waiting until tollgate has queued it. Envoy's message_timeout "+
		"and tollgate's --envoy-message-timeout are %s here so that a starved CPU while streams open does not end requests "+
		"with 504 before they are queued. RSS is VmRSS of the tollgate process with all N queued minus its base: VmRSS after a "+
		"512-request warm-up with the %d running requests parked and nothing queued (goroutines likewise), so that the "+
		"figures per held request count queued requests alone; the drain runs from the release until every response arrived. A fresh tollgate per size; "+
		"goroutines come from tollgate's go_goroutines; the stack/heap split comes from the same run against the harness "+
		"build of the server code (tollbench serve), which serves /debug/pprof/.",
		r.o.running, r.o.running, heldMessageTimeout, r.o.running)
	data, err := json.MarshalIndent(runs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.o.out, "held.json"), data, 0o644); err != nil {
		return err
	}
	r.heldRows(runs)
	if prof := filepath.Join(r.o.out, "heap-held.prof"); r.o.profile && harness != nil {
		top, err := pprofTop(ctx, prof, filepath.Join(r.o.out, "heap-held-top.txt"), "-sample_index=inuse_space")
		if err != nil {
			return err
		}
		r.note("Heap in use while %s requests were held in the harness (%s, after a forced collection), by package: %s.",
			bench.FormatCount(float64(n)), prof, byPackage(top))
	}
	return nil
}

// hold starts the server argv, runs one hold measurement against it in a
// separate process and stops the server.
func (r *runner) hold(ctx context.Context, name string, argv []string, upstream string, n int, pprof bool) (res *bench.HoldResult, err error) {
	srv, err := startChild(ctx, name, r.logs, argv)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, srv.stop()) }()
	ext, err := srv.addr("grpc")
	if err != nil {
		return nil, err
	}
	metrics, err := srv.addr("metrics")
	if err != nil {
		return nil, err
	}
	args := []string{r.self, "hold", "--ext", ext, "--metrics", "http://" + metrics, "--upstream", "http://" + upstream,
		"--pid", strconv.Itoa(srv.pid()), "--held", strconv.Itoa(n), "--running", strconv.Itoa(r.o.running),
		"--message-timeout", heldMessageTimeout}
	if pprof {
		args = append(args, "--pprof", "http://"+metrics)
		if r.o.profile {
			args = append(args, "--heap-profile", filepath.Join(r.o.out, "heap-held.prof"))
		}
	}
	res = &bench.HoldResult{}
	if err := runJSON(ctx, name+"-driver", r.logs, args, res); err != nil {
		return nil, err
	}
	r.progress("held %s: %s held, RSS +%s per request, goroutines %d (base) → %d, fill %s, drain %s, errors %d",
		name, bench.FormatCount(float64(n)), bench.FormatBytes(res.RSSPerHeld), res.BaseGoroutines, res.HeldGoroutines,
		bench.FormatDuration(res.Fill), bench.FormatDuration(res.Drain), res.Errors)
	return res, nil
}

// heldRows reports each size, the linearity of the drain, and the harness
// goroutine count.
func (r *runner) heldRows(runs []heldRun) {
	var first *bench.HoldResult
	for i := range runs {
		run := &runs[i]
		res := &run.Result
		cs := bench.FormatCount(float64(res.Held)) + " held"
		if run.Server != serverTollgate {
			hc := cs + ", harness build of the server code"
			if res.HeldGoroutines >= 0 {
				r.report.Add(bench.Row{Section: heldSection, Case: hc,
					Measure: "goroutines per held request (pprof)", Value: fmt.Sprintf("%.2f", res.GoroutinesPerHeld),
					Target: fmt.Sprintf("%d base → %d held", res.BaseGoroutines, res.HeldGoroutines)})
			}
			if res.StackPerHeld > 0 {
				r.report.Add(bench.Row{Section: heldSection, Case: hc,
					Measure: "RSS per held request: stacks + heap in use",
					Value:   fmt.Sprintf("%s = %s + %s", bench.FormatBytes(res.RSSPerHeld), bench.FormatBytes(res.StackPerHeld), bench.FormatBytes(res.HeapPerHeld)),
					Target:  "the rest of RSS is free heap not yet returned to the OS"})
			}
			continue
		}
		rssMet := res.RSSPerHeld <= heldRSSTarget
		r.report.Add(bench.Row{Section: heldSection, Case: cs, Measure: "tollgate RSS per held request (held − base)",
			Value:  bench.FormatBytes(res.RSSPerHeld),
			Target: fmt.Sprintf("≤ %s: %s (base %s, held %s)", bench.FormatBytes(heldRSSTarget), bench.Verdict(rssMet), bench.FormatBytes(float64(res.BaseRSS)), bench.FormatBytes(float64(res.HeldRSS)))})
		if res.Held == heldTargetSize {
			r.measured(heldRSSTargetName, fmt.Sprintf("%s (RSS %s base → %s held)", bench.FormatBytes(res.RSSPerHeld),
				bench.FormatBytes(float64(res.BaseRSS)), bench.FormatBytes(float64(res.HeldRSS))), rssMet)
		}
		gr := bench.Row{Section: heldSection, Case: cs, Measure: "goroutines per held request"}
		if res.HeldGoroutines >= 0 {
			met := goroutinesMet(res.GoroutinesPerHeld)
			gr.Value = fmt.Sprintf("%.2f", res.GoroutinesPerHeld)
			gr.Target = fmt.Sprintf("≤ %.0f: %s (%s: %d base → %d held)", heldGoroutinesTarget, bench.Verdict(met),
				res.GoroutineSource, res.BaseGoroutines, res.HeldGoroutines)
			if res.Held == heldTargetSize {
				r.measured(heldGoroutinesTargetName, fmt.Sprintf("%.2f (%s: %d base → %d held)", res.GoroutinesPerHeld,
					res.GoroutineSource, res.BaseGoroutines, res.HeldGoroutines), met)
			}
		} else {
			gr.Value = "not exposed"
			gr.Target = "no go_goroutines in tollgate's /metrics; see the harness row"
		}
		r.report.Add(gr)
		drain := bench.Row{Section: heldSection, Case: cs, Measure: "drain after release (fill time)",
			Value: fmt.Sprintf("%s = %s per request (fill %s)", bench.FormatDuration(res.Drain), bench.FormatDuration(res.DrainPerHeld), bench.FormatDuration(res.Fill))}
		if first == nil {
			first = res
		} else if res.Held != first.Held {
			// Linear drain: D(N) = a + b·N. The slope from the two sizes is
			// the marginal cost of one more held request.
			slope := (res.Drain - first.Drain) / time.Duration(res.Held-first.Held)
			drain.Target = fmt.Sprintf("marginal %s per request from %s to %s held; per-request drain %s that at %s",
				bench.FormatDuration(slope), bench.FormatCount(float64(first.Held)), bench.FormatCount(float64(res.Held)),
				bench.Ratio(float64(res.DrainPerHeld), float64(first.DrainPerHeld)), bench.FormatCount(float64(first.Held)))
		}
		r.report.Add(drain)
		if res.Errors > 0 || res.EarlyFinishes > 0 {
			r.report.Add(bench.Row{Section: heldSection, Case: cs, Measure: "requests not answered 200",
				Value: strconv.Itoa(res.Errors), Target: "first: " + res.FirstError})
		}
	}
}
