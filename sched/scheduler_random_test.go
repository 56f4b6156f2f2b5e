package sched

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var simSeed = flag.Uint64("sched.seed", 0, "run the random scheduler workloads with this seed only")

// simSource yields the random driver's choices: a seeded generator for the
// workload tests, the fuzzer's bytes for FuzzScheduler.
type simSource interface {
	// intn returns a value in [0, n); n > 0.
	intn(n int) int
}

type simRand struct{ r *rand.Rand }

func (s simRand) intn(n int) int { return s.r.IntN(n) }

// simBytes reads choices from fuzz input; it yields zeros once exhausted.
type simBytes struct {
	b []byte
	i int
}

func (s *simBytes) intn(n int) int {
	if s.i >= len(s.b) {
		return 0
	}
	v := int(s.b[s.i])
	s.i++
	if n > 256 && s.i < len(s.b) {
		v = v<<8 | int(s.b[s.i])
		s.i++
	}
	return v % n
}

// simStatus is where the driver believes a request is.
type simStatus uint8

const (
	simPending simStatus = iota // inside the Submit call that created it
	simQueued
	simInFlight
	simEnded
)

// simDriver runs random operations against a Scheduler, keeps its own model
// of every request's status, and checks after every step that each action is
// legal for that status, that both views agree, and the internal invariants.
type simDriver struct {
	s      *Scheduler
	src    simSource
	now    time.Time
	nextID uint64
	status map[uint64]simStatus
	ends   map[uint64]int // terminal outcomes per request (must end at 1)
	live   []uint64       // queued or in-flight IDs, for random picks
	victim []uint64       // preempted requests the driver must end
	// preemptible holds the dispatches marked Preemptible.
	preemptible map[uint64]bool
	pool        []Worker
	// allowance is how far in-flight may exceed capacity after a shrink.
	allowance uint32
	drained   bool
	// For failover: the configuration, the current worker set, each
	// request as submitted (with its arrival) and each dispatch's booking.
	cfg     Config
	cur     []Worker
	reqs    map[uint64]Request
	booking map[uint64]Booking
}

// newSimDriver builds a random configuration and worker set from src, which
// then drives the operations.
func newSimDriver(src simSource) (*simDriver, error) {
	d := &simDriver{src: src, now: simT0, status: map[uint64]simStatus{}, ends: map[uint64]int{}, preemptible: map[uint64]bool{},
		reqs: map[uint64]Request{}, booking: map[uint64]Booking{}}
	for i := range 5 {
		w := Worker{
			ID:                 fmt.Sprintf("w%d", i),
			DPSize:             uint32(src.intn(3)),
			DPStart:            uint32(src.intn(3)),
			MaxRunningRequests: uint32(src.intn(6)),
			MaxBatchedTokens:   uint64(src.intn(3) * 4096),
			Model:              []string{"", "", "m1", "m2"}[src.intn(4)],
			Role:               Role(src.intn(int(NumRoles))),
		}
		if src.intn(3) == 0 {
			w.Taints = []string{"a"}
		}
		d.pool = append(d.pool, w)
	}
	cfg := Config{
		Start:            simT0,
		Rand:             rand.New(rand.NewPCG(uint64(src.intn(1000)), 1)),
		FallbackCapacity: uint32(src.intn(8)),
		BlockSize:        uint64(src.intn(3) * 8),
	}
	if src.intn(2) == 0 {
		cfg.Selection = &SelectionConfig{PrefillLoadScale: 1, OverlapCredit: 1, Temperature: float64(src.intn(3)) / 2}
	}
	cfg.Policy = simRandomPolicy(src)
	if src.intn(3) > 0 {
		cfg.Priority = DefaultPriorityConfig()
		for p := range cfg.Priority.Classes {
			c := &cfg.Priority.Classes[p]
			c.ReservedFloor = uint16(src.intn(3))
			c.ReservedPerSlot = float64(src.intn(3)) / 10
			c.QueueSize = uint32(src.intn(12))
			c.QueueTimeout = time.Duration(1+src.intn(30)) * time.Second
			c.StarvationThreshold = time.Duration(1+src.intn(20)) * time.Second
			c.CanPreempt = src.intn(2) == 0
		}
	}
	if src.intn(2) == 0 {
		cfg.Engine = EngineConfig{
			MaxAge: time.Duration(1+src.intn(3)) * time.Second, Saturation: src.intn(3) > 0,
			WaitingThreshold: uint32(src.intn(4)), KVThreshold: float64(src.intn(3)) / 2,
			WarmStart: src.intn(2) == 0, WarmWait: time.Duration(src.intn(3)) * time.Second, Capacity: src.intn(2) == 0,
		}
	}
	if src.intn(3) == 0 {
		cfg.Fairness = FairnessConfig{Enabled: true, MaxFlows: src.intn(4), Weights: map[string]uint32{"t1": 3}}
	}
	if src.intn(3) == 0 {
		cfg.Admission = AdmissionConfig{
			Capacity: uint32(src.intn(4)), RatePerSecond: uint32(src.intn(3)),
			QueueSize: uint32(src.intn(4)), QueueTimeout: time.Duration(1+src.intn(10)) * time.Second,
		}
	}
	if src.intn(3) == 0 {
		cfg.TenantBudgets = &TenantBudgets{
			Default: BudgetPolicy{TokensPerMinute: uint32(1 + src.intn(20000)), RequestsPerMinute: uint32(1 + src.intn(60))},
			Tenants: map[string]BudgetPolicy{"t1": {TokensPerMinute: 5000, RequestsPerMinute: 30, Rules: []ModelRule{
				{ID: "r", Prefix: true, Value: "m", TokensPerMinute: uint32(1 + src.intn(5000)), RequestsPerMinute: 10},
			}}},
		}
		cfg.MaxBudgetScopes = src.intn(4)
	}
	workers := d.randomWorkers()
	s, err := New(cfg, workers)
	if err != nil { // reservations too large for this set: drop them
		for p := range cfg.Priority.Classes {
			cfg.Priority.Classes[p].ReservedFloor, cfg.Priority.Classes[p].ReservedPerSlot = 0, 0
		}
		if s, err = New(cfg, workers); err != nil {
			return nil, err
		}
	}
	d.s, d.cfg, d.cur = s, cfg, workers
	return d, nil
}

