package bench

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// GoBench is one result line of `go test -bench` output.
type GoBench struct {
	// Name is the full benchmark name ("BenchmarkRing_PushPop/classes=8/...")
	// without the trailing "-GOMAXPROCS".
	Name string
	// Procs is the GOMAXPROCS suffix, 1 when the name had none.
	Procs int
	// N is the number of iterations.
	N int64
	// Metrics maps each unit ("ns/op", "B/op", "allocs/op", "MB/s" or a
	// custom b.ReportMetric unit) to its value.
	Metrics map[string]float64
}

// Metric returns the value reported in unit.
func (g GoBench) Metric(unit string) (float64, bool) {
	v, ok := g.Metrics[unit]
	return v, ok
}

// GoBenchRun is a parsed `go test -bench` run: its results, and the names
// of the benchmarks or packages that failed.
type GoBenchRun struct {
	Results  []GoBench
	Failures []string
}

// Find returns the result named name (without the -GOMAXPROCS suffix).
func (r *GoBenchRun) Find(name string) (GoBench, bool) {
	for _, g := range r.Results {
		if g.Name == name {
			return g, true
		}
	}
	return GoBench{}, false
}

// ParseGoBench reads `go test -bench` output (optionally -benchmem, any
// number of packages). Lines other than results and failures are ignored;
// a result line that cannot be parsed is an error that quotes it.
func ParseGoBench(r io.Reader) (*GoBenchRun, error) {
	run := &GoBenchRun{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(text, "--- FAIL: "):
			run.Failures = append(run.Failures, strings.Fields(strings.TrimPrefix(text, "--- FAIL: "))[0])
		case strings.HasPrefix(text, "FAIL\t"):
			run.Failures = append(run.Failures, strings.Fields(text)[1])
		case strings.HasPrefix(text, "Benchmark"):
			g, ok, err := parseResult(text)
			if err != nil {
				return nil, fmt.Errorf("bench: line %d %q: %w", line, text, err)
			}
			if ok {
				run.Results = append(run.Results, g)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: reading benchmark output: %w", err)
	}
	return run, nil
}

// parseResult parses "Name-P  N  v unit  v unit ...". ok is false for a
// line that only names a benchmark (it printed output before its result).
func parseResult(text string) (GoBench, bool, error) {
	f := strings.Fields(text)
	if len(f) < 2 {
		return GoBench{}, false, nil
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return GoBench{}, false, nil // a name line followed by log output
	}
	if len(f)%2 != 0 {
		return GoBench{}, false, fmt.Errorf("value without a unit")
	}
	g := GoBench{Name: f[0], Procs: 1, N: n, Metrics: make(map[string]float64, (len(f)-2)/2)}
	if i := strings.LastIndexByte(g.Name, '-'); i > 0 {
		if p, err := strconv.Atoi(g.Name[i+1:]); err == nil && p > 0 {
			g.Name, g.Procs = g.Name[:i], p
		}
	}
	for i := 2; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return GoBench{}, false, fmt.Errorf("value %q: %w", f[i], err)
		}
		g.Metrics[f[i+1]] = v
	}
	return g, true, nil
}
