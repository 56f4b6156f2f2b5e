package sched

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// This file holds what the engines report about themselves (ReportLoad)
// and the four uses of it, each switched by EngineConfig:
//
//   - Saturation. A rank whose fresh report shows
//     waiting + requests booked on it after the report was read and still
//     without a first token > WaitingThreshold, or KV usage > KVThreshold, is
//     saturated: the worker gate counts it busy for every class that queues,
//     and selection passes it over while some eligible rank is not
//     saturated (when every one is, selection picks by cost as before).
//     The bookings cover what happened since the report; the report covers
//     what tollgate cannot see (the engine's own queue, traffic routed by
//     someone else).
//   - Staleness. A report older than MaxAge at the time of the decision is
//     ignored: the rank is judged by its bookings alone. A whole-fleet
//     outage therefore falls back to bookings and never halts dispatch.
//   - Warm start. After New (or Resume) the SMG slot gate admits nothing
//     until every rank has reported, for at most WarmWait. An arrival that
//     has to queue meanwhile is not refused by a queue limit: the limits
//     and preemption are applied when the hold ends (judgeWarm). Each
//     rank's first fresh report seeds it with the engine's running +
//     waiting requests not covered by its bookings; the seed adds to the
//     rank's selection cost, and holds slots in the SMG pool, but at most
//     the worker's own: the seeds of worker w's ranks hold
//     min(Σ seed, slots(w)), so one engine's report, however large, never
//     takes another worker's slots. Later reports only lower the seed (to
//     what the engine reports beyond the bookings), a report late: a
//     request the engine finished just before a read is released here
//     after it (seedRank). Once the requests in flight before the start
//     have ended the bookings alone count. A stale rank loses its seed for
//     good.
//   - Capacity. A worker given no max_running_requests takes its slot count
//     from the sum of its ranks' reported MaxRunning once every rank has
//     reported one; the SMG capacity and the clamped reservations follow.

// EngineConfig switches and tunes the use of engine-reported load. The zero
// value uses none of it: ReportLoad then only records the reports.
type EngineConfig struct {
	// MaxAge is the staleness bound: a report older than this at the time
	// of a decision is ignored. 0 disables every use of the reports.
	MaxAge time.Duration
	// Saturation enables the saturation gate.
	Saturation bool
	// WaitingThreshold: a rank is saturated when its projected waiting
	// requests are strictly above this.
	WaitingThreshold uint32
	// KVThreshold: a rank is saturated when its KV usage (0..1) is strictly
	// above this. 0 leaves KV usage out of the gate.
	KVThreshold float64
	// WarmStart enables the warm start.
	WarmStart bool
	// WarmWait bounds how long the warm start holds the slot gate closed
	// waiting for every rank's first report. 0 means no hold: ranks are
	// seeded as their reports arrive.
	WarmWait time.Duration
	// Capacity takes the slot count of workers without
	// max_running_requests from their reports.
	Capacity bool
}

// validate reports malformed engine settings.
func (c *EngineConfig) validate() error {
	var errs []error
	if c.MaxAge < 0 || c.WarmWait < 0 {
		errs = append(errs, errors.New("sched: engine max age and warm wait must not be negative"))
	}
	if math.IsNaN(c.KVThreshold) || math.IsInf(c.KVThreshold, 0) || c.KVThreshold < 0 {
		errs = append(errs, fmt.Errorf("sched: engine kv threshold %v must be finite and >= 0", c.KVThreshold))
	}
	return errors.Join(errs...)
}

// EngineLoad is what one (worker, DP rank) reported about itself.
type EngineLoad struct {
	Worker string
	Rank   uint32
	// At is when the numbers were read.
	At time.Time
	// Waiting and Running are the engine's queued and running requests.
	Waiting, Running uint32
	// KVUsage is the used fraction of the KV cache, 0..1.
	KVUsage float64
	// KVBlocks is the KV cache size in blocks; 0 when not reported.
	KVBlocks uint64
	// MaxRunning is the engine's running-request limit; 0 when not
	// reported.
	MaxRunning uint32
}

// seedState is where a rank is in the warm start.
type seedState uint8

const (
	// seedPending: the rank waits for its first fresh report.
	seedPending seedState = iota
	// seedActive: the rank carries a seed from its reports.
	seedActive
	// seedDone: the bookings alone count.
	seedDone
)