// simRandomPolicy returns a root profile (two families, two buckets, an
// explicit class, random thresholds and limits), a model profile for m2,
// and a synthetic fallback.
func simRandomPolicy(src simSource) PolicyConfig {
	class := func(name, family, bucket string) ClassSpec {
		c := ClassSpec{Name: name, Family: family, Bucket: bucket, Quantum: uint64(1 + src.intn(1024)), QueuePolicy: QueuePolicy(src.intn(2))}
		switch src.intn(4) {
		case 0:
			c.BusyThreshold = simU64(uint64(src.intn(2048)))
		case 1:
			c.BusyThresholdFrac = simF64(float64(src.intn(4)) / 8)
		case 2:
			c.BusyThreshold, c.BusyThresholdFrac = simU64(uint64(src.intn(2048))), simF64(0.25)
			c.BusyWorkerRatio = float64(1+src.intn(4)) / 4
		}
		if src.intn(3) == 0 {
			c.RequestLimitPerWorker = simU64(uint64(src.intn(6)))
		}
		if src.intn(4) == 0 {
			c.RawISLLimitPerWorker = simU64(uint64(src.intn(8000)))
		}
		if src.intn(4) == 0 {
			c.CachedTokenLimitPerWorker = simU64(uint64(src.intn(4000)))
		}
		return c
	}
	root := &Profile{
		Classes: []ClassSpec{
			class("s_c", "std", "c"), class("s_u", "std", "u"),
			class("l_c", "lat", "c"), class("l_u", "lat", "u"), class("x", "", ""),
		},
		Buckets:       []Bucket{{0, "c"}, {1024, "u"}},
		DefaultFamily: "std",
		Matrix:        map[string][]int{"std": {0, 1}, "lat": {2, 3}},
		Explicit:      map[string]int{"x": 4},
	}
	m2 := &Profile{Classes: []ClassSpec{class("only", "f", "all")}, Buckets: []Bucket{{0, "all"}}, DefaultFamily: "f", Matrix: map[string][]int{"f": {0}}}
	flat := func(name string) ClassSpec {
		c := class(name, "", "")
		c.QueuePolicy = []QueuePolicy{EDF, EDF, FCFS, WSPT}[src.intn(4)]
		c.BusyWorkerRatio = 0
		c.SLO = time.Duration(1+src.intn(10)) * time.Second
		return c
	}
	m3 := &Profile{Flat: true, Classes: []ClassSpec{flat("fast"), flat("slow")}, Explicit: map[string]int{"fast": 0, "slow": 1}, DefaultClass: src.intn(2)}
	var frac *float64
	if src.intn(2) == 0 {
		frac = simF64(0.1)
	}
	return PolicyConfig{Root: root, Models: map[string]*Profile{"m2": m2, "m3": m3}, Fallback: SyntheticProfile(frac, WSPT)}
}

// randomWorkers picks a random subset of the pool.
func (d *simDriver) randomWorkers() []Worker {
	var ws []Worker
	for _, w := range d.pool {
		if d.src.intn(4) > 0 {
			ws = append(ws, w)
		}
	}
	return ws
}

