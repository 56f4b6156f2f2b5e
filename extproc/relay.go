package extproc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/tollgate/tollgate/extproc/election"
	"github.com/tollgate/tollgate/extproc/peer"
	"github.com/tollgate/tollgate/sched"
)

// relay is a front's link to the scheduler in replica mode
// (Config.Replica): every stream's scheduling events pass through it. It
// keeps each request it handed over, and where it runs, so that it can
// re-register them all with a new scheduler: in-flight ones first, as
// adoptions, then queued ones in arrival order, as resumed submits with
// their original arrival. Queued requests never see the change; they wait
// a little longer.
//
// The scheduler is the local dispatcher while this replica is elected,
// otherwise the elected replica's peer channel. Messages to it are queued
// on the link under the relay's lock and sent by the link's pump outside
// it, so no lock is held across a send and a re-registration is ordered
// before every later event.
type relay struct {
	log *slog.Logger
	cfg *ReplicaConfig
	// local opens the link to this replica's own dispatcher.
	local func(gen uint64) *link
	// changed is called, outside the lock, when the link comes or goes.
	changed func()
	m       *replicaMetrics
	// wg tracks the connector and every link's goroutines.
	wg sync.WaitGroup

	mu   sync.Mutex
	reqs map[uint64]*relayed
	// link is nil while no scheduler is reachable; gen numbers links, and
	// a notice of an older link is dropped.
	link *link
	gen  uint64
	// leader is the elected scheduler as last announced; self is set
	// while this replica is the scheduler.
	leader election.Record
	self   bool
	// lost is when the last link went away (zero while linked).
	lost time.Time
	// failedAddr is the last address a dial failed for (logged once).
	failedAddr string
	// fronts are the replicas linked to the scheduler, as it last said.
	fronts []string
	wake   chan struct{}
}

// relayed is one request the relay holds.
type relayed struct {
	req sched.Request
	box noticeBox
	// sent: handed to some scheduler, so it passed SMG's bucket and the
	// tenant budgets there. told: the stream was told it is queued.
	sent, told bool
	// running: dispatched; booking says where.
	running bool
	booking sched.Booking
}

func newRelay(log *slog.Logger, cfg *ReplicaConfig, m *replicaMetrics) *relay {
	return &relay{log: log, cfg: cfg, m: m, reqs: make(map[uint64]*relayed), wake: make(chan struct{}, 1)}
}

// linked reports whether a scheduler is reachable.
func (r *relay) linked() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.link != nil
}

// submit hands a request over, or holds it until a scheduler is reachable.
// The relay keeps its own copy of req; the slices and the pin it points to
// are the request's own once submitted (the dispatcher's submit reads them
// later too), so they are shared, not copied.
func (r *relay) submit(req *sched.Request, box noticeBox) {
	q := *req
	e := &relayed{req: q, box: box}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs[q.ID] = e
	if r.link == nil {
		r.hold(e)
		return
	}
	e.sent = true
	r.link.push(peer.Up{Kind: peer.UpSubmit, ID: q.ID, Request: &q})
}

// hold tells a request that waits for a scheduler that it is queued: it
// is, here, and the stream then keeps Envoy's message timer from firing
// while no scheduler is reachable. r.mu is held.
func (r *relay) hold(e *relayed) {
	if e.told || e.running {
		return
	}
	e.told = true
	if !e.box.put(notice{kind: noticeQueued}) {
		r.log.Error("notice box full; notice dropped", "request", e.req.ID, "notice", noticeQueued)
	}
}

// release forgets a request and tells the scheduler that has it.
func (r *relay) release(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.reqs[id]
	if e == nil {
		return
	}
	delete(r.reqs, id)
	if e.sent && r.link != nil {
		r.link.push(peer.Up{Kind: peer.UpRelease, ID: id})
	}
}

func (r *relay) firstToken(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.reqs[id]; e != nil && e.running {
		e.booking.FirstToken = true
		r.forward(peer.Up{Kind: peer.UpFirstToken, ID: id})
	}
}

