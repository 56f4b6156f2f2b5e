package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Row is one line of the report table. Rows of the same Section are
// printed together under a heading row.
type Row struct {
	Section  string
	Case     string
	Measure  string
	Value    string // tollgate's figure
	Baseline string // the null ext_proc server's figure, where there is one
	Target   string // ratio and target, or a note
}

// Report is the benchmark's one table and the facts needed to reproduce
// it.
type Report struct {
	Date      time.Time
	CPUs      int
	CPUModel  string
	GoVersion string
	// GOMAXPROCS of the benchmark processes.
	GOMAXPROCS int
	// LoadAverage is the 1-minute load average when the run started.
	LoadAverage float64
	// LoadAverageEnd is the same when it ended; 0 when not read. Other
	// work on the machine while the run went on shows here.
	LoadAverageEnd float64
	Command        string
	Wall           time.Duration
	// Targets are printed first, in their own table.
	Targets []Target
	Rows    []Row
	// Notes are printed under the table, one per line.
	Notes []string
}

// Target is one figure the benchmark holds the server to: what it is, its
// bound, and what this run measured.
type Target struct {
	Name  string
	Bound string
	// Value is the measured figure; empty when the run did not measure it
	// (a phase skipped or failed, or the case not in the run's options).
	Value string
	Met   bool
}

// Result is "met", "missed", or "not measured" without a Value.
func (t Target) Result() string {
	if t.Value == "" {
		return "not measured"
	}
	return Verdict(t.Met)
}

// Add appends a row.
func (r *Report) Add(row Row) { r.Rows = append(r.Rows, row) }

// reportColumns are the table's column headings.
var reportColumns = [...]string{"Case", "Measure", "tollgate", "null ext_proc", "Ratio / target"}

// targetColumns are the Targets table's column headings.
var targetColumns = [...]string{"Target", "Bound", "Measured", "Result"}

// WriteMarkdown writes the report as Markdown: a header of facts, the
// Targets table, one table with a bold heading row per section, and the
// notes. Cells are padded so that the raw text lines up in a terminal too.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## tollgate benchmark, %s\n\n", r.Date.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- Machine: %d CPUs (runtime.NumCPU), %s; GOMAXPROCS %d per process; load average %.2f at start",
		r.CPUs, r.CPUModel, r.GOMAXPROCS, r.LoadAverage)
	if r.LoadAverageEnd != 0 {
		fmt.Fprintf(&b, ", %.2f at the end", r.LoadAverageEnd)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "- Go: %s\n", r.GoVersion)
	fmt.Fprintf(&b, "- Reproduce: `%s`\n", r.Command)
	if r.Wall > 0 {
		fmt.Fprintf(&b, "- Wall time: %s\n", r.Wall.Round(time.Second))
	}
	b.WriteString("\n")

	if len(r.Targets) > 0 {
		b.WriteString("### Targets\n\n")
		lines := [][]string{targetColumns[:]}
		for _, t := range r.Targets {
			value := t.Value
			if value == "" {
				value = "–"
			}
			lines = append(lines, []string{t.Name, t.Bound, value, t.Result()})
		}
		writeTable(&b, lines)
		b.WriteString("\n### All figures\n\n")
	}

	lines := [][]string{reportColumns[:]}
	section := "\x00"
	for _, row := range r.Rows {
		if row.Section != section {
			section = row.Section
			lines = append(lines, []string{"**" + section + "**", "", "", "", ""})
		}
		lines = append(lines, []string{row.Case, row.Measure, row.Value, row.Baseline, row.Target})
	}
	writeTable(&b, lines)
	if len(r.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTable writes lines as a Markdown table whose first line is the
// heading, padded so that the raw text lines up in a terminal too.
func writeTable(b *strings.Builder, lines [][]string) {
	width := make([]int, len(lines[0]))
	for _, l := range lines {
		for i, c := range l {
			width[i] = max(width[i], len([]rune(escapeCell(c))))
		}
	}
	for i, l := range lines {
		writeLine(b, l, width)
		if i == 0 {
			sep := make([]string, len(width))
			for j, n := range width {
				sep[j] = strings.Repeat("-", n)
			}
			writeLine(b, sep, width)
		}
	}
}

func writeLine(b *strings.Builder, cells []string, width []int) {
	b.WriteString("|")
	for i, c := range cells {
		c = escapeCell(c)
		b.WriteString(" ")
		b.WriteString(c)
		b.WriteString(strings.Repeat(" ", width[i]-len([]rune(c))))
		b.WriteString(" |")
	}
	b.WriteString("\n")
}

// escapeCell keeps a cell on one table cell: pipes escaped, newlines
// flattened.
func escapeCell(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// Ratio formats a/b as "0.93×", or "n/a" when b is zero.
func Ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// Verdict returns "met" or "missed" for ok.
func Verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// FormatDuration prints d with three significant digits in µs or ms.
func FormatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "n/a"
	case d < time.Millisecond:
		return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// FormatBytes prints n bytes in B, KiB or MiB.
func FormatBytes(n float64) string {
	switch {
	case n < 0:
		return fmt.Sprintf("-%s", FormatBytes(-n))
	case n < 1024:
		return fmt.Sprintf("%.0f B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", n/1024)
	}
	return fmt.Sprintf("%.1f MiB", n/(1<<20))
}

// FormatCount prints n with thousands separators.
func FormatCount(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
