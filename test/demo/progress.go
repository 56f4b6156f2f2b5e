package demo

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Progress line intervals: a terminal line is rewritten often, plain
// output gets one line a second.
const (
	terminalInterval = 200 * time.Millisecond
	plainInterval    = time.Second
	// rateWindow is the span the completion rate is measured over.
	rateWindow = time.Second
)

// progress prints a live line while a scenario runs: completions per
// class, the recent completion rate and the elapsed time. On a terminal the
// line is rewritten in place with \r; otherwise a plain line is printed
// every interval. Only its own goroutine writes until stop returns.
type progress struct {
	w        io.Writer
	terminal bool
	interval time.Duration
	label    string
	classes  []string
	total    int
	rec      *recorder
	// note, when set, is appended to every line (what the scenario is
	// doing now); it is called on the progress goroutine.
	note func() string

	stopc chan struct{}
	done  chan struct{}
	// samples are recent (time, completions) pairs for the rate; owned by
	// the goroutine.
	samples []sample
	width   int // longest terminal line written, to blank leftovers
}

type sample struct {
	at time.Time
	n  int
}

// startProgress starts printing progress for rec, whose total requests are
// expected to be total (0: not known in advance), under label.
func startProgress(w io.Writer, terminal bool, label string, classes []string, total int, rec *recorder) *progress {
	return startProgressNote(w, terminal, label, classes, total, rec, nil)
}

// startProgressNote is startProgress with note's text at the end of each
// line; note must be safe to call from another goroutine.
func startProgressNote(w io.Writer, terminal bool, label string, classes []string, total int, rec *recorder, note func() string) *progress {
	p := &progress{
		w: w, terminal: terminal, interval: plainInterval,
		label: label, classes: classes, total: total, rec: rec, note: note,
		stopc: make(chan struct{}), done: make(chan struct{}),
	}
	if terminal {
		p.interval = terminalInterval
	}
	go p.loop()
	return p
}

func (p *progress) loop() {
	defer close(p.done)
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			p.print(time.Now(), false)
		case <-p.stopc:
			p.print(time.Now(), true)
			return
		}
	}
}

// stop prints the final line and waits for the goroutine to end.
func (p *progress) stop() {
	close(p.stopc)
	<-p.done
}

// print writes one progress line; final ends a terminal line.
func (p *progress) print(now time.Time, final bool) {
	counts := p.rec.snapshot()
	n := 0
	for _, c := range counts {
		n += c
	}
	if len(p.samples) == 0 {
		p.samples = append(p.samples, sample{p.rec.start, 0})
	}
	p.samples = append(p.samples, sample{now, n})
	for len(p.samples) > 2 && now.Sub(p.samples[1].at) >= rateWindow {
		p.samples = p.samples[1:]
	}
	rate := 0.0
	if first := p.samples[0]; now.Sub(first.at) > 0 && len(p.samples) > 1 {
		rate = float64(n-first.n) / now.Sub(first.at).Seconds()
	}
	if final {
		rate = float64(n) / max(now.Sub(p.rec.start).Seconds(), 1e-9)
	}
	line := p.format(counts, n, rate, now.Sub(p.rec.start), final)
	if !p.terminal {
		fmt.Fprintln(p.w, line)
		return
	}
	pad := ""
	if len(line) < p.width {
		pad = strings.Repeat(" ", p.width-len(line))
	}
	p.width = max(p.width, len(line))
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r%s%s%s", line, pad, end)
}

// format renders one line, e.g.
// "  equal_share.yaml  premium 160  regular 158  | 318/640 done  196 req/s  1.7s".
func (p *progress) format(counts []int, n int, rate float64, elapsed time.Duration, final bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %s ", p.label)
	for i, c := range counts {
		fmt.Fprintf(&b, " %s %d", p.classes[i], c)
	}
	what := "req/s"
	if final {
		what = "req/s average"
	}
	if p.total > 0 {
		fmt.Fprintf(&b, "  | %d/%d done  %.0f %s  %.1fs", n, p.total, rate, what, elapsed.Seconds())
	} else {
		fmt.Fprintf(&b, "  | %d done  %.0f %s  %.1fs", n, rate, what, elapsed.Seconds())
	}
	if p.note != nil {
		if s := p.note(); s != "" {
			fmt.Fprintf(&b, "  %s", s)
		}
	}
	return b.String()
}
