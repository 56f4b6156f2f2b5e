package sched

import "time"

// This file holds fallback endpoints and the served-worker correction.
//
// The endpoint picker protocol lets a picker name several endpoints, the
// first preferred, so the data plane can retry on the next one. With
// Config.Fallbacks = n, a dispatch names up to n more workers: the
// cheapest eligible workers other than the chosen one, each at its
// cheapest rank, by the same cost function selection uses (ties keep the
// worker set's order). The data plane reports which endpoint served the
// request; Served then moves the booking there.

// fallbacks returns the next-best workers for e, dispatched to chosen.
// The slice lives in s.fb, which the first action of each call resets.
func (s *Scheduler) fallbacks(e *entry, chosen *rankState) []RankRef {
	if len(s.actions) == 1 {
		s.fb = s.fb[:0]
	}
	start := len(s.fb)
	s.fbCost = s.fbCost[:0]
	n := e.need()
	for _, w := range s.workers {
		if w == chosen.w || !w.eligible(n) {
			continue
		}
		cached := min(e.cachedOn(w.id), e.isl)
		var best *rankState
		var bestCost float64
		for _, r := range w.ranks {
			if c := s.rankCost(r, e.isl, cached); best == nil || c < bestCost {
				best, bestCost = r, c
			}
		}
		// Insert into the sorted run s.fb[start:], keeping at most
		// Config.Fallbacks; equal costs keep the set's order.
		i := len(s.fbCost)
		for i > 0 && s.fbCost[i-1] > bestCost {
			i--
		}
		if i >= s.cfg.Fallbacks {
			continue
		}
		s.fb = append(s.fb, RankRef{})
		s.fbCost = append(s.fbCost, 0)
		copy(s.fb[start+i+1:], s.fb[start+i:])
		copy(s.fbCost[i+1:], s.fbCost[i:])
		s.fb[start+i] = RankRef{Worker: best.key.worker, Rank: best.key.rank}
		s.fbCost[i] = bestCost
		if len(s.fbCost) > s.cfg.Fallbacks {
			s.fb = s.fb[:len(s.fb)-1]
			s.fbCost = s.fbCost[:len(s.fbCost)-1]
		}
	}
	if len(s.fb) == start {
		return nil
	}
	return s.fb[start:len(s.fb):len(s.fb)]
}

// Served reports that in-flight request id was served by worker's rank
// rather than where it was dispatched (the data plane retried on a
// fallback). Its booking moves there: prompt blocks and the request, and
// its prefill tokens unless its first token came already, with the new
// worker's cache hit. A dispatch pass follows, since the old worker has
// room now. Unknown or queued IDs, unknown workers or ranks, and the rank
// already booked are ignored.
func (s *Scheduler) Served(now time.Time, id uint64, worker string, rank uint32) []Action {
	s.actions = s.actions[:0]
	t := s.at(now)
	e := s.entries[id]
	r := s.rankAt(worker, rank)
	if e == nil || e.state != stateInFlight || r == nil || r == e.rank {
		return s.actions
	}
	old := e.rank.key.worker
	s.unbook(e)
	if e.flags&flagFirstToken != 0 {
		e.rank = r
		r.blocks += s.blocksOf(e.isl)
		r.requests++
	} else {
		s.book(e, r)
	}
	s.recheckWorker(old)
	s.pass(t)
	return s.actions
}
