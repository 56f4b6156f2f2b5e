package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/test/bench"
)

const (
	chunkSection     = "Streamed responses (CPU per response body chunk)"
	usageScanBench   = "BenchmarkUsageScannerStream"
	usageScanPackage = "./extproc/request/openai"
	usageScanChunks  = 257 // BenchmarkUsageScannerStream's 256 token chunks and its usage chunk
)

// chunkRun is one load of the response-chunk phase, as saved in
// response-chunks.json.
type chunkRun struct {
	Server string `json:"server"`
	Round  int    `json:"round"`
	// OneWrite marks the baseline: the same events and pauses, written
	// at once after the last pause.
	OneWrite bool             `json:"one_write"`
	Result   bench.LoadResult `json:"result"`
	// CPU is the server process's CPU time while the load ran.
	CPU time.Duration `json:"server_cpu_ns"`
}

// perRequest returns the server CPU and the ext_proc messages per
// request of a run.
func (c *chunkRun) perRequest() (cpu, msgs float64, ok bool) {
	n := float64(c.Result.Completed)
	if n == 0 || c.Result.Errors > 0 {
		return 0, 0, false
	}
	return float64(c.CPU) / n, float64(c.Result.MsgsSent) / n, true
}

// responseChunksPhase measures the server CPU per response body chunk:
// each server gets the same streamed load twice per round, answers of
// -chunks token events each flushed after its pause, or the same events
// and pauses written at once after the last, so that the bytes and the
// request rate are the same and only the number of response body messages
// differs. The CPU per chunk is the difference of CPU per request over
// the difference of messages per request.
func (r *runner) responseChunksPhase(ctx context.Context) (err error) {
	s, err := r.startStack(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.stop()) }()
	servers := map[string]*child{serverNull: s.null, serverTollgate: s.tollgate}
	var runs []chunkRun
	for round := 1; round <= r.o.chunkRounds; round++ {
		// The two servers run each load back to back (ABBA over the
		// round), so that the machine's drifting load cancels in their
		// difference.
		variants := []bool{false, true}
		if round%2 == 0 {
			variants[0], variants[1] = variants[1], variants[0]
		}
		for vi, oneWrite := range variants {
			order := []string{serverNull, serverTollgate}
			if (round+vi)%2 == 0 {
				order[0], order[1] = order[1], order[0]
			}
			for _, srv := range order {
				addr, err := servers[srv].addr("grpc")
				if err != nil {
					return err
				}
				cpu0, err := bench.ProcCPU(servers[srv].pid())
				if err != nil {
					return err
				}
				var res bench.LoadResult
				name := fmt.Sprintf("chunks-r%d-%s-streamed", round, srv)
				args := []string{r.self, "load", "--ext", addr, "--mode", string(bench.ModeBuffered),
					"--concurrency", strconv.Itoa(r.o.chunkConc), "--warmup", r.o.warmup.String(), "--duration", r.o.duration.String(),
					"--chunks", strconv.Itoa(r.o.chunks), "--chunk-gap", r.o.chunkGap.String(), "--shipped"}
				if oneWrite {
					name = fmt.Sprintf("chunks-r%d-%s-one-write", round, srv)
					args = append(args, "--one-write")
				}
				if err := runJSON(ctx, name, r.logs, args, &res); err != nil {
					return err
				}
				cpu1, err := bench.ProcCPU(servers[srv].pid())
				if err != nil {
					return err
				}
				run := chunkRun{Server: srv, Round: round, OneWrite: oneWrite, Result: res, CPU: cpu1 - cpu0}
				cpu, msgs, _ := run.perRequest()
				kind := "streamed"
				if oneWrite {
					kind = "one write"
				}
				r.progress("response-chunks round %d/%d %-8s %-9s %6.0f req/s, %5.1f messages/request, server CPU %s/request, errors %d",
					round, r.o.chunkRounds, srv, kind, res.RPS, msgs, bench.FormatDuration(time.Duration(cpu)), res.Errors)
				runs = append(runs, run)
			}
		}
	}
	data, err := json.MarshalIndent(runs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.o.out, "response-chunks.json"), data, 0o644); err != nil {
		return err
	}
	r.chunkRows(runs)
	r.note("Streamed responses: the end-to-end stack (BUFFERED request, STREAMED response, the shipped filter's "+
		"send_body_without_waiting_for_header_response), %d streams of 2 KiB \"stream\": true completions; the upstream answers "+
		"each with %d token events, each flushed after a %s pause (its own response body chunk), and a usage event; the baseline "+
		"load has the same events and pauses but writes them at once after the last pause (one or two chunks): the same bytes at nearly "+
		"the same pace (the streamed load's per-chunk round trips slow it a little; the rates row shows both). %d rounds alternate the order of the two loads, the servers running each load back to back. CPU per chunk = (server CPU per request streamed − "+
		"baseline) / (ext_proc messages per request streamed − baseline), per round, median over rounds; tollgate − null is the "+
		"median of the per-round differences. The usage scanner row is %s of %s at -cpu 1 (%d chunks per operation).",
		r.o.chunkConc, r.o.chunks, r.o.chunkGap, r.o.chunkRounds, usageScanBench, usageScanPackage, usageScanChunks)
	scan, err := r.goBench(ctx, "usage-scanner-bench", usageScanPackage, "^"+usageScanBench+"$", r.o.tokBT, "-cpu", "1")
	if err != nil {
		return err
	}
	row := bench.Row{Section: chunkSection, Case: "usage scanner alone (" + usageScanBench + ", one core)", Measure: "CPU per chunk", Value: "missing"}
	if g, ok := scan.Find(usageScanBench); ok {
		ns, _ := g.Metric("ns/op")
		allocs, _ := g.Metric("allocs/op")
		row.Value = fmt.Sprintf("%s ns, %.0f allocs per response", trimFloat(ns/usageScanChunks), allocs)
	} else {
		r.fail("response-chunks: %s did not run", usageScanBench)
	}
	r.report.Add(row)
	return nil
}