// engineState is the last report of a rank and what follows from it.
type engineState struct {
	known            bool
	at               instant
	waiting, running uint32
	kv               float64
	kvBlocks         uint64
	maxRunning       uint32
	// epoch counts reports; an entry booked under the current epoch and
	// still without a first token is counted in since.
	epoch uint32
	since uint32
	// seed is the warm-start load in requests, seedBlocks its KV blocks.
	seed       uint32
	seedBlocks uint64
	seedState  seedState
	// recent holds the booking times of the rank's last len(recent)
	// requests (ring, nRecent written so far): a report read at time at
	// cannot contain the requests booked after at.
	recent    [recentBookings]instant
	recentIDs [recentBookings]uint64
	nRecent   uint64
	// prefilling counts the rank's requests in flight without a first
	// token: the engine may not have received them yet. firsts holds the
	// first-token times of the last len(firsts) requests (ring).
	prefilling uint32
	firsts     [recentBookings]instant
	nFirsts    uint64
	// prevLoad is the rank's report before the last one (running +
	// waiting), prevSure the requests past their first token when it was
	// read that are still in flight; prevKnown is set once there is one.
	// seedRank lowers the seed from it, not from the last report.
	prevLoad  uint64
	prevSure  uint32
	prevKnown bool
	// lastSure counts the requests in flight past their first token when
	// the last report was read, as it was recorded; lastGone those of them
	// released since. Their difference (stillSure) sets a first seed; the
	// next report makes it prevSure.
	lastSure, lastGone uint32
}

// recentBookings bounds the booking times kept per rank. More bookings
// than this between a scrape and its report count as this many.
const recentBookings = 32

// recountSince sets r's since count after a report read at at: the
// requests booked on r after at that are still in flight without a first
// token. They are counted in the new epoch, so their first token or end
// takes them out again.
func (s *Scheduler) recountSince(r *rankState, at instant) {
	e := &r.eng
	e.since = 0
	for i := range min(e.nRecent, recentBookings) {
		if e.recent[i] <= at {
			continue
		}
		x := s.entries[e.recentIDs[i]]
		if x == nil || x.state != stateInFlight || x.rank != r || x.flags&flagPrefilling == 0 {
			continue
		}
		x.epoch = e.epoch
		x.flags |= flagSince
		e.since++
	}
}

// countAfter counts the times in the first n (at most len) of ring
// strictly after at.
func countAfter(ring *[recentBookings]instant, n uint64, at instant) uint32 {
	var c uint32
	for i := range min(n, recentBookings) {
		if ring[i] > at {
			c++
		}
	}
	return c
}

// engineOn reports whether engine reports are used at all.
func (s *Scheduler) engineOn() bool { return s.cfg.Engine.MaxAge > 0 }

// fresh reports whether r's last report is within the staleness bound now.
func (s *Scheduler) fresh(r *rankState) bool {
	return s.engineOn() && r.eng.known && s.now-r.eng.at <= s.cfg.Engine.MaxAge
}

// saturated reports whether r's fresh report puts it past a threshold.
func (s *Scheduler) saturated(r *rankState) bool {
	c := &s.cfg.Engine
	if !c.Saturation || !s.fresh(r) {
		return false
	}
	waiting := uint64(r.eng.waiting) + uint64(r.eng.since)
	return waiting > uint64(c.WaitingThreshold) || (c.KVThreshold > 0 && r.eng.kv > c.KVThreshold)
}

// anyUnsaturated reports whether some rank eligible for need n is not
// saturated; selection avoids saturated ranks only then.
func (s *Scheduler) anyUnsaturated(n need) bool {
	for _, w := range s.workers {
		if !w.eligible(n) {
			continue
		}
		for _, r := range w.ranks {
			if !s.saturated(r) {
				return true
			}
		}
	}
	return false
}

// occupied is the slots in use: the in-flight requests plus the slots the
// warm-start seeds hold.
func (s *Scheduler) occupied() uint32 {
	return s.inFlightTotal + uint32(min(s.seeded, uint64(math.MaxUint32-s.inFlightTotal)))
}

// seedCharge returns the slots w's seeds hold: their sum, at most the
// worker's own slots. The worker's bookings take slots of their own.
func seedCharge(w *workerState) uint64 {
	var seed uint64
	for _, r := range w.ranks {
		seed += uint64(r.eng.seed)
	}
	return min(seed, uint64(min(w.slots, maxCapacity)))
}

