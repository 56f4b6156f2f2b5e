package extproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/sched"
)

// scheduler is what the dispatcher needs from the scheduling core.
type scheduler interface {
	Submit(now time.Time, r sched.Request) []sched.Action
	Release(now time.Time, id uint64) []sched.Action
	FirstToken(now time.Time, id uint64) []sched.Action
	Tick(now time.Time) []sched.Action
	SetWorkers(now time.Time, workers []sched.Worker) []sched.Action
	ReportLoad(now time.Time, loads []sched.EngineLoad) []sched.Action
	Drain(now time.Time) []sched.Action
	Resume()
	NextDeadline() (time.Time, bool)
	RouteIn(model string, allowed []string) (worker string, rank uint32, ok bool)
	Served(now time.Time, id uint64, worker string, rank uint32) []sched.Action
	Adopt(now time.Time, r sched.Request, b sched.Booking) []sched.Action
	Usage(now time.Time, id uint64, promptTokens, completionTokens uint64) []sched.Action
	Stats() sched.Stats
}

var _ scheduler = (*sched.Scheduler)(nil)

// errStopped is returned to a stream that talks to a dispatcher whose Run
// has returned.
var errStopped = errors.New("extproc: dispatcher stopped")

// noticeKind is what the dispatcher tells a stream about its request.
type noticeKind uint8

const (
	// noticeQueued: the scheduler queued the request.
	noticeQueued noticeKind = iota + 1
	// noticeDecided: the scheduler dispatched or rejected the request.
	noticeDecided
	// noticePreempted: the request, in flight, was chosen as a victim.
	noticePreempted
)

// notice is one message from the dispatcher to a stream. A request gets
// each kind at most once, in the order above, so a box of noticeCap never
// fills and the dispatcher never waits on a stream. Notices are small: a
// held request keeps its box.
type notice struct {
	kind noticeKind
	// decision is set for noticeDecided.
	decision *decision
}

// decision is the scheduler's dispatch or reject of one request.
type decision struct {
	// action has its Fallbacks resolved into target (nil here).
	action sched.Action
	target fleet.Target
	// unknownModel marks a no-endpoints reject for a model no worker has
	// served since the start: it is answered 404 model_not_found.
	unknownModel bool
}

// noticeCap is the capacity of a stream's notice box: one of each kind.
const noticeCap = 3

// noticeBox receives one request's notices. put never blocks; it reports
// false when the box is full, which is a bug (see noticeCap).
type noticeBox interface {
	put(n notice) bool
}

// serving is the replica's serving state: its leadership, its shutdown
// and its worker set. The dispatcher owns it and publishes it as one
// snapshot for gRPC health, /readyz and the state metrics.
type serving struct {
	// standby: another replica leads; the scheduler answers every arrival
	// 503 with Retry-After.
	standby bool
	// draining: shutting down. Arrivals are served until Drain sheds the
	// queue, then answered 503 with Retry-After.
	draining bool
	// workers is the size of the worker set.
	workers int
	// acquisitions counts the changes from standby to leading.
	acquisitions uint64
}

// ready reports whether the replica should receive traffic: it leads, is
// not draining and has workers.
func (v serving) ready() bool { return !v.standby && !v.draining && v.workers > 0 }

type eventKind uint8

const (
	evSubmit eventKind = iota + 1
	evRelease
	evFirstToken
	evWorkers
	evActive
	evDrain
	evShed
	evStats
	evRoute
	evEngine
	evServed
	evUsage
	// evAdopt: a front re-registers an in-flight request (replica mode).
	evAdopt
	// evSynced: front has re-registered all it holds (replica mode).
	evSynced
)

// event is one message to the dispatcher.
type event struct {
	kind eventKind
	id   uint64
	// evSubmit.
	req sched.Request
	box noticeBox
	at  time.Time
	// evWorkers.
	workers *fleet.Set
	// evRoute.
	model string
	// evServed: the worker and rank that served request id.
	worker string
	rank   uint32
	// evUsage: the prompt and completion tokens the worker reported.
	prompt, completion uint64
	// evAdopt: where the request runs.
	booking sched.Booking
	// evSynced: the front; evActive (replica mode): the fronts whose
	// re-registration the new term waits for.
	front  string
	fronts []string
	// evSubmit and evRoute: the request's endpoint subset, nil for none.
	subset *subset
	// evEngine.
	loads []sched.EngineLoad
	// evActive.
	active bool
}

