package extproc

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/tollgate/tollgate/sched"
)

// scheduler is what the dispatcher needs from the scheduling core.
type scheduler interface {
	Submit(now time.Time, r sched.Request) []sched.Action
	FirstToken(now time.Time, id uint64) []sched.Action
	Release(now time.Time, id uint64) []sched.Action
	Tick(now time.Time) []sched.Action
	SetWorkers(now time.Time, workers []sched.Worker) []sched.Action
	ReportLoad(now time.Time, loads []sched.EngineLoad) []sched.Action
	Drain(now time.Time) []sched.Action
	Resume()
	NextDeadline() (time.Time, bool)
	RouteIn(model string, allowed []string) (worker string, rank uint32, ok bool)
	Served(now time.Time, id uint64, worker string, rank uint32) []sched.Action
	Stats() sched.Stats
}

var _ scheduler = (*sched.Scheduler)(nil)

// errStopped is returned to a stream that talks to a dispatcher whose Run
// has returned.
var errStopped = errors.New("extproc: dispatcher stopped")

// ticket is how the dispatcher tells one stream what became of its request.
// The dispatcher writes the state under mu and then signals wake without
// blocking; the stream reads the state after each signal. So the dispatcher
// never waits on a stream, whatever the stream is doing.
type ticket struct {
	id uint64
	// wake has capacity 1: a pending signal already covers later changes.
	wake chan struct{}

	// mu guards the fields below.
	mu sync.Mutex
	// queued is set when Submit queued the request.
	queued bool
	// decided is set once, when the request was dispatched or rejected.
	decided bool
	action  sched.Action
	target  target
	// preempted is set when the request, in flight, was chosen as a victim.
	preempted bool
}

func newTicket(id uint64) *ticket { return &ticket{id: id, wake: make(chan struct{}, 1)} }

// signal wakes the stream without blocking.
func (t *ticket) signal() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// ticketState is a copy of a ticket's state.
type ticketState struct {
	queued, decided, preempted bool
	action                     sched.Action
	target                     target
}

// load returns a copy of the ticket's state.
func (t *ticket) load() ticketState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return ticketState{queued: t.queued, decided: t.decided, preempted: t.preempted, action: t.action, target: t.target}
}

func (t *ticket) decide(a *sched.Action, tg target) {
	t.mu.Lock()
	t.decided, t.action, t.target = true, *a, tg
	t.mu.Unlock()
	t.signal()
}

func (t *ticket) markQueued() {
	t.mu.Lock()
	t.queued = true
	t.mu.Unlock()
	t.signal()
}

func (t *ticket) preempt() {
	t.mu.Lock()
	t.preempted = true
	t.mu.Unlock()
	t.signal()
}

type eventKind uint8

const (
	evSubmit eventKind = iota + 1
	evCancel
	evFirstToken
	evDone
	evWorkers
	evDrain
	evActive
	evStats
	evRoute
	evEngine
	evServed
)

// event is one message to the dispatcher.
type event struct {
	kind eventKind
	id   uint64
	// evSubmit.
	req sched.Request
	tk  *ticket
	at  time.Time
	// evWorkers.
	workers *workerSet
	// evRoute.
	model string
	// evServed: the worker and rank that served request id.
	worker string
	rank   uint32
	// evSubmit and evRoute: the request's endpoint subset, nil for none.
	subset *subset
	// evEngine.
	loads []sched.EngineLoad
	// evActive.
	active bool
	// reply, for the events that answer, has capacity 1.
	reply chan reply
}

type reply struct {
	stats  sched.Stats
	target target
	ok     bool
}

// dispatcher is the one goroutine that owns the scheduler. Streams reach it
// only through events; it answers through tickets and reply channels and
// never blocks on a stream. It does no per-request CPU work beyond the
// scheduler's own bookkeeping.
type dispatcher struct {
	events  chan event
	stopped chan struct{}
	log     *slog.Logger
	now     func() time.Time
	// onSubmit observes the scheduler overhead of each Submit.
	onSubmit func(time.Duration)

	// Owned by run.
	sch      scheduler
	tickets  map[uint64]*ticket
	workers  *workerSet
	draining bool
	// standby: another replica leads; arrivals are answered 503.
	standby bool
	// cancels collects in-flight requests to undo after an impossible
	// dispatch (a worker missing from the set); see deliver.
	cancels []uint64
}

func newDispatcher(sch scheduler, ws *workerSet, now func() time.Time, log *slog.Logger, onSubmit func(time.Duration)) *dispatcher {
	return &dispatcher{
		events:   make(chan event),
		stopped:  make(chan struct{}),
		log:      log,
		now:      now,
		onSubmit: onSubmit,
		sch:      sch,
		tickets:  make(map[uint64]*ticket),
		workers:  ws,
	}
}

// run serves events until ctx ends. Streams still waiting then see
// stopped closed and answer for themselves.
func (d *dispatcher) run(ctx context.Context) {
	defer close(d.stopped)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-d.events:
			d.handle(ev)
		case <-timer.C:
			d.deliver(d.sch.Tick(d.now()))
		}
		if at, ok := d.sch.NextDeadline(); ok {
			timer.Reset(max(0, at.Sub(d.now())))
		} else {
			timer.Stop()
		}
	}
}