// step runs one random operation and checks the result.
func (d *simDriver) step() error {
	src := d.src
	switch op := src.intn(100); {
	case op < 40:
		return d.submit()
	case op < 55:
		if id, ok := d.pick(simInFlight); ok {
			d.firstToken(id)
			return d.apply(d.s.FirstToken(d.now, id), 0)
		}
	case op < 70:
		if id, ok := d.pick(simInFlight); ok {
			return d.end(id, d.s.Release(d.now, id))
		}
	case op < 78:
		id := uint64(src.intn(int(d.nextID) + 2))
		if d.status[id] == simQueued || d.status[id] == simInFlight {
			return d.end(id, d.s.Release(d.now, id))
		}
		return d.apply(d.s.Release(d.now, id), 0)
	case op < 90:
		d.now = d.now.Add(time.Duration(src.intn(3000)) * time.Millisecond)
		if err := d.apply(d.s.Tick(d.now), 0); err != nil {
			return err
		}
		if next, ok := d.s.NextDeadline(); ok && !next.After(d.now) {
			return fmt.Errorf("deadline %v not after the tick at %v", next.Sub(simT0), d.now.Sub(simT0))
		}
	case op < 93:
		return d.report()
	case op < 95:
		if n := len(d.victim); n > 0 {
			id := d.victim[0]
			d.victim = d.victim[1:]
			if d.status[id] == simInFlight {
				return d.end(id, d.s.Release(d.now, id))
			}
		}
	case op < 98:
		d.cur = d.randomWorkers()
		acts := d.s.SetWorkers(d.now, d.cur)
		if over := d.s.inFlightTotal; over > d.s.capacity {
			d.allowance = over - d.s.capacity
		}
		return d.apply(acts, 0)
	case op < 99:
		if src.intn(2) == 0 {
			d.s.Route([]string{"m1", "m2", "ghost"}[src.intn(3)])
			break
		}
		if id, ok := d.pick(simInFlight); ok {
			return d.apply(d.s.Usage(d.now, id, uint64(src.intn(3000)), uint64(src.intn(3000))), 0)
		}
	default:
		switch {
		case src.intn(6) == 0:
			return d.failover()
		case !d.drained && src.intn(20) == 0:
			d.drained = true
			return d.apply(d.s.Drain(d.now), 0)
		case d.drained && src.intn(4) == 0:
			// Leadership comes back: a new warm start.
			d.drained = false
			d.s.Resume()
		}
	}
	return nil
}

// firstToken records that in-flight id produced its first token.
func (d *simDriver) firstToken(id uint64) {
	b := d.booking[id]
	b.FirstToken = true
	d.booking[id] = b
}

