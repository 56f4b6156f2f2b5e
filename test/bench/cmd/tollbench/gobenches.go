package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/tollgate/tollgate/test/bench"
)

// Scheduler benchmark dimensions, as sched's benchmarks name them.
var (
	schedClasses = []int{1, 8, 64}
	schedLanes   = []int{0, 100, 10000}
)

// Targets of the issue.
const (
	queuedBytesTarget   = 300 // bytes per request queued in the core
	schedSection        = "Scheduler (sched micro-benchmarks)"
	tokenizeSection     = "Tokenizers"
	ringBench           = "BenchmarkRing_PushPop"
	flowsBench          = "BenchmarkRing_Flows"
	flowsTarget         = 2.0 // fairness on / off at 100 flows per lane
	submitBench         = "BenchmarkScheduler_SubmitDispatchDone"
	preemptBench        = "BenchmarkScheduler_Preemption"
	queuedMemoryBench   = "BenchmarkScheduler_QueuedMemory"
	tokenizeBench       = "BenchmarkEncode"
	tokenizeSmall       = "10KiB"
	tokenizeLarge       = "100KiB"
	schedMemoryBenchtim = "1x"
)

// schedPhase runs the scheduler micro-benchmarks.
func (r *runner) schedPhase(ctx context.Context) error {
	run, err := r.goBench(ctx, "sched-bench", "./sched",
		"^("+ringBench+"|"+flowsBench+"|"+submitBench+"|"+preemptBench+")$", r.o.schedBT)
	if err != nil {
		return err
	}
	add := func(c, m, v string) {
		r.report.Add(bench.Row{Section: schedSection, Case: c, Measure: m, Value: v})
	}
	for _, c := range schedClasses {
		for _, l := range schedLanes {
			cs := fmt.Sprintf("C=%d classes, L=%s lanes", c, bench.FormatCount(float64(l)))
			var cells []string
			for _, ratio := range []string{"1", "1000", "1000000"} {
				cells = append(cells, nsAllocs(run, fmt.Sprintf("%s/classes=%d/lanes=%d/ratio=%s", ringBench, c, l, ratio)))
			}
			add(cs, "ring enqueue+dispatch, cost/quantum 1 ; 1e3 ; 1e6", strings.Join(cells, " ; "))
		}
	}
	for _, f := range []int{1, 100, 10000} {
		name := fmt.Sprintf("%s/flows=%d/fairness=", flowsBench, f)
		row := bench.Row{Section: schedSection, Case: fmt.Sprintf("one lane, %s flows of 2 requests", bench.FormatCount(float64(f))),
			Measure: "ring enqueue+dispatch, --fairness none ; on",
			Value:   nsAllocs(run, name+"false") + " ; " + nsAllocs(run, name+"true")}
		off, okOff := run.Find(name + "false")
		on, okOn := run.Find(name + "true")
		if okOff && okOn && f == 100 {
			a, _ := off.Metric("ns/op")
			b, _ := on.Metric("ns/op")
			if a > 0 {
				row.Target = fmt.Sprintf("on ≤ %g× off: %.2f× %s", flowsTarget, b/a, bench.Verdict(b <= flowsTarget*a))
			}
		}
		r.report.Add(row)
	}
	for _, c := range schedClasses {
		for _, l := range schedLanes {
			add(fmt.Sprintf("C=%d classes, L=%s lanes", c, bench.FormatCount(float64(l))),
				"Submit+dispatch+Release", nsAllocs(run, fmt.Sprintf("%s/slots=false/classes=%d/lanes=%d", submitBench, c, l)))
		}
	}
	for _, l := range []int{0, 100} {
		add(fmt.Sprintf("slot gate, capacity 1024, C=8, L=%d", l), "Submit+dispatch+Release",
			nsAllocs(run, fmt.Sprintf("%s/slots=true/classes=8/lanes=%d", submitBench, l)))
	}
	add("preemption at capacity 1024", "victim search + hand-off cycle", nsAllocs(run, preemptBench))
	r.coreAllocsTarget(run)

	r.note("Scheduler: `go test -bench` on ./sched at -benchtime %s. Ring enqueue+dispatch is one DRR arbitration plus the "+
		"winner's re-enqueue over C classes and L exact lanes, with entry costs of about 1,000 × the cost/quantum ratio; "+
		"the flows rows run it in one lane holding F fairness keys of 2 requests each, without and with --fairness; "+
		"Submit+dispatch+Release is one request through the whole core with L pinned lanes blocked behind busy ranks; the slot gate "+
		"rows run with the priority scheduler on at capacity 1024; queued memory is the live heap after 1,000,000 Submits "+
		"that queue (-benchtime 1x).", r.o.schedBT)
	mem, err := r.goBench(ctx, "sched-queued-memory", "./sched", "^"+queuedMemoryBench+"$", schedMemoryBenchtim)
	if err != nil {
		return err
	}
	row := bench.Row{Section: schedSection, Case: "1,000,000 requests queued in the core", Measure: "heap bytes per queued request"}
	if g, ok := mem.Find(queuedMemoryBench); ok {
		if v, ok := g.Metric("B/queued"); ok {
			row.Value = fmt.Sprintf("%.0f B", v)
			row.Target = fmt.Sprintf("≤ %d B: %s", queuedBytesTarget, bench.Verdict(v <= queuedBytesTarget))
		}
	}
	if row.Value == "" {
		row.Value = "missing"
		r.fail("sched: %s reported no B/queued", queuedMemoryBench)
	}
	r.report.Add(row)
	return nil
}

