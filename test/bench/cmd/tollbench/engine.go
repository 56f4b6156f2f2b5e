package main

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate/test/bench"
)

// Engine metrics scraping benchmark names.
const (
	engineSection    = "Engine metrics scraping"
	engineFleetBench = "BenchmarkScrape_Fleet"
	engineParseBench = "BenchmarkParse"
	engineWorkers    = 256
)

// enginePhase measures the scraper's CPU cost at fleet size: 256 engine
// endpoints in a helper process, scraped at the default interval and at
// the peers' 50 ms.
func (r *runner) enginePhase(ctx context.Context) error {
	run, err := r.goBench(ctx, "engine-bench", "./extproc/engine/enginemetrics",
		"^("+engineFleetBench+"|"+engineParseBench+")$", "1x")
	if err != nil {
		return err
	}
	for _, interval := range []string{"500ms", "50ms"} {
		name := fmt.Sprintf("%s/workers=%d/interval=%s", engineFleetBench, engineWorkers, interval)
		row := bench.Row{Section: engineSection, Case: fmt.Sprintf("%d workers, --engine-metrics-interval=%s", engineWorkers, interval),
			Measure: "scraper CPU per worker per second ; cores ; expositions read/s"}
		g, ok := run.Find(name)
		if !ok {
			row.Value = "missing"
			r.fail("engine: %s missing", name)
			r.report.Add(row)
			continue
		}
		us, _ := g.Metric("cpu-µs/worker/s")
		cores, _ := g.Metric("cores")
		loads, _ := g.Metric("loads/s")
		failures, _ := g.Metric("failures")
		row.Value = fmt.Sprintf("%s µs ; %.3f ; %s", trimFloat(us), cores, bench.FormatCount(loads))
		if failures > 0 {
			row.Target = fmt.Sprintf("%.0f failed scrapes", failures)
		}
		r.report.Add(row)
	}
	parse := bench.Row{Section: engineSection, Case: "one vLLM-named mockworker exposition", Measure: "Parse"}
	parse.Value = nsAllocs(run, engineParseBench)
	r.report.Add(parse)
	r.note("Engine metrics: %s of ./extproc/engine/enginemetrics scrapes %d loopback endpoints served by a helper process "+
		"(the mockworker's vLLM /metrics, about 5 KiB) for 5 s per interval; CPU is this process's user+system time, "+
		"so it is the scraper's alone (HTTP client, the line filter and the Prometheus text parser). At 50 ms the "+
		"32 scrapes in flight cannot keep up on a small machine: fewer expositions are read than asked for.", engineFleetBench, engineWorkers)
	return nil
}