// reply is what an event answers: the snapshot for evStats (behind a
// pointer, so that every other reply stays small), the route for evRoute
// and whether there is one.
type reply struct {
	stats  *sched.Stats
	target fleet.Target
	ok     bool
}

// dispatcher owns the scheduler and the serving state behind one lock.
// Whoever has an event applies it under mu, on its own goroutine, with no
// hand-off: streams, the peer desk and the control calls alike. It answers
// through notice boxes, which never block, and return values. It does no
// per-request CPU work beyond the scheduler's own bookkeeping; the
// scheduler's deadlines fire on a timer that takes the same lock.
type dispatcher struct {
	// halted ends when run returns; from then on events are refused with
	// errStopped. run ends it under mu.
	halted context.Context
	halt   context.CancelFunc
	log    *slog.Logger
	hooks  dispatcherHooks
	// published is the last serving snapshot.
	published atomic.Pointer[serving]

	// mu guards the rest.
	mu sync.Mutex
	// timer calls tick at armed, the next deadline (zero: stopped); run
	// makes it, so nothing times out before run.
	timer   *time.Timer
	armed   time.Time
	sch     scheduler
	boxes   map[uint64]noticeBox
	workers *fleet.Set
	models  fleet.KnownModels
	state   serving
	// shed: Drain shed the queue; the scheduler stays drained.
	shed bool
	// cancels collects in-flight requests to undo after an impossible
	// dispatch (a worker missing from the set); see deliver.
	cancels []uint64
	// fresh, in replica mode, builds an empty scheduler over a worker
	// set; nil otherwise. loads is the engines' last report, replayed
	// into a fresh scheduler.
	fresh func([]sched.Worker) (scheduler, error)
	loads []sched.EngineLoad
	// settle is how long a new scheduler term holds submits while the
	// fronts re-register (replica mode); held are those submits, handed to
	// the scheduler in arrival order at settleUntil. In-flight adoptions
	// apply at once, so what is held meets the load already running.
	settle      time.Duration
	settleUntil time.Time
	held        []event
	// expect lists the fronts the settle window still waits for; it ends
	// early once none is left.
	expect map[string]bool
}

// dispatcherHooks are the dispatcher's observers; each may be nil. They
// run under the dispatcher's lock and must neither block nor call it.
type dispatcherHooks struct {
	// submitted observes the time from a stream's submit to the end of
	// the scheduler's Submit.
	submitted func(time.Duration)
	// waited observes each request leaving a queue (Action.Queued), with
	// the scheduler's own measure of its wait.
	waited func(*sched.Action)
	// serving is called with each new serving snapshot.
	serving func(serving)
}

func newDispatcher(sch scheduler, ws *fleet.Set, log *slog.Logger, hooks dispatcherHooks) *dispatcher {
	d := &dispatcher{
		log:     log,
		hooks:   hooks,
		sch:     sch,
		boxes:   make(map[uint64]noticeBox),
		workers: ws,
	}
	d.halted, d.halt = context.WithCancel(context.Background())
	d.models.Note(ws)
	d.state.workers = len(ws.Sched)
	d.publish()
	return d
}

// serving returns the current serving snapshot; safe from any goroutine.
func (d *dispatcher) serving() serving { return *d.published.Load() }

func (d *dispatcher) publish() {
	v := d.state
	d.published.Store(&v)
	if d.hooks.serving != nil {
		d.hooks.serving(v)
	}
}

// run keeps the scheduler's deadlines until ctx ends, then refuses every
// later event. Streams still waiting then see halted end and answer for
// themselves.
func (d *dispatcher) run(ctx context.Context) {
	d.mu.Lock()
	d.timer = time.AfterFunc(time.Hour, d.tick)
	d.timer.Stop()
	d.arm()
	d.mu.Unlock()
	<-ctx.Done()
	d.mu.Lock()
	d.timer.Stop()
	d.halt()
	d.mu.Unlock()
}

// lock takes the lock for one event, unless ctx has ended or run has
// returned; unlock sets the timer to the deadline the event left and lets
// go.
func (d *dispatcher) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	if d.halted.Err() != nil {
		d.mu.Unlock()
		return errStopped
	}
	return nil
}

func (d *dispatcher) unlock() {
	d.arm()
	d.mu.Unlock()
}

