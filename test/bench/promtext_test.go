package bench

import (
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
