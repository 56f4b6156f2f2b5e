package sched

// This file holds prefill/decode disaggregation, with llm-d's contract: a
// request goes to its decode worker (its destination, chosen as any
// request's), and, when the fleet has prefill-role workers and the prompt's
// uncached tokens on that decode worker reach Config.PDThreshold, its
// prefill runs on a prefill worker the decode worker's sidecar calls. The
// same prompt arriving again finds its prefix cached on the decode worker,
// where the KV ended up, and is served whole.
//
// The prefill worker is chosen by the prefill term of the cost function
// (its booked prefill tokens plus the prompt, less what it has cached),
// among the prefill-eligible ranks of other workers that its class's busy
// threshold does not mark busy. A split request books its prefill tokens on
// the prefill rank and its blocks and request on the decode rank; the
// first token releases the prefill half, the end the rest. Pinned
// requests are not split.
//
// The worker gate of a request that will be split (its snapshot already
// reaches the threshold) looks at the prefill ranks instead of the decode
// ranks: the prefill is where the busy threshold's work happens.

// pdThreshold is the split threshold in force.
func (s *Scheduler) pdThreshold() uint64 {
	if s.cfg.PDThreshold > 0 {
		return s.cfg.PDThreshold
	}
	return DefaultPDThreshold
}

// disaggregated reports whether the fleet has a prefill-role worker that
// could serve n.
func (s *Scheduler) disaggregated(n need) bool {
	if s.prefillWorkers == 0 {
		return false
	}
	for _, w := range s.workers {
		if w.role == RolePrefill && w.fits(n) {
			return true
		}
	}
	return false
}

// splitFor returns the prefill rank of e, about to be booked on decode rank
// r, or nil when e is served whole.
func (s *Scheduler) splitFor(e *entry, r *rankState) *rankState {
	if e.lane.exact() {
		return nil
	}
	n := e.need()
	if e.isl-min(e.cachedOn(r.key.worker), e.isl) < s.pdThreshold() || !s.disaggregated(n) {
		return nil
	}
	return s.pickPrefill(e, n, r.w)
}

// splits reports whether the queued e will be split when dispatched, by
// its cost snapshot: the uncached tokens on its best-cached worker.
func (s *Scheduler) splits(e *entry) bool {
	return !e.lane.exact() && e.isl-e.cached >= s.pdThreshold() && s.disaggregated(e.need())
}

// pickPrefill returns the cheapest prefill rank for e that is not busy for
// its class, on a worker other than decode, ties broken at random; nil
// when there is none.
func (s *Scheduler) pickPrefill(e *entry, n need, decode *workerState) *rankState {
	c := e.spec()
	var best lowest
	for _, w := range s.workers {
		if w == decode || !w.prefillEligible(n) {
			continue
		}
		cached := min(e.cachedOn(w.id), e.isl)
		for _, r := range w.ranks {
			if !c.Queues() || !s.busy(r, c) {
				best.offer(s.rnd, r, s.prefillCost(r, e.isl, cached))
			}
		}
	}
	return best.r
}

// prefillGate is the worker gate of a request that will be split: open
// when some prefill rank is not busy for its class.
func (s *Scheduler) prefillGate(e *entry) bool {
	c := e.spec()
	n := e.need()
	for _, w := range s.workers {
		if !w.prefillEligible(n) {
			continue
		}
		for _, r := range w.ranks {
			if !s.busy(r, c) {
				return true
			}
		}
	}
	return false
}