// failover replaces the scheduler with a fresh one over the current worker
// set and re-registers every live request, as the fronts do after a change
// of scheduler: in-flight ones through Adopt (one whose worker left the
// set is no longer tracked), queued ones through Submit with Resumed and
// their original arrival, in ID order.
func (d *simDriver) failover() error {
	s, err := New(d.cfg, d.cur)
	if err != nil {
		return nil //nolint:nilerr // reservations over this set's capacity: no failover now
	}
	d.s, d.drained = s, false
	ids := make([]uint64, 0, len(d.status))
	for id, st := range d.status {
		if st == simQueued || st == simInFlight {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		r := d.reqs[id]
		if d.status[id] == simInFlight {
			acts := s.Adopt(d.now, r, d.booking[id])
			if s.entries[id] == nil {
				d.status[id] = simEnded
				d.ends[id]++
			} else if e := s.entries[id]; e.rank.key.worker != d.booking[id].Worker || (e.flags&flagFirstToken != 0) != d.booking[id].FirstToken {
				return fmt.Errorf("adopted %d on %s (first token %v), booked %+v", id, e.rank.key.worker, e.flags&flagFirstToken != 0, d.booking[id])
			}
			if over := s.inFlightTotal; over > s.capacity {
				d.allowance = max(d.allowance, over-s.capacity)
			}
			if err := d.follow(acts, 0); err != nil {
				return fmt.Errorf("adopt %d: %w", id, err)
			}
			continue
		}
		r.Resumed = true
		d.status[id] = simPending
		if err := d.follow(s.Submit(d.now, r), id); err != nil {
			return fmt.Errorf("resume %d: %w", id, err)
		}
		if d.status[id] == simPending {
			return fmt.Errorf("resumed %d neither dispatched, rejected nor queued", id)
		}
	}
	return d.check()
}

// report sends engine reports for a random subset of the pool's ranks,
// read up to a second ago.
func (d *simDriver) report() error {
	src := d.src
	var loads []EngineLoad
	for _, w := range d.pool {
		for r := range max(w.DPSize, 1) {
			if src.intn(2) == 0 {
				continue
			}
			loads = append(loads, EngineLoad{
				Worker: w.ID, Rank: w.DPStart + r, At: d.now.Add(-time.Duration(src.intn(1000)) * time.Millisecond),
				Waiting: d.reported(), Running: d.reported(), KVUsage: float64(src.intn(5)) / 4,
				KVBlocks: uint64(src.intn(3) * 100), MaxRunning: uint32(src.intn(6)),
			})
		}
	}
	acts := d.s.ReportLoad(d.now, loads)
	if over := d.s.inFlightTotal; over > d.s.capacity {
		d.allowance = max(d.allowance, over-d.s.capacity)
	}
	return d.apply(acts, 0)
}

// reported is a random request count an engine reports: mostly small,
// sometimes far past any worker's slots (a lying or overfull engine).
func (d *simDriver) reported() uint32 {
	switch d.src.intn(16) {
	case 0:
		return 1e9
	case 1:
		return math.MaxUint32
	default:
		return uint32(d.src.intn(8))
	}
}

// submit sends one random request.
func (d *simDriver) submit() error {
	src := d.src
	d.nextID++
	id := d.nextID
	r := Request{
		ID:           id,
		Model:        []string{"m1", "m1", "m2", "m3", "ghost"}[src.intn(5)],
		Class:        []string{"", "std", "lat", "x", "s_u", "nope", "fast", "slow"}[src.intn(8)],
		Tenant:       []string{"t1", "t2", "t3", "t4"}[src.intn(4)],
		Priority:     Priority(src.intn(5)), // 4 is out of range on purpose
		PriorityJump: float64(src.intn(5) - 1),
		ISL:          uint64(src.intn(3000)),
	}
	if src.intn(5) == 0 {
		r.StrictPriority, r.HasStrictPriority = uint32(src.intn(4)), true
	}
	for range src.intn(3) {
		r.Cached = append(r.Cached, CachedTokens{Worker: fmt.Sprintf("w%d", src.intn(6)), Tokens: uint64(src.intn(3500))})
	}
	if src.intn(6) == 0 {
		r.RequiredTaints = []string{"a"}
	}
	if src.intn(5) == 0 {
		r.Pin = &Pin{Worker: fmt.Sprintf("w%d", src.intn(6)), Rank: uint32(src.intn(5)), HasRank: src.intn(3) > 0}
	}
	r.FairnessKey = []string{"", "t1", "t2", "t3", "t4"}[src.intn(5)]
	if src.intn(4) == 0 {
		r.Arrival = d.now.Add(-time.Duration(src.intn(12000)) * time.Millisecond)
	}
	if r.Arrival.IsZero() {
		r.Arrival = d.now
	}
	d.reqs[id] = r
	d.status[id] = simPending
	warming, waiting, capacity := d.s.warming, d.s.wait, d.s.capacity
	acts := d.s.Submit(d.now, r)
	if n := len(acts); n > 0 && acts[n-1].Kind == ActionQueue && acts[n-1].Model != r.Model {
		return fmt.Errorf("queue action %+v for model %q", acts[n-1], r.Model)
	}
	if err := d.checkWarmArrival(warming, &waiting, capacity, acts, id); err != nil {
		return err
	}
	if err := d.apply(acts, id); err != nil {
		return err
	}
	if d.status[id] == simPending {
		return fmt.Errorf("arrival %d neither dispatched, rejected nor reported queued: %v", id, simRender(acts))
	}
	return nil
}

// checkWarmArrival checks that an arrival while the warm start held the
// slot gate was refused by a queue limit only past the hold's bound:
// its class's queue_size plus the capacity.
func (d *simDriver) checkWarmArrival(warming bool, waiting *[NumPriorities]waitList, capacity uint32, acts []Action, id uint64) error {
	if !warming {
		return nil
	}
	for _, a := range acts {
		if a.ID != id || a.Kind != ActionReject {
			continue
		}
		bound := uint64(d.s.cfg.Priority.Classes[a.Priority].QueueSize) + uint64(capacity)
		switch {
		case a.Outcome == OutcomeClassLimit:
			return fmt.Errorf("arrival %d refused by a class limit during the warm start", id)
		case a.Outcome == OutcomeQueueFull && uint64(waiting[a.Priority].n) < bound:
			return fmt.Errorf("arrival %d refused with %d of %d waiting during the warm start", id, waiting[a.Priority].n, bound)
		}
	}
	return nil
}

// end records the end of a live request by Release, then applies the
// actions that followed.
func (d *simDriver) end(id uint64, acts []Action) error {
	if d.status[id] == simQueued {
		// A queued request's release is reported first, with its wait.
		if len(acts) == 0 || acts[0].ID != id || acts[0].Kind != ActionReject || acts[0].Outcome != OutcomeClientCancelled || !acts[0].Queued {
			return fmt.Errorf("release of queued %d: actions %v", id, acts)
		}
		acts = acts[1:]
	}
	d.status[id] = simEnded
	d.ends[id]++
	return d.apply(acts, 0)
}

// pick returns a random live request with status want.
func (d *simDriver) pick(want simStatus) (uint64, bool) {
	for range 4 {
		if len(d.live) == 0 {
			return 0, false
		}
		i := d.src.intn(len(d.live))
		id := d.live[i]
		switch d.status[id] {
		case want:
			return id, true
		case simEnded:
			d.live[i] = d.live[len(d.live)-1]
			d.live = d.live[:len(d.live)-1]
		case simPending, simQueued, simInFlight: // another status: try again
		}
	}
	return 0, false
}

// apply checks acts against the driver's model and updates it, then runs
// check; submitted is the ID of the arrival, or 0.
func (d *simDriver) apply(acts []Action, submitted uint64) error {
	if err := d.follow(acts, submitted); err != nil {
		return err
	}
	return d.check()
}

// follow is apply without the final check.
func (d *simDriver) follow(acts []Action, submitted uint64) error {
	for i, a := range acts {
		st, known := d.status[a.ID]
		arriving := a.ID == submitted && st == simPending
		switch a.Kind {
		case ActionDispatch:
			if !arriving && st != simQueued {
				return fmt.Errorf("dispatch of %d in status %d", a.ID, st)
			}
			if !a.Queued && !arriving { // an arrival may queue and leave in its own pass
				return fmt.Errorf("dispatch of queued %d without Queued", a.ID)
			}
			d.status[a.ID] = simInFlight
			d.booking[a.ID] = Booking{Worker: a.Worker, Rank: a.Rank, Prefill: a.Prefill}
			if a.Preemptible {
				d.preemptible[a.ID] = true
			}
			if arriving {
				d.live = append(d.live, a.ID)
			}
		case ActionReject:
			if !known || (!arriving && st != simQueued) {
				return fmt.Errorf("reject of %d in status %d", a.ID, st)
			}
			d.status[a.ID] = simEnded
			d.ends[a.ID]++
		case ActionPreempt:
			if st != simInFlight {
				return fmt.Errorf("preemption of %d in status %d", a.ID, st)
			}
			if a.By <= a.Priority {
				return fmt.Errorf("preemption of a %s request by %s", a.Priority, a.By)
			}
			if !d.preemptible[a.ID] {
				return fmt.Errorf("preemption of %d, whose dispatch was not marked preemptible", a.ID)
			}
			d.victim = append(d.victim, a.ID)
		case ActionQueue:
			if !arriving || i != len(acts)-1 {
				return fmt.Errorf("queue action for %d (status %d) at %d of %v", a.ID, st, i, simRender(acts))
			}
			d.status[a.ID] = simQueued
			d.live = append(d.live, a.ID)
		default:
			return fmt.Errorf("action kind %d", a.Kind)
		}
	}
	return nil
}

// check compares the driver's model with the scheduler and runs the
// internal invariants.
func (d *simDriver) check() error {
	s := d.s
	for id, st := range d.status {
		e := s.entries[id]
		switch {
		case st == simQueued && (e == nil || (e.state != stateQueued && e.state != stateParked)),
			st == simInFlight && (e == nil || e.state != stateInFlight),
			st == simEnded && e != nil:
			return fmt.Errorf("request %d: driver status %d, scheduler entry %v", id, st, e != nil)
		}
		if st == simEnded && d.ends[id] != 1 {
			return fmt.Errorf("request %d ended %d times", id, d.ends[id])
		}
	}
	if len(s.entries) > len(d.status) {
		return fmt.Errorf("%d entries for %d requests", len(s.entries), len(d.status))
	}
	if over := s.inFlightTotal; s.prio && over > s.capacity {
		if over-s.capacity > d.allowance {
			return fmt.Errorf("in flight %d > capacity %d + allowance %d", over, s.capacity, d.allowance)
		}
		d.allowance = over - s.capacity
	} else {
		d.allowance = 0
	}
	if err := simInvariants(s); err != nil {
		return err
	}
	// Every call leaves the scheduler settled: no queued entry that a pass
	// could dispatch. (Probing pops drops the DRR carry; the ring's own
	// tests cover carries.)
	if d.src.intn(2) == 0 {
		s.actions = s.actions[:0]
		s.pass(s.at(d.now))
		if len(s.actions) > 0 {
			return fmt.Errorf("unsettled: a pass after the call did %v", simRender(s.actions))
		}
	}
	return nil
}

// finish ends every request: victims and in-flight ones complete, queued
// ones get dispatched or time out; then everything must be back to zero.
func (d *simDriver) finish() error {
	for round := 0; ; round++ {
		if round > 1000 {
			return errors.New("requests never drain")
		}
		progressed := false
		for id, st := range d.status {
			if st == simInFlight {
				d.firstToken(id)
				if err := d.apply(d.s.FirstToken(d.now, id), 0); err != nil {
					return err
				}
				if err := d.end(id, d.s.Release(d.now, id)); err != nil {
					return err
				}
				progressed = true
			}
		}
		if progressed {
			continue
		}
		if d.s.queuedTotal == 0 && d.s.adm.parked.n == 0 {
			break
		}
		d.now = d.now.Add(time.Hour)
		if err := d.apply(d.s.Tick(d.now), 0); err != nil {
			return err
		}
		if round > 10 { // no timeouts (priority scheduler off) and stuck
			if err := d.apply(d.s.Drain(d.now), 0); err != nil {
				return err
			}
		}
	}
	s := d.s
	for id, st := range d.status {
		if st != simEnded {
			return fmt.Errorf("request %d left in status %d", id, st)
		}
	}
	switch {
	case len(s.entries) != 0, s.queuedTotal != 0, s.inFlightTotal != 0, len(s.active) != 0:
		return fmt.Errorf("left over: %d entries, %d queued, %d in flight, %d active queues", len(s.entries), s.queuedTotal, s.inFlightTotal, len(s.active))
	}
	for k, r := range s.ranks {
		if r.prefill != 0 || r.blocks != 0 || r.requests != 0 || r.removed || r.eng.prefilling != 0 {
			return fmt.Errorf("rank %v left with %+v", k, *r)
		}
	}
	return nil
}

// simInvariants checks the scheduler's internal consistency.
func simInvariants(s *Scheduler) error {
	var inFlight, queued [NumPriorities]uint32
	type load struct {
		prefill, blocks uint64
		requests        uint32
	}
	loads := map[*rankState]*load{}
	type classKey struct {
		mq *modelQueue
		c  int
	}
	type classSum struct {
		n, isl, cached uint64
		byPrio         [NumPriorities]uint32
	}
	sums := map[classKey]*classSum{}
	preemptible, unservable, parked, tokens, deadlines := 0, 0, uint32(0), uint32(0), 0
	for id, e := range s.entries {
		if e.flags&flagToken != 0 {
			tokens++
		}
		if e.dpos >= 0 {
			deadlines++
			if e.state != stateQueued || e.spec().SLO == 0 || s.deadlines[e.dpos] != (*deadlineItem)(e) {
				return fmt.Errorf("entry %d in the deadline heap in state %d", id, e.state)
			}
			if s.now > e.deadline {
				return fmt.Errorf("entry %d queued past its deadline %v at %v", id, e.deadline, s.now)
			}
		} else if e.state == stateQueued && e.spec().SLO > 0 {
			return fmt.Errorf("queued entry %d of an SLO class not in the deadline heap", id)
		}
		if e.id != id {
			return fmt.Errorf("entry %d filed under %d", e.id, id)
		}
		if p := e.peer; p != nil && (p.peer != e || p.state == e.state) {
			return fmt.Errorf("entry %d: broken preemption link", id)
		}
		if e.flags&flagPreemptible != 0 {
			preemptible++
		}
		if e.flags&flagWarm != 0 && (!s.warming || e.state != stateQueued) {
			return fmt.Errorf("entry %d flagged as a warm-start arrival in state %d, warming %v", id, e.state, s.warming)
		}
		switch e.state {
		case stateQueued:
			queued[e.prio]++
			if want := !e.lane.exact() && !s.anyEligible(e.need()); want != (e.flags&flagUnservable != 0) {
				return fmt.Errorf("queued entry %d: unservable flag %v, want %v", id, !want, want)
			} else if want {
				unservable++
			}
			if e.lane.exact() && (e.rank == nil || e.rank.key != e.lane || e.rank.removed) {
				return fmt.Errorf("queued entry %d: pinned rank does not match lane %v", id, e.lane)
			}
			k := classKey{e.mq, e.class}
			if sums[k] == nil {
				sums[k] = &classSum{}
			}
			sm := sums[k]
			sm.n++
			sm.isl += e.isl
			sm.cached += e.cached
			sm.byPrio[e.prio]++
		case stateInFlight:
			inFlight[e.prio]++
			if e.rank == nil || s.ranks[e.rank.key] != e.rank {
				return fmt.Errorf("in-flight entry %d: rank not in the book", id)
			}
			if e.flags&flagFirstToken != 0 && e.prefill != 0 {
				return fmt.Errorf("entry %d: prefill booked past its first token", id)
			}
			l := loads[e.rank]
			if l == nil {
				l = &load{}
				loads[e.rank] = l
			}
			if p := e.prank; p != nil {
				if p.w.role == RoleDecode || p.w == e.rank.w {
					return fmt.Errorf("entry %d: prefill half on %v (role %s), decode on %v", id, p.key, p.w.role, e.rank.key)
				}
				if loads[p] == nil {
					loads[p] = &load{}
				}
				loads[p].prefill += e.prefill
			} else {
				l.prefill += e.prefill
			}
			if e.rank.w.role == RolePrefill {
				return fmt.Errorf("entry %d booked on prefill-role worker %v", id, e.rank.key)
			}
			l.blocks += s.blocksOf(e.isl)
			l.requests++
		case stateParked:
			parked++
			if e.park == nil || e.mq != nil || e.flags&flagToken != 0 {
				return fmt.Errorf("parked entry %d: request %v, queue %v, flags %b", id, e.park != nil, e.mq != nil, e.flags)
			}
		case stateNone:
			fallthrough
		default:
			return fmt.Errorf("entry %d in state %d", id, e.state)
		}
	}
	if err := admissionInvariants(s, parked, tokens); err != nil {
		return err
	}
	if deadlines != len(s.deadlines) {
		return fmt.Errorf("%d entries with a deadline, heap of %d", deadlines, len(s.deadlines))
	}
	if unservable != s.unservable {
		return fmt.Errorf("%d queued entries without an eligible worker, counter %d", unservable, s.unservable)
	}
	var total uint32
	for p := range inFlight {
		total += inFlight[p]
	}
	if inFlight != s.inFlight || total != s.inFlightTotal {
		return fmt.Errorf("in flight %v (%d), counters %v (%d)", inFlight, total, s.inFlight, s.inFlightTotal)
	}
	count := 0
	for p := range s.wait {
		w := &s.wait[p]
		n, seenPromo := uint32(0), false
		for e := w.head; e != nil; e = e.next {
			n++
			if e.state != stateQueued || e.prio != Priority(p) {
				return fmt.Errorf("wait list %d holds %d (state %d, %s)", p, e.id, e.state, e.prio)
			}
			if e == w.promo {
				seenPromo = true
			}
			if e.promoted == seenPromo {
				return fmt.Errorf("wait list %d: promotion cursor out of place at %d", p, e.id)
			}
		}
		if n != w.n || n != queued[p] || (w.promo != nil && !seenPromo) {
			return fmt.Errorf("wait list %d: %d linked, %d counted, %d queued", p, n, w.n, queued[p])
		}
		for e := s.preemptible[p].head; e != nil; e = e.next {
			count++
			if e.state != stateInFlight || e.prio != Priority(p) || e.flags&(flagFirstToken|flagVictim) != 0 || e.flags&flagPreemptible == 0 {
				return fmt.Errorf("preemptible list %d holds %d (flags %b)", p, e.id, e.flags)
			}
		}
	}
	if count != preemptible {
		return fmt.Errorf("%d preemptible listed, %d flagged", count, preemptible)
	}
	if int(queued[0]+queued[1]+queued[2]+queued[3]) != s.queuedTotal {
		return fmt.Errorf("queued %v, total %d", queued, s.queuedTotal)
	}
	for _, mq := range s.order {
		n := 0
		for c := range mq.profile.Classes {
			sm := sums[classKey{mq, c}]
			if sm == nil {
				sm = &classSum{}
			}
			reqs, isl, cached := mq.ring.classStats(c)
			if reqs != sm.n || isl != sm.isl || cached != sm.cached || mq.queued[c] != sm.byPrio || mq.ring.classLen(c) != int(sm.n) {
				return fmt.Errorf("queue %s/%d: ring %d/%d/%d counts %v, entries %+v", mq.name, c, reqs, isl, cached, mq.queued[c], *sm)
			}
			if sm.n == 0 && mq.ring.deficit(c) != 0 {
				return fmt.Errorf("queue %s/%d: empty class with deficit %d", mq.name, c, mq.ring.deficit(c))
			}
			n += int(sm.n)
		}
		active := mq.active >= 0 && mq.active < len(s.active) && s.active[mq.active] == mq
		if err := ringInvariants(mq.ring); err != nil {
			return fmt.Errorf("queue %s: %w", mq.name, err)
		}
		if mq.ring.len() != n || active != (n > 0) {
			return fmt.Errorf("queue %s: ring len %d, entries %d, active %v", mq.name, mq.ring.len(), n, active)
		}
	}
	for k, r := range s.ranks {
		l := loads[r]
		if l == nil {
			l = &load{}
		}
		if r.key != k || r.prefill != l.prefill || r.blocks != l.blocks || r.requests != l.requests {
			return fmt.Errorf("rank %v: book %d/%d/%d, entries %+v", k, r.prefill, r.blocks, r.requests, *l)
		}
		if r.removed && r.requests == 0 {
			return fmt.Errorf("removed rank %v kept without requests", k)
		}
	}
	if err := seedInvariants(s); err != nil {
		return err
	}
	if s.prio {
		var sum uint64
		for _, r := range s.reserved {
			sum += uint64(r)
		}
		if sum > uint64(s.capacity) {
			return fmt.Errorf("reservations %v exceed capacity %d", s.reserved, s.capacity)
		}
	}
	return nil
}

// seedInvariants checks that the slots the warm-start seeds hold are the
// sum over the current workers of their ranks' seeds, each worker's at
// most its own slots.
func seedInvariants(s *Scheduler) error {
	var held uint64
	for _, w := range s.workers {
		if w.role == RolePrefill {
			continue
		}
		var seed uint64
		for _, r := range w.ranks {
			seed += uint64(r.eng.seed)
		}
		held += min(seed, uint64(min(w.slots, maxCapacity)))
	}
	if held != s.seeded {
		return fmt.Errorf("seeds hold %d slots, want %d (each destination worker's at most its own)", s.seeded, held)
	}
	return nil
}

// simRun runs steps random operations from src, then finishes.
func simRun(src simSource, steps int) (err error) {
	d, err := newSimDriver(src)
	if err != nil {
		return err
	}
	for i := range steps {
		if err := d.step(); err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
	}
	if err := d.finish(); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	return nil
}

func TestScheduler_RandomWorkloads(t *testing.T) {
	seeds := make([]uint64, 0, 60)
	if *simSeed != 0 {
		seeds = append(seeds, *simSeed)
	} else {
		for i := range uint64(60) {
			seeds = append(seeds, 0x5eed+i)
		}
	}
	for _, seed := range seeds {
		if err := simRun(simRand{rand.New(rand.NewPCG(seed, seed^0xabcdef))}, 600); err != nil {
			t.Fatalf("seed %d (rerun with -sched.seed=%d): %v", seed, seed, err)
		}
	}
}

func FuzzScheduler(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("tollgate"))
	f.Add([]byte{2, 1, 0, 3, 1, 1, 2, 0, 0, 0, 1, 9, 9, 9, 200, 10, 30, 50, 70, 90, 99, 0, 255, 128})
	seed := make([]byte, 512)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range seed {
		seed[i] = byte(r.IntN(256))
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		// The first 8 bytes seed the configuration; the rest are operations.
		var seed [8]byte
		n := copy(seed[:], data)
		d, err := newSimDriver(simRand{rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:]), 0))})
		if err != nil {
			t.Fatalf("config: %v", err)
		}
		src := &simBytes{b: data[n:]}
		d.src = src
		for i := 0; i < 300 && src.i < len(src.b); i++ {
			if err := d.step(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		if err := d.finish(); err != nil {
			t.Fatalf("finish: %v", err)
		}
	})
}

