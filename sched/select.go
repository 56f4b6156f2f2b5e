package sched

import (
	"math"
	"math/rand/v2"
)

// This file holds worker selection after admission (Dynamo's cost function)
// and Route.
//
// The cost of placing a request of isl prompt tokens on rank r of worker w,
// which holds cached_w of them (capped at isl), is
//
//	scale × max(0, (active_prefill + isl)/block_size − credit × cached_w/block_size)
//	  + (active_blocks + ⌈isl/block_size⌉)
//
// with scale = PrefillLoadScale and credit = OverlapCredit. A cache hit is
// credited once, against prefill: the decode term counts every block of the
// request, as Dynamo's does unless the blocks are already active on the
// rank (it dedups against requests in flight; tollgate does not track
// blocks by hash, so this over-counts only identical prompts in flight
// together). The lowest cost
// wins; exact ties are broken uniformly at random (reservoir sampling).
// A rank's warm-start seed (engine.go) adds its blocks to the decode term,
// and saturated ranks are passed over while an eligible rank is not.
// With Temperature T > 0 the rank is instead sampled with probability
// ∝ exp(−(c − c_min) / ((c_max − c_min) × T)), uniformly when every cost is
// equal. A pinned request takes its pin without any sampling.

// rankCost returns the selection cost of isl tokens, cached of them on the
// rank's worker, on r.
func (s *Scheduler) rankCost(r *rankState, isl, cached uint64) float64 {
	prefill := s.prefillCost(r, isl, cached) / float64(s.blockSize)
	decode := float64(r.blocks) + float64(r.eng.seedBlocks) + float64(s.blocksOf(isl))
	return s.sel.PrefillLoadScale*prefill + decode
}

// prefillCost is the prefill term of rankCost, in tokens: the rank's
// booked prefill plus the prompt, less the credit for what its worker has
// cached. It also chooses a split request's prefill rank (pd.go).
func (s *Scheduler) prefillCost(r *rankState, isl, cached uint64) float64 {
	return max(0, float64(r.prefill)+float64(isl)-s.sel.OverlapCredit*float64(cached))
}

// lowest keeps the lowest-cost rank it is offered, exact ties broken
// uniformly at random (reservoir sampling).
type lowest struct {
	r    *rankState
	cost float64
	ties int
}

func (l *lowest) offer(rnd *rand.Rand, r *rankState, cost float64) {
	switch {
	case l.r == nil || cost < l.cost:
		l.r, l.cost, l.ties = r, cost, 1
	case cost == l.cost:
		l.ties++
		if rnd.IntN(l.ties) == 0 {
			l.r = r
		}
	}
}

// choose selects the rank for admitted e: its pin, or the best eligible
// rank. It returns nil when no rank is eligible.
func (s *Scheduler) choose(e *entry) *rankState {
	if e.lane.exact() {
		return e.rank
	}
	return s.pick(e.need(), e, s.sel.Temperature)
}

// pick runs the cost function over the ranks eligible for need n. e
// supplies the prompt and cache hits; nil means an empty prompt (Route).
// temperature > 0 samples the softmax instead of taking the lowest cost.
func (s *Scheduler) pick(n need, e *entry, temperature float64) *rankState {
	var best lowest
	s.cands, s.costs = s.cands[:0], s.costs[:0]
	avoid := s.cfg.Engine.Saturation && s.engineOn() && s.anyUnsaturated(n)
	for _, w := range s.workers {
		if !w.eligible(n) {
			continue
		}
		var isl, cached uint64
		if e != nil {
			isl = e.isl
			cached = min(e.cachedOn(w.id), isl)
		}
		for _, r := range w.ranks {
			if avoid && s.saturated(r) {
				continue
			}
			c := s.rankCost(r, isl, cached)
			if temperature > 0 {
				s.cands = append(s.cands, r)
				s.costs = append(s.costs, c)
			} else {
				best.offer(s.rnd, r, c)
			}
		}
	}
	if temperature > 0 {
		return s.sample(temperature)
	}
	return best.r
}

// sample draws one of s.cands from the softmax over normalized s.costs.
func (s *Scheduler) sample(temperature float64) *rankState {
	n := len(s.cands)
	if n == 0 {
		return nil
	}
	lo, hi := s.costs[0], s.costs[0]
	for _, c := range s.costs[1:] {
		lo, hi = min(lo, c), max(hi, c)
	}
	if hi == lo {
		return s.cands[s.rnd.IntN(n)]
	}
	scale := (hi - lo) * temperature
	var sum float64
	for i, c := range s.costs {
		w := math.Exp(-(c - lo) / scale)
		s.costs[i] = w
		sum += w
	}
	u := s.rnd.Float64() * sum
	for i, w := range s.costs {
		if u < w {
			return s.cands[i]
		}
		u -= w
	}
	return s.cands[n-1]
}

// Route picks the least-loaded eligible worker for a request that needs no
// admission (GET /v1/models and the like): the lowest selection cost for an
// empty prompt, ties broken at random. It books nothing. ok is false when no
// worker serves model.
func (s *Scheduler) Route(model string) (worker string, rank uint32, ok bool) {
	return s.RouteIn(model, nil)
}

// RouteIn is Route restricted to the workers in allowed (every worker when
// allowed is empty), as Request.AllowedWorkers restricts a request.
func (s *Scheduler) RouteIn(model string, allowed []string) (worker string, rank uint32, ok bool) {
	r := s.pick(need{model: model, allowed: allowed}, nil, 0)
	if r == nil {
		return "", 0, false
	}
	return r.key.worker, r.key.rank, true
}
