package sched

import (
	"cmp"
	"math"
	"slices"
)

// Stats returns a snapshot for metrics. Queues lists the queues in creation
// order, classes in profile order. Ranks lists every rank of the current
// workers, in worker-set order, then the ranks of removed workers that still
// have requests in flight, sorted by worker and rank.
func (s *Scheduler) Stats() Stats {
	st := Stats{
		Capacity:    s.capacity,
		Reserved:    s.reserved,
		InFlight:    s.inFlight,
		Admits:      s.admits,
		Preemptions: s.preemptions,
		Promotions:  s.promotions,
		Seeded:      uint32(min(s.seeded, math.MaxUint32)),
		Warming:     s.warming,
		Admission:   s.adm.stats,
		Splits:      s.splitCount,
	}
	st.Admission.Waiting, st.Admission.Holding = s.adm.parked.n, s.adm.holding
	if s.budgets != nil {
		b := s.budgets.stats
		b.Scopes = len(s.budgets.scopes)
		st.Budgets = &b
	}
	if s.capacity > 0 {
		st.Utilization = float64(s.inFlightTotal) / float64(s.capacity)
	}
	var above uint64 // Σ reserved of the classes above p
	for p := NumPriorities - 1; p >= 0; p-- {
		st.QueueDepth[p] = s.wait[p].n
		st.QueueLimit[p] = s.cfg.Priority.Classes[p].QueueSize
		st.Pressure[p] = s.pressure(Priority(p), above)
		above += uint64(s.reserved[p])
	}
	for _, mq := range s.order {
		for i := range mq.profile.Classes {
			requests, isl, cached := mq.ring.classStats(i)
			st.Queues = append(st.Queues, QueueStats{
				Model:        mq.name,
				PolicyClass:  mq.profile.Classes[i].Name,
				Requests:     requests,
				ISLTokens:    isl,
				CachedTokens: cached,
				Backpressure: mq.backpressure[i],
				Expired:      mq.expired[i],
				Deficit:      mq.ring.deficit(i),
			})
			mq.ring.flowStats(i, &st.Queues[len(st.Queues)-1])
		}
	}
	for _, w := range s.workers {
		for _, r := range w.ranks {
			st.Ranks = append(st.Ranks, s.rankStats(r))
		}
	}
	first := len(st.Ranks)
	for _, r := range s.ranks {
		if r.removed {
			st.Ranks = append(st.Ranks, s.rankStats(r))
		}
	}
	slices.SortFunc(st.Ranks[first:], func(a, b RankStats) int {
		return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Rank, b.Rank))
	})
	return st
}

// pressure is SMG's class pressure: min(1, max(depth/queue_size,
// max(0, in_flight − reserved)/max(1, capacity − Σ reserved above))), the
// queue term being 0 when queue_size is 0.
func (s *Scheduler) pressure(p Priority, reservedAbove uint64) float64 {
	var queue float64
	if limit := s.cfg.Priority.Classes[p].QueueSize; limit > 0 {
		queue = float64(s.wait[p].n) / float64(limit)
	}
	var slot float64
	if in, r := s.inFlight[p], s.reserved[p]; in > r {
		room := uint64(1)
		if c := uint64(s.capacity); c > reservedAbove+1 {
			room = c - reservedAbove
		}
		slot = float64(in-r) / float64(room)
	}
	return min(1, max(queue, slot))
}

// rankStats returns r's load snapshot.
func (s *Scheduler) rankStats(r *rankState) RankStats {
	st := r.stats()
	if r.eng.known {
		st.Engine = EngineStats{
			Known: true, Fresh: s.fresh(r), Age: s.now - r.eng.at,
			Waiting: r.eng.waiting, Running: r.eng.running, KVUsage: r.eng.kv,
			Since: r.eng.since, Saturated: s.saturated(r), Seed: r.eng.seed,
		}
	}
	return st
}

// stats returns the rank's booked load.
func (r *rankState) stats() RankStats {
	return RankStats{
		Worker:              r.key.worker,
		Rank:                r.key.rank,
		ActivePrefillTokens: r.prefill,
		ActiveBlocks:        r.blocks,
		ActiveRequests:      r.requests,
		Removed:             r.removed,
	}
}