// admissionInvariants checks SMG's bucket: waiters are linked in order and
// none could take a token, tokens held are counted, and a legacy bucket
// without refill holds exactly the tokens nobody holds.
func admissionInvariants(s *Scheduler, parked, tokens uint32) error {
	a := &s.adm
	var n uint32
	for e := a.parked.head; e != nil; e = e.next {
		n++
		if e.state != stateParked || (e.next != nil && e.next.enq < e.enq) {
			return fmt.Errorf("admission queue holds %d in state %d out of order", e.id, e.state)
		}
	}
	b := a.bucket
	switch {
	case n != parked || n != a.parked.n:
		return fmt.Errorf("admission queue: %d linked, %d counted, %d parked", n, a.parked.n, parked)
	case tokens != a.holding || (!a.legacy && tokens != 0):
		return fmt.Errorf("%d entries hold a token, counter %d (legacy %v)", tokens, a.holding, a.legacy)
	case n > 0 && !s.draining && b.has(s.now, 1):
		return fmt.Errorf("%d waiters while the bucket holds %v", n, b.level)
	case b.level > b.capacity+bucketSlack:
		return fmt.Errorf("bucket level %v over capacity %v", b.level, b.capacity)
	case a.on && a.legacy && b.rate == 0 && math.Abs(b.level+float64(a.holding)-b.capacity) > 1e-6:
		return fmt.Errorf("bucket level %v + held %d != capacity %v", b.level, a.holding, b.capacity)
	}
	if bs := s.budgets; bs != nil && len(bs.scopes) > bs.max {
		return fmt.Errorf("%d budget scopes over the bound %d", len(bs.scopes), bs.max)
	}
	return nil
}