func (d *dispatcher) handle(ev event) {
	now := d.now()
	switch ev.kind {
	case evSubmit:
		if d.draining || d.standby {
			ev.tk.decide(&sched.Action{Kind: sched.ActionReject, ID: ev.id, Outcome: sched.OutcomeShutdown, Priority: ev.req.Priority, Model: ev.req.Model}, target{})
			return
		}
		if ev.subset != nil {
			if ev.req.AllowedWorkers = d.workers.allowed(ev.subset); ev.req.AllowedWorkers == nil {
				ev.tk.decide(&sched.Action{Kind: sched.ActionReject, ID: ev.id, Outcome: sched.OutcomeNoEndpoints,
					Priority: ev.req.Priority, Model: ev.req.Model, Message: subsetUnmatched}, target{})
				return
			}
		}
		d.tickets[ev.id] = ev.tk
		acts := d.sch.Submit(now, ev.req)
		if d.onSubmit != nil {
			d.onSubmit(d.now().Sub(ev.at))
		}
		d.deliver(acts)
		if tk, ok := d.tickets[ev.id]; ok && !tk.load().decided {
			tk.markQueued()
		}
	case evCancel:
		delete(d.tickets, ev.id)
		d.deliver(d.sch.Release(now, ev.id))
	case evFirstToken:
		d.deliver(d.sch.FirstToken(now, ev.id))
	case evDone:
		delete(d.tickets, ev.id)
		d.deliver(d.sch.Release(now, ev.id))
	case evWorkers:
		d.workers = ev.workers
		d.deliver(d.sch.SetWorkers(now, ev.workers.sched))
		ev.reply <- reply{ok: true}
	case evDrain:
		d.draining = true
		d.deliver(d.sch.Drain(now))
		ev.reply <- reply{ok: true}
	case evActive:
		switch {
		case !ev.active && !d.standby:
			d.standby = true
			d.deliver(d.sch.Drain(now))
		case ev.active && d.standby:
			d.standby = false
			d.sch.Resume()
		}
		ev.reply <- reply{ok: true}
	case evEngine:
		d.deliver(d.sch.ReportLoad(now, ev.loads))
	case evServed:
		d.deliver(d.sch.Served(now, ev.id, ev.worker, ev.rank))
	case evStats:
		ev.reply <- reply{stats: d.sch.Stats(), ok: true}
	case evRoute:
		var allowed []string
		if ev.subset != nil {
			if allowed = d.workers.allowed(ev.subset); allowed == nil {
				ev.reply <- reply{}
				return
			}
		}
		w, rank, ok := d.sch.RouteIn(ev.model, allowed)
		var tg target
		if ok {
			tg, ok = d.workers.target(w, rank)
		}
		ev.reply <- reply{target: tg, ok: ok}
	}
}

// deliver hands each action to its ticket. acts is the scheduler's reused
// slice: it is fully consumed before the scheduler is called again.
func (d *dispatcher) deliver(acts []sched.Action) {
	for i := range acts {
		a := &acts[i]
		tk := d.tickets[a.ID]
		if tk == nil {
			continue
		}
		switch a.Kind {
		case sched.ActionDispatch:
			tg, ok := d.workers.target(a.Worker, a.Rank)
			if !ok {
				// The scheduler only dispatches to workers of the set it
				// was given with this one; answer 503 rather than route
				// nowhere, and release the booking below.
				d.log.Error("dispatch to a worker outside the worker set", "request", a.ID, "worker", a.Worker)
				rej := *a
				rej.Kind, rej.Outcome, rej.Message = sched.ActionReject, sched.OutcomeNoEndpoints, "no endpoints available to route work"
				tk.decide(&rej, target{})
				delete(d.tickets, a.ID)
				d.cancels = append(d.cancels, a.ID)
				continue
			}
			// a.Fallbacks is the scheduler's: resolve it before its next call.
			tk.decide(a, d.workers.withFallbacks(tg, a.Fallbacks))
		case sched.ActionReject:
			tk.decide(a, target{})
			delete(d.tickets, a.ID)
		case sched.ActionPreempt:
			tk.preempt()
		case sched.ActionQueue:
			// The ticket's queued mark is set after Submit returns.
		}
	}
	for len(d.cancels) > 0 {
		id := d.cancels[len(d.cancels)-1]
		d.cancels = d.cancels[:len(d.cancels)-1]
		d.deliver(d.sch.Release(d.now(), id))
	}
}

// send hands ev to the dispatcher. It fails when the dispatcher stopped or
// ctx ended first.
func (d *dispatcher) send(ctx context.Context, ev event) error {
	select {
	case d.events <- ev:
		return nil
	case <-d.stopped:
		return errStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// notify reports a state change of an admitted request. It is not bound to
// the stream's context: a cancelled stream must still release what it
// booked. It gives up only when the dispatcher has stopped.
func (d *dispatcher) notify(kind eventKind, id uint64) {
	_ = d.send(context.Background(), event{kind: kind, id: id})
}

// call sends an event that answers and waits for the answer. Once the
// dispatcher has taken the event it always answers.
func (d *dispatcher) call(ctx context.Context, ev event) (reply, error) {
	ev.reply = make(chan reply, 1)
	if err := d.send(ctx, ev); err != nil {
		return reply{}, err
	}
	return <-ev.reply, nil
}

// subsetUnmatched answers a request whose endpoint subset names no worker
// of the set.
const subsetUnmatched = "no endpoints available to route work: no endpoint in the request's endpoint subset (" +
	subsetNamespace + "/" + subsetKey + ") is a known worker"
