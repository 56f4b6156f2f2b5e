package sched

import (
	"cmp"
	"slices"
)

// flowStats fills q's flow list and fairness index for class ci. It runs
// at scrape time, in O(F log F) for the F flows of the class, and its
// result does not depend on map order.
func (r *ring) flowStats(ci int, q *QueueStats) {
	q.Fairness = 1
	if r.fair == nil {
		return
	}
	c := &r.classes[ci]
	type agg struct {
		st   FlowStats
		rate float64 // Σ over the key's flows of served / weight / rounds
		n    int     // flows backlogged for at least one round
	}
	var aggs []agg
	index := make(map[string]int)
	over := -1
	visit := func(l *lane) {
		fs := l.fs
		for _, s := range fs.heap {
			f := s.f
			w := f.quantum / max(fs.quantum, 1)
			i, ok := index[f.key]
			if f.overflow {
				i, ok = over, over >= 0
			}
			if !ok {
				i = len(aggs)
				aggs = append(aggs, agg{st: FlowStats{Key: f.key, Overflow: f.overflow, Weight: uint32(w)}})
				if f.overflow {
					over = i
				} else {
					index[f.key] = i
				}
			}
			a := &aggs[i]
			a.st.Requests += uint64(len(f.h))
			a.st.ServedTokens += f.served
			if rounds := fs.round - f.since; rounds > 0 {
				a.rate += float64(f.served) / float64(max(w, 1)) / float64(rounds)
				a.n++
			}
		}
	}
	visit(&c.shared)
	for _, l := range c.lanes {
		visit(l)
	}
	slices.SortFunc(aggs, func(a, b agg) int {
		if a.st.Overflow != b.st.Overflow {
			if a.st.Overflow {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.st.Key, b.st.Key)
	})
	// Jain's index (Σx)² / (n Σx²) over the keys' mean weighted rates per
	// round; the overflow flow, shared by many keys, is left out.
	var sum, sq float64
	for _, a := range aggs {
		q.Flows = append(q.Flows, a.st)
		if a.n > 0 && !a.st.Overflow {
			x := a.rate / float64(a.n)
			sum += x
			sq += x * x
			q.FairnessFlows++
		}
	}
	if q.FairnessFlows >= 2 && sq > 0 {
		q.Fairness = sum * sum / (float64(q.FairnessFlows) * sq)
	}
}