// recountSeeds sets the slots the seeds of the current workers hold.
func (s *Scheduler) recountSeeds() {
	var total uint64
	for _, w := range s.workers {
		if w.role != RolePrefill { // a prefill worker holds no request slots
			total += seedCharge(w)
		}
	}
	s.seeded = total
}

// bookSince counts e, just booked on r, as arrived since r's last report.
func (s *Scheduler) bookSince(e *entry, r *rankState) {
	if !s.engineOn() {
		return
	}
	r.eng.recent[r.eng.nRecent%recentBookings] = s.now
	r.eng.recentIDs[r.eng.nRecent%recentBookings] = e.id
	r.eng.nRecent++
	r.eng.prefilling++
	e.flags |= flagPrefilling
	e.epoch = r.eng.epoch
	e.flags |= flagSince
	r.eng.since++
}

// unbookSince takes e out of its rank's since count (first token or end).
func (s *Scheduler) unbookSince(e *entry) {
	if e.flags&flagPrefilling != 0 {
		e.flags &^= flagPrefilling
		r := &e.rank.eng
		r.prefilling--
		r.firsts[r.nFirsts%recentBookings] = s.now
		r.nFirsts++
		e.first = s.now
	}
	if e.flags&flagSince == 0 {
		return
	}
	e.flags &^= flagSince
	if r := e.rank; e.epoch == r.eng.epoch && r.eng.since > 0 {
		r.eng.since--
	}
}

// ReportLoad records engine reports, applies the warm start and the engine
// capacity, and runs a dispatch pass (a rank may have stopped or started
// being saturated, a slot may have been freed). Reports for unknown or
// removed ranks are ignored; a report older than the one recorded is
// ignored. The shell calls it regularly, with whatever loads were read
// since the last call (possibly none), so that staleness is noticed at
// least that often.
func (s *Scheduler) ReportLoad(now time.Time, loads []EngineLoad) []Action {
	s.actions = s.actions[:0]
	t := s.at(now)
	for i := range loads {
		s.record(&loads[i])
	}
	changed := false
	if s.engineOn() {
		if s.cfg.Engine.Capacity {
			changed = s.applyEngineCapacity()
		}
		// After the capacity: a worker's seeds hold at most its slots.
		changed = s.applySeeds() || changed
	}
	ended := s.warming && s.allSeeded()
	if ended {
		s.warming = false
		changed = true
	}
	if changed {
		s.applyCapacity(workerCapacity(s.workers, s.cfg.FallbackCapacity))
	}
	s.recheckAll()
	s.dispatchLoop(t, false)
	if ended {
		s.judgeWarm(t)
		s.dispatchLoop(t, false)
	}
	return s.actions
}

// record stores one report on its rank.
func (s *Scheduler) record(l *EngineLoad) {
	r := s.ranks[laneKey{worker: l.Worker, rank: l.Rank}]
	if r == nil || r.removed {
		return
	}
	at := l.At.Sub(s.origin)
	if r.eng.known && at < r.eng.at {
		return
	}
	kv := l.KVUsage
	if !(kv >= 0) { // also NaN
		kv = 0
	}
	e := &r.eng
	if e.known {
		e.prevLoad, e.prevSure, e.prevKnown = uint64(e.running)+uint64(e.waiting), e.stillSure(), true
	}
	past := r.requests - min(e.prefilling, r.requests)
	e.lastSure, e.lastGone = past-min(countAfter(&e.firsts, e.nFirsts, at), past), 0
	e.known, e.at = true, at
	e.waiting, e.running = l.Waiting, l.Running
	e.kv, e.kvBlocks, e.maxRunning = min(kv, 1), l.KVBlocks, l.MaxRunning
	e.epoch++
	// The requests booked after the scrape are not in it: those still
	// before their first token count as waiting.
	s.recountSince(r, at)
}

// applySeeds moves every rank's warm-start seed (see the top of the file)
// and reports whether the slots the seeds hold changed.
func (s *Scheduler) applySeeds() bool {
	for _, w := range s.workers {
		for _, r := range w.ranks {
			s.seedRank(r)
		}
	}
	before := s.seeded
	s.recountSeeds()
	return s.seeded != before
}