// tick acts at the scheduler's next deadline or the end of a settle
// window, on the timer's goroutine.
func (d *dispatcher) tick() {
	if d.lock(context.Background()) != nil {
		return
	}
	defer d.unlock()
	d.armed = time.Time{}
	now := time.Now()
	d.release(now)
	d.deliver(d.sch.Tick(now))
}

// arm sets the timer to the next deadline, unless it is set for it
// already. d.mu is held.
func (d *dispatcher) arm() {
	if d.timer == nil {
		return
	}
	at, ok := d.sch.NextDeadline()
	if len(d.held) > 0 && (!ok || d.settleUntil.Before(at)) {
		at, ok = d.settleUntil, true
	}
	switch {
	case !ok && !d.armed.IsZero():
		d.timer.Stop()
		d.armed = time.Time{}
	case ok && !at.Equal(d.armed):
		d.timer.Reset(max(0, time.Until(at)))
		d.armed = at
	}
}

// handle applies ev and returns its answer, for the events that answer.
// A request's own events are handled here, the rest in control, which
// keeps this frame small: it is on the stack of every stream that submits.
// d.mu is held.
func (d *dispatcher) handle(ev *event) reply {
	now := time.Now()
	d.release(now)
	switch ev.kind {
	case evSubmit:
		d.accept(now, &ev.req, ev.subset, ev.box, ev.at)
	case evAdopt:
		d.boxes[ev.id] = ev.box
		d.deliver(d.sch.Adopt(now, ev.req, ev.booking))
		if ev.booking.FirstToken {
			delete(d.boxes, ev.id) // past its first token it cannot be preempted
		}
	case evRelease:
		for i := range d.held {
			if d.held[i].id == ev.id {
				d.held = slices.Delete(d.held, i, i+1)
				break
			}
		}
		delete(d.boxes, ev.id)
		d.deliver(d.sch.Release(now, ev.id))
	case evFirstToken:
		delete(d.boxes, ev.id) // past its first token it cannot be preempted
		d.deliver(d.sch.FirstToken(now, ev.id))
	case evServed:
		d.deliver(d.sch.Served(now, ev.id, ev.worker, ev.rank))
	case evUsage:
		d.deliver(d.sch.Usage(now, ev.id, ev.prompt, ev.completion))
	case evWorkers, evActive, evDrain, evShed, evEngine, evSynced, evStats, evRoute:
		return d.control(now, ev)
	}
	return reply{}
}

// control applies the events that are not a request's own: worker sets,
// leadership, draining, engine reports and the answering ones. d.mu is
// held.
func (d *dispatcher) control(now time.Time, ev *event) reply {
	switch ev.kind {
	case evWorkers:
		d.workers = ev.workers
		d.models.Note(ev.workers)
		d.deliver(d.sch.SetWorkers(now, ev.workers.Sched))
		d.state.workers = len(ev.workers.Sched)
		d.publish()
	case evSynced:
		delete(d.expect, ev.front)
		if len(d.expect) == 0 && now.Before(d.settleUntil) {
			d.settleUntil = now
			d.release(now)
		}
	case evActive:
		if d.fresh != nil {
			d.reset(now, ev.active, ev.fronts)
		} else {
			d.setActive(now, ev.active)
		}
	case evDrain:
		d.state.draining = true
		d.publish()
	case evShed:
		d.shed = true
		d.deliver(d.sch.Drain(now))
	case evEngine:
		d.loads = ev.loads
		d.deliver(d.sch.ReportLoad(now, ev.loads))
	case evStats:
		st := d.sch.Stats()
		return reply{stats: &st}
	case evRoute:
		return d.route(ev)
	case evSubmit, evAdopt, evRelease, evFirstToken, evServed, evUsage: // handle's
	}
	return reply{}
}

// submit hands a stream's request to the scheduler: evSubmit without an
// event, whose copies would deepen the stack of every submitting stream
// past its first size. It fails when the dispatcher stopped or ctx ended
// first.
func (d *dispatcher) submit(ctx context.Context, r *sched.Request, sub *subset, box noticeBox) error {
	at := time.Now()
	if err := d.lock(ctx); err != nil {
		return err
	}
	defer d.unlock()
	now := time.Now()
	d.release(now)
	d.accept(now, r, sub, box, at)
	return nil
}

// accept hands a request to the scheduler, or holds it while a new term
// settles (replica mode). d.mu is held.
func (d *dispatcher) accept(now time.Time, r *sched.Request, sub *subset, box noticeBox, at time.Time) {
	if now.Before(d.settleUntil) {
		d.hold(r, sub, box, at)
		return
	}
	d.schedule(now, r, sub, box, at)
}

