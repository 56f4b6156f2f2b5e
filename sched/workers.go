package sched

import (
	"errors"
	"fmt"
	"math"
)

// This file holds the worker set, eligibility, pin resolution, the worker
// gate and the load book.
//
// Eligibility of a worker for a request: it serves the request's model (a
// worker with an empty Model serves every model) and carries every required
// taint. A pinned request is eligible only for its pinned (worker, rank),
// and only when that worker is eligible and the rank lies within the
// worker's DP range. The load book keeps, per (worker, DP rank), the active
// prefill tokens, active KV blocks and active requests of the requests
// dispatched there; a rank of a removed worker stays in the book, marked
// removed, until its last request ends.

// MaxDPSize bounds a worker's DP ranks: each rank has its own load entry,
// so a mistyped dp_size must not expand into billions of them. Real
// deployments stay far below it.
const MaxDPSize = 1 << 14

// validateWorkers reports the workers New refuses: more than MaxDPSize
// ranks. SetWorkers, which cannot fail, ignores such a worker.
func validateWorkers(list []Worker) error {
	var errs []error
	for _, w := range list {
		if w.DPSize > MaxDPSize {
			errs = append(errs, fmt.Errorf("sched: worker %q: dp_size %d exceeds %d", w.ID, w.DPSize, MaxDPSize))
		}
	}
	return errors.Join(errs...)
}

// workerState is one worker instance of the current set.
type workerState struct {
	id     string
	model  string
	role   Role
	taints []string
	// slots is the worker's SMG slot count; slotsGiven is set when the
	// operator gave it (the engine's report cannot override it then).
	slots      uint32
	slotsGiven bool
	// maxBatched is the worker's max_num_batched_tokens.
	maxBatched uint64
	dpStart    uint32
	// ranks are the worker's DP ranks, dpStart first.
	ranks []*rankState
}

// serves reports whether w serves model. A worker without a model serves
// every model; a request without a model (SGLang's /generate may omit it,
// GET /v1/models names none) can go to any worker.
func (w *workerState) serves(model string) bool {
	return w.model == "" || model == "" || w.model == model
}