func (r *relay) served(id uint64, worker string, rank uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.reqs[id]; e != nil && e.running {
		e.booking.Worker, e.booking.Rank = worker, rank
		r.forward(peer.Up{Kind: peer.UpServed, ID: id, Worker: worker, Rank: rank})
	}
}

func (r *relay) usage(id, prompt, completion uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.reqs[id]; e != nil && e.running {
		r.forward(peer.Up{Kind: peer.UpUsage, ID: id, Prompt: prompt, Completion: completion})
	}
}

// forward queues u on the link, if there is one. r.mu is held.
func (r *relay) forward(u peer.Up) {
	if r.link != nil {
		r.link.push(u)
	}
}

// notice applies a scheduler's notice about request id, then hands it to
// the request's stream. A notice of an older link, a second "queued" (a
// re-registered request is queued again) and a notice for a request
// already gone are dropped. The stream's put only takes the box's own
// lock, so it is called under r.mu, which keeps notices in order.
func (r *relay) notice(gen, id uint64, n notice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.reqs[id]
	if gen != r.gen || e == nil {
		return
	}
	switch n.kind {
	case noticeQueued:
		if e.told {
			return
		}
		e.told = true
	case noticeDecided:
		if e.running {
			return // dispatched already, by an earlier scheduler
		}
		a := &n.decision.action
		a.ID = id
		if a.Kind != sched.ActionDispatch {
			delete(r.reqs, id) // rejected: nothing more to tell anyone
			break
		}
		e.running = true
		e.booking = sched.Booking{Worker: a.Worker, Rank: a.Rank, Prefill: a.Prefill}
	case noticePreempted:
	}
	if !e.box.put(n) {
		r.log.Error("notice box full; notice dropped", "request", id, "notice", n.kind)
	}
}

// connect makes l the link and re-registers every request with it:
// in-flight ones first (their load is booked before anything queued can
// be dispatched), then queued ones in arrival order. r.mu is held.
func (r *relay) connect(l *link) {
	r.link, r.lost = l, time.Time{}
	held := make([]*relayed, 0, len(r.reqs))
	for _, e := range r.reqs {
		held = append(held, e)
	}
	slices.SortFunc(held, func(a, b *relayed) int {
		if a.running != b.running {
			if a.running {
				return -1
			}
			return 1
		}
		return cmp.Or(a.req.Arrival.Compare(b.req.Arrival), cmp.Compare(a.req.ID, b.req.ID))
	})
	for _, e := range held {
		q := e.req
		if e.running {
			b := e.booking
			l.push(peer.Up{Kind: peer.UpAdopt, ID: q.ID, Request: &q, Booking: &b})
			r.m.reregistered.WithLabelValues("in_flight").Inc()
			continue
		}
		q.Resumed = e.sent
		if e.sent {
			r.m.reregistered.WithLabelValues("queued").Inc()
		}
		e.sent = true
		l.push(peer.Up{Kind: peer.UpSubmit, ID: q.ID, Request: &q})
	}
	l.push(peer.Up{Kind: peer.UpSynced})
}

// knownFronts returns the replicas the last scheduler had linked, with
// this one: whose re-registration a new term of this replica waits for.
func (r *relay) knownFronts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(slices.Clone(r.fronts), r.cfg.Identity)
}

// disconnect drops the current link, if it is gen, and returns it for the
// caller to close outside the lock. r.mu is held.
func (r *relay) disconnect(gen uint64) *link {
	l := r.link
	if l == nil || l.gen != gen {
		return nil
	}
	r.link, r.lost = nil, time.Now()
	for _, e := range r.reqs {
		r.hold(e)
	}
	return l
}

// setSelf switches between being the scheduler (the local link) and
// following the elected one (the connector dials it). It waits until the
// old link's pump has stopped, so the caller can reset the dispatcher
// after every message of the old link has reached it.
func (r *relay) setSelf(self bool) {
	r.mu.Lock()
	old := r.link
	if old != nil {
		old = r.disconnect(old.gen)
	}
	r.self = self
	lost := r.lost
	if self {
		r.gen++
		l := r.local(r.gen)
		r.connect(l)
		r.start(l)
	}
	r.mu.Unlock()
	if old != nil {
		old.close()
		<-old.stopped
	}
	scheduler := ""
	if self {
		scheduler = r.cfg.Identity
	}
	r.noteLink(self, lost, scheduler)
	r.poke()
}