// seedRank moves r's seed.
//
// The first fresh report sets it: the engine's load beyond the bookings it
// had surely seen when it was read (past their first token by then) and
// still in flight. One still in transit must not lower the seed, which may
// therefore start a little high while requests are in prefill, never low.
//
// Later, the seed only goes down, to the report before the last one beyond
// the bookings past their first token when it was read and still in
// flight. The last report is not used yet: a request the engine finished
// just before it was read may not have been released here, and counting
// it as booked would take it for an old request's end and free its slot
// twice. A report interval later its release has arrived.
func (s *Scheduler) seedRank(r *rankState) {
	e := &r.eng
	if e.seedState == seedDone {
		return
	}
	if !s.cfg.Engine.WarmStart || (e.known && !s.fresh(r)) {
		e.seed, e.seedBlocks, e.seedState = 0, 0, seedDone
		return
	}
	if !e.known {
		return
	}
	reported := uint64(e.running) + uint64(e.waiting)
	if e.seedState == seedPending {
		e.seed, e.seedState = beyond(reported, uint64(e.stillSure())), seedActive
	} else if e.prevKnown {
		e.seed = min(e.seed, beyond(e.prevLoad, uint64(e.prevSure)))
	}
	// The seed's share of the reported KV blocks, at least one per request.
	used := uint64(e.kv * float64(e.kvBlocks))
	e.seedBlocks = uint64(e.seed)
	if reported > 0 && used > 0 {
		e.seedBlocks = max(e.seedBlocks, used*uint64(e.seed)/reported)
	}
	if e.seed == 0 {
		e.seedBlocks, e.seedState = 0, seedDone
	}
}

// stillSure is the number of requests past their first token when the
// last report was read that are still in flight.
func (e *engineState) stillSure() uint32 { return e.lastSure - min(e.lastGone, e.lastSure) }

// beyond is a reported load beyond the requests booked, 0 if none.
func beyond(reported, booked uint64) uint32 {
	if reported <= booked {
		return 0
	}
	return uint32(min(reported-booked, math.MaxUint32))
}

// noteEnd counts e, about to be unbooked, among the requests its rank's
// last report saw past their first token, if it was one of them.
func (s *Scheduler) noteEnd(e *entry) {
	eng := &e.rank.eng
	if eng.known && e.flags&flagPrefilling == 0 && e.first <= eng.at {
		eng.lastGone++
	}
}

// applyEngineCapacity sets the slot count of every worker without an
// operator-given max_running_requests from its ranks' reports, and reports
// whether any changed.
func (s *Scheduler) applyEngineCapacity() bool {
	changed := false
	for _, w := range s.workers {
		if w.slotsGiven {
			continue
		}
		var sum uint64
		for _, r := range w.ranks {
			if !r.eng.known || r.eng.maxRunning == 0 {
				sum = 0
				break
			}
			sum += uint64(r.eng.maxRunning)
		}
		if sum == 0 {
			continue
		}
		slots := uint32(min(sum, maxCapacity))
		if slots != w.slots {
			w.slots, changed = slots, true
		}
	}
	return changed
}

// startWarm begins a warm start: every rank waits for its first fresh
// report again, and with WarmWait the slot gate holds until the first
// report round or until WarmWait has passed.
func (s *Scheduler) startWarm(t instant) {
	if !s.engineOn() || !s.cfg.Engine.WarmStart {
		return
	}
	for _, r := range s.ranks {
		r.eng.seed, r.eng.seedBlocks, r.eng.seedState = 0, 0, seedPending
	}
	s.recountSeeds()
	if s.cfg.Engine.WarmWait > 0 && s.prio {
		s.warming, s.warmUntil = true, addSat(t, s.cfg.Engine.WarmWait)
	}
}

// allSeeded reports whether every rank of the current workers has left
// the pending warm-start state (it reported, or its report was stale).
func (s *Scheduler) allSeeded() bool {
	for _, w := range s.workers {
		for _, r := range w.ranks {
			if r.eng.seedState == seedPending {
				return false
			}
		}
	}
	return true
}

// endWarmIfDue ends the warm start's hold once WarmWait has passed and
// reports whether it did; the caller runs a pass, then judgeWarm.
func (s *Scheduler) endWarmIfDue(t instant) bool {
	if !s.warming || t < s.warmUntil {
		return false
	}
	s.warming = false
	s.recheckAll()
	return true
}