// hold keeps a request until the settle window ends: queued, in effect,
// so the stream keeps Envoy's timer from firing meanwhile (a second
// "queued" is not passed on). d.mu is held.
func (d *dispatcher) hold(r *sched.Request, sub *subset, box noticeBox, at time.Time) {
	d.boxes[r.ID] = box
	d.held = append(d.held, event{kind: evSubmit, id: r.ID, req: *r, subset: sub, box: box, at: at})
	d.tell(r.ID, notice{kind: noticeQueued})
}

// schedule hands a request to the scheduler. A request whose endpoint
// subset names no known worker is answered without it. d.mu is held.
func (d *dispatcher) schedule(now time.Time, r *sched.Request, sub *subset, box noticeBox, at time.Time) {
	if sub != nil {
		if r.AllowedWorkers = d.workers.Allowed(sub.admits); r.AllowedWorkers == nil {
			box.put(subsetRejection(r))
			return
		}
	}
	d.boxes[r.ID] = box
	acts := d.sch.Submit(now, *r)
	if d.hooks.submitted != nil {
		d.hooks.submitted(time.Since(at))
	}
	d.deliver(acts)
}

// setActive moves between leading and standing by. A standby's scheduler
// is drained: queued requests and arrivals are answered 503. Leading again
// resumes it, unless the replica is draining and its queue was shed.
func (d *dispatcher) setActive(now time.Time, active bool) {
	if active != d.state.standby {
		return
	}
	d.state.standby = !active
	if active {
		d.state.acquisitions++
	}
	d.publish() // before the queue is answered: a client told 503 finds the replica not ready
	switch {
	case !active:
		d.deliver(d.sch.Drain(now))
	case !d.shed:
		d.sch.Resume()
	}
}

// reset starts or ends this replica's term as the scheduler in replica
// mode: either way the scheduler starts afresh, empty, with the engines'
// last report. Nothing is answered: the requests belong to the fronts,
// which re-register them with whichever replica schedules next. The
// fronts' streams have ended and the local link is closed before this
// runs, so no event of the old term follows. A new term holds submits
// until every front of fronts has re-registered, at most d.settle.
func (d *dispatcher) reset(now time.Time, active bool, fronts []string) {
	sch, err := d.fresh(d.workers.Sched)
	if err != nil {
		d.log.Error("cannot build a fresh scheduler; keeping the old one", "error", err)
	} else {
		d.sch = sch
		d.deliver(d.sch.ReportLoad(now, d.loads))
	}
	clear(d.boxes)
	clear(d.held)
	d.held = d.held[:0]
	d.settleUntil = time.Time{}
	clear(d.expect)
	if active {
		d.settleUntil = now.Add(d.settle)
		if d.expect == nil {
			d.expect = make(map[string]bool, len(fronts))
		}
		for _, f := range fronts {
			d.expect[f] = true
		}
	}
	if active != d.state.standby {
		return
	}
	d.state.standby = !active
	if active {
		d.state.acquisitions++
	}
	d.publish()
}

// release hands the held submits to the scheduler, in arrival order, once
// the settle window is over.
func (d *dispatcher) release(now time.Time) {
	if len(d.held) == 0 || now.Before(d.settleUntil) {
		return
	}
	held := d.held
	d.held = nil
	slices.SortStableFunc(held, func(a, b event) int { return a.req.Arrival.Compare(b.req.Arrival) })
	for i := range held {
		ev := &held[i]
		delete(d.boxes, ev.id) // schedule files it again
		d.schedule(now, &ev.req, ev.subset, ev.box, ev.at)
	}
}

func (d *dispatcher) route(ev *event) reply {
	var allowed []string
	if ev.subset != nil {
		if allowed = d.workers.Allowed(ev.subset.admits); allowed == nil {
			return reply{}
		}
	}
	w, rank, ok := d.sch.RouteIn(ev.model, allowed)
	var tg fleet.Target
	if ok {
		tg, ok = d.workers.Target(w, rank)
	}
	return reply{target: tg, ok: ok}
}

// tell puts a notice in a request's box. The box has room for every
// notice a request can get, so a full box is a bug: it is logged, never
// waited on.
func (d *dispatcher) tell(id uint64, n notice) {
	box := d.boxes[id]
	if box == nil {
		return
	}
	if !box.put(n) {
		d.log.Error("notice box full; notice dropped", "request", id, "notice", n.kind)
	}
}

