package main

import (
	"fmt"
	"math"
	"time"

	"github.com/tollgate/tollgate/test/bench"
)

// e2eMeasure is a figure of the end-to-end phase.
type e2eMeasure int

const (
	measureThroughput e2eMeasure = iota
	measureP50
	measureP99
	measureCPU
)

// e2eTarget bounds the ratio tollgate/null of one end-to-end figure, both
// servers measured in the same run.
type e2eTarget struct {
	name    string
	mode    bench.Mode
	conc    int
	measure e2eMeasure
	bound   float64
	atLeast bool // the ratio must be ≥ bound; otherwise ≤ bound
}

// boundText is the bound as the Targets table prints it.
func (t e2eTarget) boundText() string {
	if t.atLeast {
		return fmt.Sprintf("≥ %.2f× null", t.bound)
	}
	return fmt.Sprintf("≤ %.2f× null", t.bound)
}

// met reports whether the ratio tollgate/null is within the bound.
func (t e2eTarget) met(ratio float64) bool {
	if ratio <= 0 {
		return false
	}
	if t.atLeast {
		return ratio >= t.bound
	}
	return ratio <= t.bound
}

// e2eTargets are the shell's cost targets for short requests: ratios to
// the null ext_proc server at fixed concurrencies.
var e2eTargets = []e2eTarget{
	{"BUFFERED with response phases, 64 streams: throughput tollgate / null", bench.ModeBuffered, 64, measureThroughput, 0.95, true},
	{"BUFFERED with response phases, 64 streams: server CPU per request tollgate / null", bench.ModeBuffered, 64, measureCPU, 1.25, false},
	{"BUFFERED, 1 stream: p50 latency tollgate / null", bench.ModeBuffered, 1, measureP50, 1.15, false},
	{"FULL_DUPLEX_STREAMED decision path, 1 stream: p50 latency tollgate / null", bench.ModeDuplex, 1, measureP50, 1.15, false},
	{"FULL_DUPLEX_STREAMED decision path, 16 streams: throughput tollgate / null", bench.ModeDuplex, 16, measureThroughput, 0.95, true},
}

// e2eTargetFor returns the target on measure of mode m at concurrency c.
func e2eTargetFor(m bench.Mode, c int, measure e2eMeasure) (e2eTarget, bool) {
	for _, t := range e2eTargets {
		if t.mode == m && t.conc == c && t.measure == measure {
			return t, true
		}
	}
	return e2eTarget{}, false
}

// longGoal bounds tollgate's decision latency above the null server's
// (p50) for a long chat priced with a real tokenizer and its chat
// template, FULL_DUPLEX_STREAMED, at one size and pass.
type longGoal struct {
	name   string
	tokens int
	pass   string
	bound  time.Duration
}

// longGoals are the long-context goals; a run reads the worst real
// tokenizer it measured.
var longGoals = []longGoal{
	{"Long context, 100k-token chat, earlier turns seen, real tokenizer + template, FULL_DUPLEX_STREAMED: decision p50 tollgate − null",
		100000, bench.PassSeen, 5 * time.Millisecond},
	{"Long context, 100k-token chat, unseen, real tokenizer + template, FULL_DUPLEX_STREAMED: decision p50 tollgate − null",
		100000, bench.PassUnseen, 15 * time.Millisecond},
	{"Long context, 25k-token chat, earlier turns seen, real tokenizer + template, FULL_DUPLEX_STREAMED: decision p50 tollgate − null",
		25000, bench.PassSeen, 2 * time.Millisecond},
}

// Tokenizer and response-chunk targets.
const (
	familyMBsTarget    = 40.0 // MB/s of every model tokenizer on one core
	chunkCPUTarget     = 5 * time.Microsecond
	familyTargetName   = "Model tokenizers, every family on one core (-cpu 1): encode MB/s of a 10 KiB completion prompt"
	chunkCPUTargetName = "Streamed response: server CPU per response body chunk, tollgate − null"
)

// Held-request and core targets.
const (
	heldTargetSize       = 10000    // held requests the held targets are read at
	heldRSSTarget        = 16 << 10 // bytes of RSS per held request
	heldGoroutinesTarget = 1.0      // goroutines per held request
)

// replicaHopTarget bounds the decision latency a front adds over the
// scheduler's own replica (p50, one stream, loopback).
const replicaHopTarget = 100 * time.Microsecond

// Names of the targets outside the end-to-end phase.
var (
	replicaHopTargetName     = "Replica mode, 1 stream on loopback: decision p50 through a front − through the scheduler's own replica"
	heldRSSTargetName        = fmt.Sprintf("Held requests, %s held: RSS per held request", bench.FormatCount(heldTargetSize))
	heldGoroutinesTargetName = fmt.Sprintf("Held requests, %s held: goroutines per held request", bench.FormatCount(heldTargetSize))
	coreAllocsTargetName     = "Scheduling core: allocations per operation (every ring, Submit+dispatch+Release and preemption benchmark)"
)

// goroutinesMet compares a goroutines-per-held-request figure with the
// target to the two decimals it is printed with: the server's own
// goroutines that come and go while N requests are held move it by a few
// per N.
func goroutinesMet(v float64) bool {
	return math.Round(v*100)/100 <= heldGoroutinesTarget
}

// newTargets lists every target of the run, none measured yet.
func newTargets() []bench.Target {
	var ts []bench.Target
	for _, t := range e2eTargets {
		ts = append(ts, bench.Target{Name: t.name, Bound: t.boundText()})
	}
	for _, g := range longGoals {
		ts = append(ts, bench.Target{Name: g.name, Bound: "≤ +" + bench.FormatDuration(g.bound)})
	}
	return append(ts,
		bench.Target{Name: replicaHopTargetName, Bound: "≤ +" + bench.FormatDuration(replicaHopTarget)},
		bench.Target{Name: familyTargetName, Bound: fmt.Sprintf("≥ %.0f MB/s each", familyMBsTarget)},
		bench.Target{Name: chunkCPUTargetName, Bound: "≤ " + bench.FormatDuration(chunkCPUTarget)},
		bench.Target{Name: heldRSSTargetName, Bound: "≤ " + bench.FormatBytes(heldRSSTarget)},
		bench.Target{Name: heldGoroutinesTargetName, Bound: fmt.Sprintf("≤ %.0f", heldGoroutinesTarget)},
		bench.Target{Name: coreAllocsTargetName, Bound: "0"},
	)
}

// measured records the figure of the target called name.
func (r *runner) measured(name, value string, met bool) {
	for i := range r.report.Targets {
		if r.report.Targets[i].Name == name {
			r.report.Targets[i].Value, r.report.Targets[i].Met = value, met
			return
		}
	}
	panic("tollbench: no target " + name)
}
