package bench

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const goBenchOutput = `goos: linux
goarch: amd64
pkg: github.com/tollgate/tollgate/sched
cpu: AMD EPYC
BenchmarkRing_PushPop/classes=1/lanes=0/ratio=1-2         	 1000000	       108.5 ns/op	       0 B/op	       0 allocs/op
BenchmarkScheduler_QueuedMemory-2   	       1	1802345678 ns/op	       271.3 B/queued	 123456 B/op	    5000 allocs/op
BenchmarkEncode/gpt2-style.json/10KiB-2   	    1234	    500000 ns/op	  20.48 MB/s	         4.100 bytes/token	    2048 B/op	       1 allocs/op
BenchmarkNoProcs    	     100	        10.00 ns/op
BenchmarkLogs-2
    bench_test.go:12: some log line
BenchmarkLogs-2     	      10	       100.0 ns/op
--- FAIL: BenchmarkBroken/case-2
FAIL	github.com/tollgate/tollgate/other	0.123s
PASS
ok  	github.com/tollgate/tollgate/sched	3.456s
`

func TestParseGoBench(t *testing.T) {
	run, err := ParseGoBench(strings.NewReader(goBenchOutput))
	if err != nil {
		t.Fatal(err)
	}
	want := []GoBench{
		{Name: "BenchmarkRing_PushPop/classes=1/lanes=0/ratio=1", Procs: 2, N: 1000000,
			Metrics: map[string]float64{"ns/op": 108.5, "B/op": 0, "allocs/op": 0}},
		{Name: "BenchmarkScheduler_QueuedMemory", Procs: 2, N: 1,
			Metrics: map[string]float64{"ns/op": 1802345678, "B/queued": 271.3, "B/op": 123456, "allocs/op": 5000}},
		{Name: "BenchmarkEncode/gpt2-style.json/10KiB", Procs: 2, N: 1234,
			Metrics: map[string]float64{"ns/op": 500000, "MB/s": 20.48, "bytes/token": 4.1, "B/op": 2048, "allocs/op": 1}},
		{Name: "BenchmarkNoProcs", Procs: 1, N: 100, Metrics: map[string]float64{"ns/op": 10}},
		{Name: "BenchmarkLogs", Procs: 2, N: 10, Metrics: map[string]float64{"ns/op": 100}},
	}
	if d := cmp.Diff(want, run.Results); d != "" {
		t.Errorf("results (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"BenchmarkBroken/case-2", "github.com/tollgate/tollgate/other"}, run.Failures); d != "" {
		t.Errorf("failures (-want +got):\n%s", d)
	}
	g, ok := run.Find("BenchmarkScheduler_QueuedMemory")
	if v, has := g.Metric("B/queued"); !ok || !has || v != 271.3 {
		t.Errorf("Find/Metric B/queued = %v %v %v, want 271.3", v, ok, has)
	}
	if _, ok := run.Find("BenchmarkMissing"); ok {
		t.Error("Find reported a benchmark that is not in the output")
	}
}

func TestParseGoBenchRejectsMalformedResults(t *testing.T) {
	for _, line := range []string{
		"BenchmarkX-2   100   12.5",
		"BenchmarkX-2   100   twelve ns/op",
	} {
		if _, err := ParseGoBench(strings.NewReader(line + "\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: error %v, want one that names line 1", line, err)
		}
	}
}