// decide tells request a.ID the scheduler's decision. The decision is made
// only for a request with a box: a Release of a queued request reports a
// reject that nobody waits for.
func (d *dispatcher) decide(a *sched.Action, t fleet.Target) {
	if d.boxes[a.ID] == nil {
		return
	}
	dc := &decision{action: *a, target: t}
	dc.action.Fallbacks = nil // the scheduler's slice, resolved into t
	dc.unknownModel = a.Outcome == sched.OutcomeNoEndpoints && d.models.Unknown(a.Model)
	d.tell(a.ID, notice{kind: noticeDecided, decision: dc})
}

// deliver turns the scheduler's actions into notices. acts is the
// scheduler's reused slice: it is fully consumed before the scheduler is
// called again.
func (d *dispatcher) deliver(acts []sched.Action) {
	for i := range acts {
		a := &acts[i]
		if a.Queued && d.hooks.waited != nil && (a.Kind == sched.ActionDispatch || a.Kind == sched.ActionReject) {
			d.hooks.waited(a)
		}
		switch a.Kind {
		case sched.ActionQueue:
			d.tell(a.ID, notice{kind: noticeQueued})
		case sched.ActionDispatch:
			tg, ok := d.workers.Target(a.Worker, a.Rank)
			if !ok {
				// The scheduler only dispatches to workers of the set it
				// was given with this one; answer 503 rather than route
				// nowhere, and release the booking below.
				d.log.Error("dispatch to a worker outside the worker set", "request", a.ID, "worker", a.Worker)
				rej := *a
				rej.Kind, rej.Outcome, rej.Message = sched.ActionReject, sched.OutcomeNoEndpoints, "no endpoints available to route work"
				d.decide(&rej, fleet.Target{})
				delete(d.boxes, a.ID)
				d.cancels = append(d.cancels, a.ID)
				continue
			}
			// a.Fallbacks is the scheduler's: resolve it before its next call.
			d.decide(a, d.workers.WithPrefill(d.workers.WithFallbacks(tg, a.Fallbacks), a.Prefill))
		case sched.ActionReject:
			d.decide(a, fleet.Target{})
			delete(d.boxes, a.ID)
		case sched.ActionPreempt:
			d.tell(a.ID, notice{kind: noticePreempted})
			delete(d.boxes, a.ID)
		}
	}
	for len(d.cancels) > 0 {
		id := d.cancels[len(d.cancels)-1]
		d.cancels = d.cancels[:len(d.cancels)-1]
		d.deliver(d.sch.Release(time.Now(), id))
	}
}

// send applies ev. It fails when the dispatcher stopped or ctx ended
// first.
func (d *dispatcher) send(ctx context.Context, ev *event) error {
	_, err := d.call(ctx, ev)
	return err
}

// call applies ev and returns its answer. It fails when the dispatcher
// stopped or ctx ended first.
func (d *dispatcher) call(ctx context.Context, ev *event) (reply, error) {
	if err := d.lock(ctx); err != nil {
		return reply{}, err
	}
	defer d.unlock()
	return d.handle(ev), nil
}

// subsetRejection answers a request whose endpoint subset names no known
// worker.
func subsetRejection(r *sched.Request) notice {
	return notice{kind: noticeDecided, decision: &decision{action: sched.Action{Kind: sched.ActionReject, ID: r.ID, Outcome: sched.OutcomeNoEndpoints,
		Priority: r.Priority, Model: r.Model, Message: subsetUnmatched}}}
}

// subsetUnmatched answers a request whose endpoint subset names no worker
// of the set.
const subsetUnmatched = "no endpoints available to route work: no endpoint in the request's endpoint subset (" +
	subsetNamespace + "/" + subsetKey + ") is a known worker"

// String describes a notice for logs and tests: "queued", "preempted",
// "dispatched:<address>" or "rejected:<outcome>".
func (n notice) String() string {
	switch n.kind {
	case noticeQueued:
		return "queued"
	case noticePreempted:
		return "preempted"
	case noticeDecided:
		if n.decision.action.Kind == sched.ActionDispatch {
			return "dispatched:" + n.decision.target.Address
		}
		return "rejected:" + n.decision.action.Outcome.String()
	}
	return fmt.Sprintf("notice(%d)", uint8(n.kind))
}
