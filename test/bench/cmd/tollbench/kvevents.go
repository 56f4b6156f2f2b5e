package main

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate/test/bench"
)

const (
	kvSection        = "KV events (exact prefix index)"
	kvIngestBench    = "BenchmarkIngest"
	kvLookupBench    = "BenchmarkExactLookup128x256"
	kvMemoryBench    = "BenchmarkExactMemory"
	kvIngestTarget   = 1_000_000 // block events per second
	kvLookupTargetNs = 20_000    // p50 of one lookup
	kvBytesTarget    = 100       // per (worker, cached block)
)

// kvEventsPhase runs the KV-event benchmarks: decode+index ingest, the
// exact index's lookup and its memory per cached block.
func (r *runner) kvEventsPhase(ctx context.Context) error {
	ingest, err := r.goBench(ctx, "kvevents-ingest", "./extproc/engine/kvevents", "^"+kvIngestBench+"$", r.o.schedBT)
	if err != nil {
		return err
	}
	lookup, err := r.goBench(ctx, "kvevents-index", "./sched/prefix", "^"+kvLookupBench+"$", r.o.schedBT)
	if err != nil {
		return err
	}
	mem, err := r.goBench(ctx, "kvevents-memory", "./sched/prefix", "^"+kvMemoryBench+"$", "1x")
	if err != nil {
		return err
	}
	metric := func(run *bench.GoBenchRun, name, unit string) (float64, bool) {
		g, ok := run.Find(name)
		if !ok {
			r.fail("kvevents: %s did not run", name)
			return 0, false
		}
		v, ok := g.Metric(unit)
		if !ok {
			r.fail("kvevents: %s reported no %s", name, unit)
		}
		return v, ok
	}
	row := func(c, m string, v float64, ok bool, format, target string, pass bool) {
		out := bench.Row{Section: kvSection, Case: c, Measure: m, Value: "missing"}
		if ok {
			out.Value = fmt.Sprintf(format, v)
			out.Target = target + ": " + bench.Verdict(pass)
		}
		r.report.Add(out)
	}
	v, ok := metric(ingest, kvIngestBench, "blocks/s")
	row("decode + index, 16 BlockStored × 4 blocks per batch", "block events per second, one core", v, ok,
		"%.0f", fmt.Sprintf("≥ %s", bench.FormatCount(kvIngestTarget)), v >= kvIngestTarget)
	v, ok = metric(lookup, kvLookupBench, "p50-ns")
	allocs, _ := metric(lookup, kvLookupBench, "allocs/op")
	row("128-block prompt × 256 workers", "lookup p50 ns ("+fmt.Sprintf("%.0f", allocs)+" allocs)", v, ok,
		"%.0f ns", fmt.Sprintf("≤ %d ns, 0 allocs", kvLookupTargetNs), v <= kvLookupTargetNs && allocs == 0)
	v, ok = metric(mem, kvMemoryBench, "B/block")
	row("256 workers, a shared 128-block prompt + 512 own blocks each", "heap bytes per (worker, block)", v, ok,
		"%.1f B", fmt.Sprintf("≤ %d B", kvBytesTarget), v <= kvBytesTarget)
	r.note("KV events: BenchmarkIngest of ./extproc/engine/kvevents and BenchmarkExactLookup128x256 of ./sched/prefix at -benchtime %s; "+
		"BenchmarkExactMemory at -benchtime 1x (live heap after filling the index, divided by its entries).", r.o.schedBT)
	return nil
}