// setLeader records the elected scheduler. A link to another address is
// dropped, and the connector dials the new one.
func (r *relay) setLeader(rec election.Record) {
	r.mu.Lock()
	r.leader = rec
	var old *link
	if l := r.link; l != nil && !l.local() && l.addr != rec.PeerAddr {
		old = r.disconnect(l.gen)
	}
	r.mu.Unlock()
	if old != nil {
		old.close()
		r.noteLink(false, time.Time{}, "")
	}
	r.poke()
}

// poke wakes the connector.
func (r *relay) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Dial timing: each attempt is bounded, and failed attempts back off.
const (
	peerDialTimeout = 2 * time.Second
	peerRetryMin    = 50 * time.Millisecond
	peerRetryMax    = time.Second
)

// run keeps this front linked to the elected scheduler until ctx ends,
// then closes the link and waits for every goroutine the relay started.
func (r *relay) run(ctx context.Context) {
	defer func() {
		r.mu.Lock()
		var l *link
		if r.link != nil {
			l = r.disconnect(r.link.gen)
		}
		r.mu.Unlock()
		if l != nil {
			l.close()
		}
		r.wg.Wait()
	}()
	backoff := peerRetryMin
	for {
		r.mu.Lock()
		// A record naming this replica is stale (it resigned): the next
		// election names another one.
		addr, need := r.leader.PeerAddr, !r.self && r.link == nil && r.leader.Identity != r.cfg.Identity
		r.mu.Unlock()
		if !need || addr == "" {
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
			}
			continue
		}
		if err := r.dial(ctx, addr); err != nil {
			r.mu.Lock()
			first := r.failedAddr != addr
			r.failedAddr = addr
			r.mu.Unlock()
			if first {
				r.log.Warn("cannot reach the scheduler; retrying", "peer", addr, "error", err)
			}
			r.m.dialFailures.Inc()
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-r.wake:
			case <-t.C:
			}
			t.Stop()
			backoff = min(2*backoff, peerRetryMax)
			continue
		}
		backoff = peerRetryMin
	}
}

// dial opens the peer channel to addr, greets the scheduler there and
// makes it the link.
func (r *relay) dial(ctx context.Context, addr string) error {
	dctx, cancel := context.WithTimeout(ctx, peerDialTimeout)
	defer cancel()
	cs, err := peer.Dial(dctx, addr, r.cfg.ClientTLS, r.cfg.DialOptions...)
	if err != nil {
		return err
	}
	welcome, err := greet(dctx, cs, r.cfg.Identity)
	if err != nil {
		cs.Close()
		return err
	}
	r.mu.Lock()
	if r.self || r.link != nil || r.leader.PeerAddr != addr {
		r.mu.Unlock()
		cs.Close()
		return nil // things changed meanwhile; the loop looks again
	}
	r.gen++
	l := newLink(r.gen, addr, func(u *peer.Up) error { return cs.Send(u) }, cs.Close)
	gen, lost := r.gen, r.lost
	r.connect(l)
	r.start(l)
	r.failedAddr = ""
	r.mu.Unlock()
	r.wg.Go(func() { r.receive(gen, cs) })
	r.log.Info("linked to the scheduler", "peer", addr, "scheduler", welcome)
	r.noteLink(true, lost, welcome)
	return nil
}

// greet sends Hello and waits for Welcome, at most until ctx ends.
func greet(ctx context.Context, cs peer.ClientStream, identity string) (string, error) {
	// A stream the scheduler refused at once fails the Send with io.EOF;
	// the Recv below then returns the refusal itself.
	if err := cs.Send(&peer.Up{Kind: peer.UpHello, Front: identity}); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	type answer struct {
		d   *peer.Down
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		d, err := cs.Recv()
		ch <- answer{d, err}
	}()
	select {
	case <-ctx.Done():
		cs.Close() // ends the Recv above
		return "", fmt.Errorf("no welcome from the scheduler: %w", ctx.Err())
	case a := <-ch:
		switch {
		case a.err != nil:
			return "", a.err
		case a.d.Kind != peer.DownWelcome:
			return "", fmt.Errorf("the scheduler's first message is kind %d, not a welcome", a.d.Kind)
		}
		return a.d.Scheduler, nil
	}
}

