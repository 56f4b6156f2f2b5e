package bench

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParsePromText(t *testing.T) {
	text := `# HELP smg_scheduler_queue_depth Queued requests by class.
# TYPE smg_scheduler_queue_depth gauge
smg_scheduler_queue_depth{class="bulk"} 0
smg_scheduler_queue_depth{class="default"} 2500
smg_scheduler_queue_depth{class="odd \"x\", y}"} 3 1700000000000
go_goroutines 42

process_resident_memory_bytes 1.2e+07
`
	samples, err := ParsePromText(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []Sample{
		{Name: "smg_scheduler_queue_depth", Labels: map[string]string{"class": "bulk"}, Value: 0},
		{Name: "smg_scheduler_queue_depth", Labels: map[string]string{"class": "default"}, Value: 2500},
		{Name: "smg_scheduler_queue_depth", Labels: map[string]string{"class": `odd "x", y}`}, Value: 3},
		{Name: "go_goroutines", Value: 42},
		{Name: "process_resident_memory_bytes", Value: 1.2e7},
	}
	if d := cmp.Diff(want, samples); d != "" {
		t.Errorf("samples (-want +got):\n%s", d)
	}
	if v, ok := SumSamples(samples, "smg_scheduler_queue_depth"); !ok || v != 2503 {
		t.Errorf("sum = %v %v, want 2503", v, ok)
	}
	if _, ok := SumSamples(samples, "absent"); ok {
		t.Error("SumSamples found an absent metric")
	}
}

func TestParsePromTextErrors(t *testing.T) {
	for _, text := range []string{
		"metric_without_value",
		`m{a="1" 3`,
		`m{a=1} 3`,
		`m{a="1"} three`,
		`m 1 2 3`,
	} {
		_, err := ParsePromText(text)
		if err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: error %v, want one naming line 1", text, err)
		}
	}
}

func TestHistogramQuantile(t *testing.T) {
	parse := func(text string) []Sample {
		t.Helper()
		s, err := ParsePromText(text)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := parse(`h_bucket{le="0.001"} 10
h_bucket{le="0.002"} 10
h_bucket{le="0.004"} 10
h_bucket{le="+Inf"} 10
`)
	// 100 new observations: 50 in (0, 1ms], 40 in (1ms, 2ms], 9 in (2ms, 4ms], 1 above.
	after := parse(`h_bucket{le="0.001"} 60
h_bucket{le="0.002"} 100
h_bucket{le="0.004"} 109
h_bucket{le="+Inf"} 110
`)
	for _, tc := range []struct{ q, want float64 }{
		{0.5, 0.001},  // rank 50: the top of the first bucket
		{0.7, 0.0015}, // rank 70: halfway through (1ms, 2ms]
		{0.99, 0.004}, // rank 99: the top of (2ms, 4ms]
		{1, 0.004},    // beyond the last finite bound: its value
	} {
		got, ok := HistogramQuantile(before, after, "h", tc.q)
		if !ok || math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("q%.2f = %v, %v; want %v", tc.q, got, ok, tc.want)
		}
	}
	if _, ok := HistogramQuantile(after, after, "h", 0.5); ok {
		t.Error("no new observations must report false")
	}
}
