package demo

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgress_PlainLines(t *testing.T) {
	rec := newRecorder(2)
	var buf bytes.Buffer
	p := &progress{w: &buf, label: "arm", classes: []string{"premium", "regular"}, total: 10, rec: rec}
	now := rec.start
	p.print(now.Add(500*time.Millisecond), false)
	rec.add(completion{class: 0})
	rec.add(completion{class: 0})
	rec.add(completion{class: 1})
	p.print(now.Add(1500*time.Millisecond), false)
	p.print(now.Add(2*time.Second), true)

	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 || strings.Contains(buf.String(), "\r") {
		t.Fatalf("plain output %q: want three lines and no carriage return", buf.String())
	}
	for _, want := range []string{"premium 2", "regular 1", "3/10 done", "3 req/s", "1.5s"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("line %q lacks %q", lines[1], want)
		}
	}
	if !strings.Contains(lines[2], "req/s average") || !strings.Contains(lines[2], "2.0s") {
		t.Errorf("final line %q: want the average rate and the elapsed time", lines[2])
	}
}

func TestProgress_TerminalRewritesInPlace(t *testing.T) {
	rec := newRecorder(1)
	var buf bytes.Buffer
	p := &progress{w: &buf, terminal: true, label: "a-much-longer-label", classes: []string{"c"}, total: 1, rec: rec}
	p.print(rec.start.Add(time.Second), false)
	first := buf.Len()
	p.label = "short"
	p.print(rec.start.Add(2*time.Second), true)
	out := buf.String()
	if !strings.HasPrefix(out, "\r") || strings.Count(out, "\r") != 2 || strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("terminal output %q: want two \\r-led rewrites of one line, ended by one newline", out)
	}
	// The shorter second line is padded to blank the first one's tail.
	if second := len(out) - first - 1; second < first {
		t.Errorf("second line is %d bytes, first %d: leftovers of the first would stay on screen", second, first)
	}
}

func TestProgress_StopPrintsFinalLine(t *testing.T) {
	rec := newRecorder(1)
	var buf bytes.Buffer
	p := startProgress(&buf, false, "run", []string{"c"}, 5, rec)
	rec.add(completion{class: 0})
	p.stop()
	out := buf.String()
	if !strings.HasSuffix(out, "\n") || !strings.Contains(out, "1/5 done") || !strings.Contains(out, "average") {
		t.Fatalf("output after stop %q: want a final line with the count and average rate", out)
	}
}

func TestProgress_OpenEndedWithNote(t *testing.T) {
	rec := newRecorder(1)
	var buf bytes.Buffer
	p := &progress{w: &buf, label: "rollout", classes: []string{"c"}, rec: rec, note: func() string { return "| draining tollgate-1" }}
	rec.add(completion{class: 0})
	p.print(rec.start.Add(time.Second), false)
	if line := buf.String(); !strings.Contains(line, "| 1 done ") || strings.Contains(line, "1/0") || !strings.HasSuffix(line, "| draining tollgate-1\n") {
		t.Errorf("line %q: want the count without a total, then the note", line)
	}
}