// chunkRows adds the per-chunk figures and reads the target.
func (r *runner) chunkRows(runs []chunkRun) {
	type round struct {
		perChunk map[string]float64
		msgs     map[string]float64
	}
	rounds := map[int]*round{}
	errs := map[string]int{}
	for i := range runs {
		errs[runs[i].Server] += runs[i].Result.Errors
	}
	for i := range runs {
		a := &runs[i]
		if a.OneWrite {
			continue
		}
		for j := range runs {
			b := &runs[j]
			if !b.OneWrite || b.Server != a.Server || b.Round != a.Round {
				continue
			}
			cpuA, msgsA, okA := a.perRequest()
			cpuB, msgsB, okB := b.perRequest()
			if !okA || !okB || msgsA <= msgsB {
				continue
			}
			rd := rounds[a.Round]
			if rd == nil {
				rd = &round{perChunk: map[string]float64{}, msgs: map[string]float64{}}
				rounds[a.Round] = rd
			}
			rd.perChunk[a.Server] = (cpuA - cpuB) / (msgsA - msgsB)
			rd.msgs[a.Server] = msgsA - msgsB
		}
	}
	per := map[string][]float64{}
	var diffs, extra []float64
	for _, rd := range rounds {
		for srv, v := range rd.perChunk {
			per[srv] = append(per[srv], v)
		}
		tg, okT := rd.perChunk[serverTollgate]
		nl, okN := rd.perChunk[serverNull]
		if okT && okN {
			diffs = append(diffs, tg-nl)
			extra = append(extra, rd.msgs[serverTollgate])
		}
	}
	dur := func(v float64) string { return signedNs(v) }
	cell := func(v []float64) string {
		if len(v) == 0 {
			return "–"
		}
		return fmt.Sprintf("%s (%s–%s)", bench.FormatDuration(time.Duration(bench.Median(v))),
			bench.FormatDuration(time.Duration(slices.Min(v))), bench.FormatDuration(time.Duration(slices.Max(v))))
	}
	row := bench.Row{Section: chunkSection,
		Case:    fmt.Sprintf("%d streams, %d token events per response, %s apart", r.o.chunkConc, r.o.chunks, r.o.chunkGap),
		Measure: "server CPU per response body chunk, median (range) over rounds",
		Value:   cell(per[serverTollgate]), Baseline: cell(per[serverNull])}
	if len(diffs) > 0 {
		d := bench.Median(diffs)
		met := d <= float64(chunkCPUTarget)
		row.Target = fmt.Sprintf("tollgate − null %s (rounds %s to %s; %.1f extra body messages per response), target ≤ %s: %s",
			dur(d), dur(slices.Min(diffs)), dur(slices.Max(diffs)), bench.Median(extra), bench.FormatDuration(chunkCPUTarget), bench.Verdict(met))
		r.measured(chunkCPUTargetName, fmt.Sprintf("%s (tollgate %s, null %s per chunk)", dur(d),
			bench.FormatDuration(time.Duration(bench.Median(per[serverTollgate]))), bench.FormatDuration(time.Duration(bench.Median(per[serverNull])))), met)
	} else {
		row.Target = "not measured: no round with both servers and both loads without errors"
	}
	if errs[serverTollgate]+errs[serverNull] > 0 {
		first := ""
		for _, run := range runs {
			if run.Result.FirstError != "" {
				first = run.Result.FirstError
				break
			}
		}
		row.Target += fmt.Sprintf("; not 200: tollgate %d, null %d (rounds with errors left out), first: %s", errs[serverTollgate], errs[serverNull], first)
	}
	r.report.Add(row)
	rates := bench.Row{Section: chunkSection, Case: row.Case, Measure: "request rate, streamed ; baseline (one write), median over rounds"}
	for _, srv := range []string{serverTollgate, serverNull} {
		var streamed, base []float64
		for _, run := range runs {
			if run.Server != srv {
				continue
			}
			if run.OneWrite {
				base = append(base, run.Result.RPS)
			} else {
				streamed = append(streamed, run.Result.RPS)
			}
		}
		cell := fmt.Sprintf("%.0f ; %.0f req/s", bench.Median(streamed), bench.Median(base))
		if srv == serverTollgate {
			rates.Value = cell
		} else {
			rates.Baseline = cell
		}
	}
	r.report.Add(rates)
}

// signedNs prints a CPU time difference given in nanoseconds, in µs.
func signedNs(v float64) string {
	us := math.Round(v/10) / 100
	if us == 0 {
		us = 0 // no "-0.00"
	}
	return fmt.Sprintf("%+.2f µs", us)
}