// receive applies the scheduler's notices until the link ends.
func (r *relay) receive(gen uint64, cs peer.ClientStream) {
	for {
		d, err := cs.Recv()
		if err != nil {
			r.fail(gen, err)
			return
		}
		if d.Kind == peer.DownFronts {
			r.mu.Lock()
			r.fronts = d.Fronts
			r.mu.Unlock()
			continue
		}
		if n, ok := noticeOf(d); ok {
			r.notice(gen, d.ID, n)
		}
	}
}

// fail drops link gen after an error on it and wakes the connector.
func (r *relay) fail(gen uint64, err error) {
	r.mu.Lock()
	l := r.disconnect(gen)
	r.mu.Unlock()
	if l == nil {
		return
	}
	l.close()
	r.log.Warn("lost the scheduler", "peer", l.addr, "error", err)
	r.noteLink(false, time.Time{}, "")
	r.poke()
}

// start runs l's pump. r.mu is held.
func (r *relay) start(l *link) {
	l.onFail = func(err error) { r.fail(l.gen, err) }
	r.wg.Go(l.pump)
}

// noteLink records a link change in the metrics and tells the server
// (readiness). lost is when the previous link went away: the admission
// pause, when this change linked again.
func (r *relay) noteLink(linked bool, lost time.Time, scheduler string) {
	if linked {
		r.m.linked.Set(1)
		r.m.handovers.Inc()
		if !lost.IsZero() {
			r.m.pause.Observe(time.Since(lost).Seconds())
		}
		if scheduler != "" {
			r.m.setScheduler(scheduler)
		}
	} else {
		r.m.linked.Set(0)
	}
	if r.changed != nil {
		r.changed()
	}
}

// noticeOf turns a scheduler's message into a stream notice.
func noticeOf(d *peer.Down) (notice, bool) {
	switch d.Kind {
	case peer.DownQueued:
		return notice{kind: noticeQueued}, true
	case peer.DownPreempted:
		return notice{kind: noticePreempted}, true
	case peer.DownDecided:
		dc := d.Decision
		return notice{kind: noticeDecided, decision: &decision{action: dc.Action, target: dc.Target, unknownModel: dc.UnknownModel}}, true
	case peer.DownWelcome, peer.DownFronts:
	}
	return notice{}, false
}

// link is one connection to a scheduler: this replica's dispatcher (addr
// empty) or a peer channel. Messages are queued in order in out and sent
// by pump.
type link struct {
	gen  uint64
	addr string
	send func(*peer.Up) error
	// shut ends the connection (nil for the local link).
	shut   func()
	onFail func(error)

	out     *outbox[peer.Up]
	done    chan struct{}
	once    sync.Once
	stopped chan struct{}
}

func newLink(gen uint64, addr string, send func(*peer.Up) error, shut func()) *link {
	return &link{gen: gen, addr: addr, send: send, shut: shut, out: newOutbox[peer.Up](), done: make(chan struct{}), stopped: make(chan struct{})}
}

func (l *link) local() bool { return l.addr == "" }

// push queues u; it never blocks.
func (l *link) push(u peer.Up) { l.out.push(u) }

// close stops the pump after the message it is sending, and ends the
// connection.
func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		if l.shut != nil {
			l.shut()
		}
	})
}

// errLinkClosed ends a pump whose link was closed.
var errLinkClosed = errors.New("extproc: scheduler link closed")

// pump sends the queued messages in order until the link closes or a
// send fails.
func (l *link) pump() {
	defer close(l.stopped)
	var batch []peer.Up
	for {
		var ok bool
		if batch, _, ok = l.out.take(l.done, batch); !ok {
			return
		}
		for i := range batch {
			select {
			case <-l.done:
				return
			default:
			}
			if err := l.send(&batch[i]); err != nil {
				if !errors.Is(err, errLinkClosed) && l.onFail != nil {
					l.onFail(err)
				}
				return
			}
		}
	}
}