// coreAllocsTarget records the largest allocs/op of the scheduler
// micro-benchmarks against the target of none.
func (r *runner) coreAllocsTarget(run *bench.GoBenchRun) {
	var most float64
	var worst string
	n := 0
	for _, g := range run.Results {
		a, ok := g.Metric("allocs/op")
		if !ok {
			continue
		}
		n++
		if a > most || worst == "" {
			most, worst = a, g.Name
		}
	}
	if n == 0 {
		return
	}
	value := fmt.Sprintf("%.0f in all %d benchmarks", most, n)
	if most > 0 {
		value = fmt.Sprintf("up to %.0f (%s), %d benchmarks", most, worst, n)
	}
	r.measured(coreAllocsTargetName, value, most == 0)
}

// nsAllocs formats one benchmark as "41.2 ns, 0 allocs", or "missing".
func nsAllocs(run *bench.GoBenchRun, name string) string {
	g, ok := run.Find(name)
	if !ok {
		return "missing"
	}
	ns, _ := g.Metric("ns/op")
	allocs, _ := g.Metric("allocs/op")
	return fmt.Sprintf("%s ns, %.0f allocs", trimFloat(ns), allocs)
}

// trimFloat prints v with three significant digits, without exponent.
func trimFloat(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// megabytes formats a MB/s figure, with thousands separators when large.
func megabytes(v float64) string {
	if v >= 1000 {
		return bench.FormatCount(v)
	}
	return trimFloat(v)
}

// tokenizeSpecs are the tokenizer modes, as BenchmarkEncode names them.
var tokenizeSpecs = []struct{ bench, mode string }{
	{"estimate", "estimate"},
	{"cl100k_base", "tiktoken:cl100k_base"},
	{"o200k_base", "tiktoken:o200k_base"},
	{"gpt2-style.json", "hf:testdata/gpt2-style.json"},
	{"llama3-style.json", "hf:testdata/llama3-style.json"},
	{"llama2-style.json", "hf:testdata/llama2-style.json"},
}

// tokenizePhase runs the tokenizer benchmarks.
func (r *runner) tokenizePhase(ctx context.Context) error {
	run, err := r.goBench(ctx, "tokenize-bench", "./extproc/request/tokenize", "^"+tokenizeBench+"$", r.o.tokBT)
	if err != nil {
		return err
	}
	r.note("Tokenizers: BenchmarkEncode of ./extproc/request/tokenize at -benchtime %s on generated English text. The estimate mode "+
		"is arithmetic on the prompt's length (no pass over the text), so its MB/s is no bound on anything.", r.o.tokBT)
	for _, s := range tokenizeSpecs {
		var mbs, allocs []string
		for _, size := range []string{tokenizeSmall, tokenizeLarge} {
			g, ok := run.Find(tokenizeBench + "/" + s.bench + "/" + size)
			if !ok {
				mbs, allocs = append(mbs, "missing"), append(allocs, "-")
				continue
			}
			v, _ := g.Metric("MB/s")
			a, _ := g.Metric("allocs/op")
			mbs = append(mbs, megabytes(v))
			allocs = append(allocs, fmt.Sprintf("%.0f", a))
		}
		r.report.Add(bench.Row{Section: tokenizeSection, Case: "--tokenizer=" + s.mode,
			Measure: "MB/s, 10 KiB ; 100 KiB English prompt",
			Value:   strings.Join(mbs, " ; ") + " MB/s", Target: "allocs/op " + strings.Join(allocs, " ; ")})
	}
	return nil
}
