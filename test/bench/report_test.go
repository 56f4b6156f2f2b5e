package bench

import (
	"strings"
	"testing"
	"time"
)

func TestReportMarkdown(t *testing.T) {
	r := &Report{
		Date: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), CPUs: 2, CPUModel: "Test CPU", GoVersion: "go1.26.8 linux/amd64",
		GOMAXPROCS: 2, LoadAverage: 0.5, LoadAverageEnd: 7.25, Command: "make bench", Wall: 61 * time.Second,
		Notes: []string{"a note"},
		Targets: []Target{
			{Name: "throughput", Bound: "≥ 0.90× null", Value: "0.95×", Met: true},
			{Name: "p50", Bound: "≤ 1.10× null", Value: "1.20×"},
			{Name: "RSS", Bound: "≤ 16.0 KiB"},
		},
	}
	r.Add(Row{Section: "One", Case: "c1", Measure: "m", Value: "1 | 2", Target: "t"})
	r.Add(Row{Section: "One", Case: "c2", Measure: "m", Value: "3"})
	r.Add(Row{Section: "Two", Case: "c3", Measure: "m", Value: "4", Baseline: "5", Target: Ratio(4, 5)})
	var b strings.Builder
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"## tollgate benchmark, 2026-01-02 03:04 UTC",
		"- Machine: 2 CPUs (runtime.NumCPU), Test CPU; GOMAXPROCS 2 per process; load average 0.50 at start, 7.25 at the end\n",
		"- Go: go1.26.8 linux/amd64",
		"- Reproduce: `make bench`",
		"- Wall time: 1m1s",
		`| c1      | m       | 1 \| 2   |`,
		"| **Two** |",
		"0.80×",
		"- a note",
		"### Targets",
		"| throughput | ≥ 0.90× null | 0.95×    | met          |",
		"| p50        | ≤ 1.10× null | 1.20×    | missed       |",
		"| RSS        | ≤ 16.0 KiB   | –        | not measured |",
		"### All figures",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "**One**"); n != 1 {
		t.Errorf("section One has %d heading rows, want 1:\n%s", n, out)
	}
	if strings.Index(out, "### Targets") > strings.Index(out, "| **One**") {
		t.Errorf("the Targets table is not first:\n%s", out)
	}
	var widths []int
	_, all, _ := strings.Cut(out, "### All figures")
	for l := range strings.SplitSeq(all, "\n") {
		if strings.HasPrefix(l, "|") {
			widths = append(widths, len([]rune(l)))
		}
	}
	for _, w := range widths {
		if w != widths[0] {
			t.Errorf("table rows are not aligned: widths %v", widths)
			break
		}
	}
}

func TestFormatting(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{Ratio(1, 0), "n/a"},
		{Ratio(3, 2), "1.50×"},
		{Verdict(true), "met"},
		{Verdict(false), "missed"},
		{FormatDuration(0), "n/a"},
		{FormatDuration(1500 * time.Nanosecond), "1.5 µs"},
		{FormatDuration(2500 * time.Microsecond), "2.50 ms"},
		{FormatDuration(3 * time.Second), "3.00 s"},
		{FormatBytes(512), "512 B"},
		{FormatBytes(16 << 10), "16.0 KiB"},
		{FormatBytes(-2048), "-2.0 KiB"},
		{FormatBytes(3 << 20), "3.0 MiB"},
		{FormatCount(1000000), "1,000,000"},
		{FormatCount(999), "999"},
		{FormatCount(-12345), "-12,345"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
