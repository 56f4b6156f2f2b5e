package sched

import (
	"fmt"
	"testing"
)

// BenchmarkRing_PushPop measures one steady-state arbitration plus the
// re-enqueue of the winner, over C classes, L exact lanes (one entry each,
// plus two shared entries per class) and a cost/quantum ratio.
func BenchmarkRing_PushPop(b *testing.B) {
	for _, nc := range []int{1, 8, 64} {
		for _, lanes := range []int{0, 100, 10_000} {
			for _, ratio := range []uint64{1, 1_000, 1_000_000} {
				b.Run(fmt.Sprintf("classes=%d/lanes=%d/ratio=%d", nc, lanes, ratio), func(b *testing.B) {
					benchPushPop(b, nc, lanes, ratio)
				})
			}
		}
	}
}

func benchPushPop(b *testing.B, nc, lanes int, ratio uint64) {
	specs := make([]ClassSpec, nc)
	for i := range specs {
		specs[i] = quantumSpec(fmt.Sprintf("c%d", i), 1000*uint64(1+i%4))
	}
	r := newRing(specs)
	var seq uint64
	add := func(ci int, k laneKey) {
		seq++
		// Costs vary per entry around ratio × 1000.
		r.push(&entry{id: seq, seq: seq, class: ci, lane: k, cost: ratio * (500 + seq%1000), isl: 1000})
	}
	for ci := range nc {
		add(ci, laneKey{})
		add(ci, laneKey{})
	}
	for j := range lanes {
		add(j%nc, laneKey{worker: fmt.Sprintf("w%05d", j)})
	}
	ok := func(*entry) bool { return true }
	b.ReportAllocs()
	for b.Loop() {
		e := r.pop(ok)
		seq++
		e.seq = seq
		r.push(e)
	}
}

// BenchmarkRing_Flows measures one steady-state arbitration plus the
// re-enqueue of the winner in one class whose shared lane holds F flows of
// two entries each, with fairness off (one FCFS/WSPT heap of the same
// entries, Dynamo's lane) and on.
func BenchmarkRing_Flows(b *testing.B) {
	for _, flows := range []int{1, 100, 10_000} {
		for _, fair := range []bool{false, true} {
			b.Run(fmt.Sprintf("flows=%d/fairness=%v", flows, fair), func(b *testing.B) {
				benchFlows(b, flows, fair)
			})
		}
	}
}

func benchFlows(b *testing.B, flows int, fair bool) {
	r := newRing([]ClassSpec{quantumSpec("c", 1000)})
	if fair {
		r.enableFairness(&FairnessConfig{Enabled: true, MaxFlows: flows})
	}
	keys := make([]string, flows)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%05d", i)
	}
	var seq uint64
	for i := range 2 * flows {
		seq++
		r.push(&entry{id: seq, seq: seq, cost: 500 + seq%1000, isl: 1000, flowKey: keys[i%flows]})
	}
	ok := func(*entry) bool { return true }
	b.ReportAllocs()
	for b.Loop() {
		e := r.pop(ok)
		seq++
		e.seq = seq
		e.cost = 500 + seq%1000
		r.push(e)
	}
}