// carries reports whether w carries every taint in required.
func (w *workerState) carries(required []string) bool {
	for _, t := range required {
		found := false
		for _, u := range w.taints {
			if u == t {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// need is what a request asks of a worker: its model, the taints it
// requires and, when not empty, the worker IDs it allows.
type need struct {
	model   string
	taints  []string
	allowed []string
}

// allows reports whether the request's subset admits worker id.
func (n need) allows(id string) bool {
	if len(n.allowed) == 0 {
		return true
	}
	for _, a := range n.allowed {
		if a == id {
			return true
		}
	}
	return false
}

// eligible reports whether w may be the destination of an unpinned
// request with need n: a prefill-role worker never is.
func (w *workerState) eligible(n need) bool {
	return w.role != RolePrefill && w.fits(n)
}

// prefillEligible reports whether w may run the prefill half of a split
// request with need n.
func (w *workerState) prefillEligible(n need) bool {
	return w.role != RoleDecode && w.fits(n)
}

// fits reports whether w serves n's model, carries its taints and is in
// its subset.
func (w *workerState) fits(n need) bool {
	return w.serves(n.model) && w.carries(n.taints) && n.allows(w.id)
}

// rankState is the load booked on one (worker, DP rank).
type rankState struct {
	w   *workerState // the worker the rank last belonged to
	key laneKey
	// prefill is the sum of the booked prefill tokens of requests that have
	// not produced their first token.
	prefill uint64
	// blocks is the sum of the booked KV blocks of requests in flight.
	blocks uint64
	// requests counts requests in flight.
	requests uint32
	// removed marks a rank whose worker left the set while it still had
	// requests in flight.
	removed bool
	// eng is the rank's last engine report (engine.go).
	eng engineState
}

// busyFor reports whether the rank is prefill-busy for class c: its active
// prefill tokens are strictly above the absolute threshold, or strictly
// above frac × max_num_batched_tokens (either suffices).
func (r *rankState) busyFor(c *ClassSpec) bool {
	if c.BusyThreshold != nil && r.prefill > *c.BusyThreshold {
		return true
	}
	return c.BusyThresholdFrac != nil && float64(r.prefill) > *c.BusyThresholdFrac*float64(r.w.maxBatched)
}

// busy reports whether r is busy for class c: prefill-busy by its
// bookings, or saturated by its engine's fresh report (engine.go).
func (s *Scheduler) busy(r *rankState, c *ClassSpec) bool {
	return r.busyFor(c) || s.saturated(r)
}

// installWorkers replaces the worker set. Ranks that stay keep their load;
// ranks that leave while loaded stay in the book, marked removed; duplicate
// IDs after the first, and workers with more than MaxDPSize ranks, are
// ignored.
func (s *Scheduler) installWorkers(list []Worker) {
	old := s.ranks
	s.prefillWorkers = 0
	s.workers = make([]*workerState, 0, len(list))
	s.byID = make(map[string]*workerState, len(list))
	s.ranks = make(map[laneKey]*rankState, len(old))
	for _, w := range list {
		if _, dup := s.byID[w.ID]; dup || w.DPSize > MaxDPSize {
			continue
		}
		ws := &workerState{
			id:         w.ID,
			model:      w.Model,
			role:       w.Role,
			taints:     append([]string(nil), w.Taints...),
			slots:      w.MaxRunningRequests,
			slotsGiven: w.MaxRunningRequests > 0,
			maxBatched: w.MaxBatchedTokens,
			dpStart:    w.DPStart,
		}
		if ws.slots == 0 {
			ws.slots = DefaultMaxRunningRequests
		}
		if ws.maxBatched == 0 {
			ws.maxBatched = DefaultMaxBatchedTokens
		}
		// DPSize 0 means 1; a range running past the last uint32 rank is cut.
		size := uint64(max(w.DPSize, 1))
		size = min(size, uint64(math.MaxUint32)-uint64(w.DPStart)+1)
		ws.ranks = make([]*rankState, size)
		for i := range ws.ranks {
			k := laneKey{worker: w.ID, rank: w.DPStart + uint32(i)}
			r := old[k]
			if r == nil {
				r = &rankState{key: k}
			}
			r.w, r.removed = ws, false
			ws.ranks[i] = r
			s.ranks[k] = r
		}
		s.workers = append(s.workers, ws)
		s.byID[w.ID] = ws
		if ws.role == RolePrefill {
			s.prefillWorkers++
		}
	}
	for k, r := range old {
		if _, kept := s.ranks[k]; !kept && r.requests > 0 {
			r.removed = true
			s.ranks[k] = r
		}
	}
}

// anyEligible reports whether some worker may serve an unpinned request
// with need n.
func (s *Scheduler) anyEligible(n need) bool {
	for _, w := range s.workers {
		if w.eligible(n) {
			return true
		}
	}
	return false
}

// instances counts the worker instances (not ranks) serving model: the
// multiplier of the per-worker queue limits.
func (s *Scheduler) instances(model string) uint64 {
	var n uint64
	for _, w := range s.workers {
		if w.serves(model) && w.role != RolePrefill {
			n++
		}
	}
	return n
}

// workerGate evaluates Dynamo's worker gate for e. eligible reports whether
// any rank is eligible for e at all; open reports whether e passes. A class
// without a busy threshold always passes. A pinned entry passes unless its
// rank is busy. A shared entry passes unless every eligible rank is busy,
// or, with BusyWorkerRatio > 0, unless busy ranks >= ratio × eligible
// ranks. With no eligible rank it passes (selection then fails fast).
func (s *Scheduler) workerGate(e *entry) (open, eligible bool) {
	c := e.spec()
	if e.lane.exact() {
		return !c.Queues() || !s.busy(e.rank, c), true
	}
	nd := e.need()
	if !c.Queues() {
		return true, s.anyEligible(nd)
	}
	if s.splits(e) {
		return s.prefillGate(e), s.anyEligible(nd)
	}
	var n, busy int
	for _, w := range s.workers {
		if !w.eligible(nd) {
			continue
		}
		for _, r := range w.ranks {
			n++
			switch {
			case s.busy(r, c):
				busy++
			case c.BusyWorkerRatio <= 0:
				return true, true
			}
		}
	}
	switch {
	case n == 0:
		return true, false
	case c.BusyWorkerRatio > 0:
		return float64(busy) < c.BusyWorkerRatio*float64(n), true
	default:
		return false, true
	}
}

// pinFault says why a pin cannot be used.
type pinFault uint8

const (
	pinOK pinFault = iota
	// pinNeedsRank: no rank given and the worker has several or unknown ranks.
	pinNeedsRank
	// pinUnavailable: the worker is unknown (or does not serve the model).
	pinUnavailable
	// pinOutOfRange: the rank is outside the worker's DP range.
	pinOutOfRange
	// pinConstraints: the worker lacks a required taint.
	pinConstraints
	// pinUnknown: no rank given and the worker is unknown (or does not
	// serve the model); answered as unavailable, not as a missing rank.
	pinUnknown
	// pinOutsideSubset: the worker is not in the request's endpoint subset.
	pinOutsideSubset
)

// resolvePin resolves and validates a pin for a request with need n, in
// Dynamo's order: rank resolution (an explicit rank as given, else the
// worker's only rank), known worker, DP bounds, taints, then the endpoint
// subset. A
// worker that does not serve the model counts as unknown: it is not in that
// model's worker set. It returns the pinned rank and the resolved rank
// number.
func (s *Scheduler) resolvePin(n need, p Pin) (*rankState, uint32, pinFault) {
	w := s.byID[p.Worker]
	if w != nil && (!w.serves(n.model) || p.Worker == "" || w.role == RolePrefill) {
		// The empty id names no exact lane (laneKey.exact), so a pin to it
		// could not be honoured; a prefill-role worker is no destination.
		w = nil
	}
	if !p.HasRank {
		if w == nil {
			return nil, 0, pinUnknown
		}
		if len(w.ranks) != 1 {
			return nil, 0, pinNeedsRank
		}
		p.Rank = w.dpStart
	}
	switch {
	case w == nil:
		return nil, p.Rank, pinUnavailable
	case p.Rank < w.dpStart || uint64(p.Rank-w.dpStart) >= uint64(len(w.ranks)):
		return nil, p.Rank, pinOutOfRange
	case !w.carries(n.taints):
		return nil, p.Rank, pinConstraints
	case !n.allows(w.id):
		return nil, p.Rank, pinOutsideSubset
	}
	return w.ranks[p.Rank-w.dpStart], p.Rank, pinOK
}

// pinMessage returns the upstream error text for a pin fault on worker id
// and rank.
func (s *Scheduler) pinMessage(id string, rank uint32, f pinFault) string {
	var reason string
	switch f {
	case pinNeedsRank:
		return fmt.Sprintf("Pinned worker %s requires an explicit dp_rank because it has multiple or unknown DP ranks", id)
	case pinUnknown:
		return fmt.Sprintf("Pinned worker %s is not eligible: no ready worker with that id serves the model", id)
	case pinOutOfRange:
		w := s.byID[id]
		reason = fmt.Sprintf("worker %s dp_rank %d is outside [%d, %d)", id, rank, w.dpStart, uint64(w.dpStart)+uint64(len(w.ranks)))
	case pinConstraints:
		reason = fmt.Sprintf("worker %s does not satisfy routing constraints", id)
	case pinOutsideSubset:
		reason = fmt.Sprintf("worker %s is outside the request's endpoint subset", id)
	case pinOK, pinUnavailable:
		fallthrough
	default:
		reason = fmt.Sprintf("worker %s is unavailable", id)
	}
	return fmt.Sprintf("Pinned worker %s dp_rank %d is not eligible: %s", id, rank, reason)
}

// noEndpointsMessage explains why no worker is eligible for an unpinned
// request with need n. It does not repeat the model name, which the client
// chose and the action carries.
func (s *Scheduler) noEndpointsMessage(n need) string {
	const prefix = "no endpoints available to route work: "
	serving, carrying := false, false
	for _, w := range s.workers {
		if w.serves(n.model) {
			serving = true
			carrying = carrying || w.carries(n.taints)
		}
	}
	switch {
	case !serving:
		return prefix + "no ready worker serves the model"
	case !carrying:
		return fmt.Sprintf(prefix+"no ready worker serving the model carries the required taints %q", n.taints)
	}
	return prefix + "no ready worker in the request's endpoint subset serves the model"
}

// cachedOn returns e's prefix-cache hit on worker id (0 when not listed).
func (e *entry) cachedOn(id string) uint64 {
	var n uint64
	for _, c := range e.cachedTokens {
		if c.Worker == id {
			n = max(n, c.Tokens)
		}
	}
	return n
}

// snapshotCached returns the cached-token snapshot of e before capping: the
// pinned worker's value, or the best value over the workers eligible for e.
func (s *Scheduler) snapshotCached(e *entry, model string, pinned string) uint64 {
	if pinned != "" {
		return e.cachedOn(pinned)
	}
	var best uint64
	for _, c := range e.cachedTokens {
		if c.Tokens > best {
			if w := s.byID[c.Worker]; w != nil && w.eligible(need{model: model, taints: e.taints, allowed: e.allowed}) {
				best = c.Tokens
			}
		}
	}
	return best
}

// blocksOf returns the KV blocks of a prompt of isl tokens.
func (s *Scheduler) blocksOf(isl uint64) uint64 { return ceilDiv(isl, s.blockSize) }

// book records e's load on rank r: its effective prefill tokens (ISL minus
// the tokens r's worker has cached), its prompt blocks and one request. A
// split request (e.prank set) books its prefill tokens on its prefill rank
// instead, less what that worker has cached.
func (s *Scheduler) book(e *entry, r *rankState) {
	e.rank = r
	if p := e.prank; p != nil {
		e.prefill = e.isl - min(e.cachedOn(p.key.worker), e.isl)
		p.prefill += e.prefill
	} else {
		e.prefill = e.isl - min(e.cachedOn(r.key.worker), e.isl)
		r.prefill += e.prefill
	}
	r.blocks += s.blocksOf(e.isl)
	r.requests++
	s.bookSince(e, r)
}

// releasePrefill releases e's prefill tokens (its first token arrived):
// on its rank, or on its prefill rank for a split request.
func (s *Scheduler) releasePrefill(e *entry) {
	s.unbookSince(e)
	if p := e.prank; p != nil {
		p.prefill -= e.prefill
	} else {
		e.rank.prefill -= e.prefill
	}
	e.prefill = 0
}

// unbook releases everything e booked. The last request on a removed rank
// takes the rank out of the book.
func (s *Scheduler) unbook(e *entry) {
	r := e.rank
	s.noteEnd(e)
	s.releasePrefill(e)
	r.blocks -= s.blocksOf(e.isl)
	r.requests--
	e.rank, e.prank = nil, nil
	if r.removed && r.requests == 0 && s.ranks[r.key] == r {
		delete(s.ranks, r.key)
	}
}
