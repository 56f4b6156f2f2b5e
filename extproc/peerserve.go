package extproc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/extproc/peer"
)

// maxFrontRequests bounds the requests one front may have live at the
// scheduler: past it the front's stream ends (its requests are released).
const maxFrontRequests = 1 << 16

// peerHelloTimeout bounds the wait for a front's Hello.
const peerHelloTimeout = 5 * time.Second

// remoteIDBit marks the scheduler's IDs of other fronts' requests, so they
// never meet the local streams' IDs.
const remoteIDBit = 1 << 63

// peerDesk is the scheduler side of the peer channel: while this replica
// is the scheduler it serves each front's stream, handing the front's
// requests to the dispatcher under IDs of its own and the dispatcher's
// notices back. When the role ends, every front's stream ends and its
// requests are released.
type peerDesk struct {
	s        *Server
	identity string
	ids      atomic.Uint64
	// maxRequests bounds each front's live requests (maxFrontRequests).
	maxRequests int

	mu     sync.Mutex
	active bool
	// fronts are the streams being served, each with its cancel.
	fronts map[*frontConn]struct{}
	// serving counts the front handlers running, for setActive to wait.
	serving sync.WaitGroup
}

func newPeerDesk(s *Server, identity string) *peerDesk {
	return &peerDesk{s: s, identity: identity, maxRequests: maxFrontRequests, fronts: make(map[*frontConn]struct{})}
}

// setActive opens or closes the desk. Closing ends every front's stream
// and waits, at most until ctx ends, until each has released its requests.
func (p *peerDesk) setActive(ctx context.Context, active bool) error {
	p.mu.Lock()
	p.active = active
	var ending []*frontConn
	if !active {
		// The last word to each front: this replica stays on as a front,
		// so the next scheduler waits for its re-registration too.
		p.broadcast(p.identity)
		for f := range p.fronts {
			ending = append(ending, f)
		}
	}
	p.mu.Unlock()
	for _, f := range ending {
		f.out.seal()
		time.AfterFunc(peerFlushTimeout, f.cancel)
	}
	if active {
		return nil
	}
	done := make(chan struct{})
	go func() { p.serving.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("extproc: fronts' streams still ending: %w", ctx.Err())
	}
}

// peerFlushTimeout bounds how long a front's stream may take to send its
// last messages when the scheduler's role ends.
const peerFlushTimeout = time.Second

// frontConn is one front's stream at the scheduler.
type frontConn struct {
	name   string
	cancel context.CancelFunc
	// ids maps the front's request IDs to the scheduler's; owned by the
	// receiving goroutine.
	ids map[uint64]uint64

	// out holds the messages to the front; sealed at the role's end.
	out *outbox[peer.Down]
}

// frontBox receives the dispatcher's notices for one front's request.
type frontBox struct {
	f  *frontConn
	id uint64 // the front's ID
}

func (b frontBox) put(n notice) bool {
	d := peer.Down{ID: b.id}
	switch n.kind {
	case noticeQueued:
		d.Kind = peer.DownQueued
	case noticePreempted:
		d.Kind = peer.DownPreempted
	case noticeDecided:
		d.Kind = peer.DownDecided
		dc := n.decision
		d.Decision = &peer.Decision{Action: dc.action, Target: dc.target, UnknownModel: dc.unknownModel}
	}
	b.f.out.push(d)
	return true
}

// ServePeer serves one front's peer stream (register it with peer.Register
// on the peer listener). It refuses a stream while this replica is not the
// scheduler; the front then finds the elected one.
func (s *Server) ServePeer(st peer.ServerStream) error {
	p := s.desk
	if p == nil {
		return status.Error(codes.Unimplemented, "tollgate: replica mode is off")
	}
	ctx, cancel := context.WithCancel(st.Context())
	defer cancel()
	f := &frontConn{cancel: cancel, ids: make(map[uint64]uint64), out: newOutbox[peer.Down]()}
	p.mu.Lock()
	if !p.active {
		p.mu.Unlock()
		return status.Error(codes.FailedPrecondition, notScheduler(p.identity))
	}
	p.fronts[f] = struct{}{}
	p.serving.Add(1)
	p.mu.Unlock()
	hello, err := recvHello(ctx, st)
	if err != nil {
		p.forget(f)
		return err
	}
	f.out.push(peer.Down{Kind: peer.DownWelcome, Scheduler: p.identity})
	p.named(f, hello.Front)
	s.replica.fronts.Inc()
	s.log.Info("front linked", "front", f.name)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { sendFront(ctx, st, f, cancel) })
	// The receiver outlives this handler when the role ends: returning is
	// what ends the stream, and so its Recv. It releases the front's
	// requests last.
	received := make(chan error, 1)
	go func() {
		defer p.forget(f)
		defer s.replica.fronts.Dec()
		defer p.releaseAll(f)
		received <- p.receive(ctx, st, f)
	}()
	select {
	case err := <-received:
		return err
	case <-ctx.Done():
		return status.Error(codes.Unavailable, "tollgate: no longer the scheduler")
	}
}

// receive hands the front's messages to the dispatcher until the stream
// or ctx ends.
func (p *peerDesk) receive(ctx context.Context, st peer.ServerStream, f *frontConn) error {
	for {
		u, err := st.Recv()
		if err != nil {
			return err
		}
		if err := p.take(ctx, f, u); err != nil {
			return err
		}
	}
}

// forget removes a front whose stream is over.
func (p *peerDesk) forget(f *frontConn) {
	p.mu.Lock()
	delete(p.fronts, f)
	if p.active {
		p.broadcast()
	}
	p.mu.Unlock()
	p.serving.Done()
}

// named records f's name and tells every front the new list.
func (p *peerDesk) named(f *frontConn, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f.name = name
	p.broadcast()
}

// broadcast sends every named front the list of named fronts (at most
// peer.MaxFronts of them) and also, the names in also, so that whichever
// of them schedules next knows whose re-registration to wait for. p.mu is
// held.
func (p *peerDesk) broadcast(also ...string) {
	names := slices.Clone(also)
	for f := range p.fronts {
		if f.name != "" && len(names) < peer.MaxFronts {
			names = append(names, f.name)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for f := range p.fronts {
		if f.name != "" {
			// A front that reads slowly keeps one list, the latest.
			f.out.replace(func(d peer.Down) bool { return d.Kind == peer.DownFronts }, peer.Down{Kind: peer.DownFronts, Fronts: names})
		}
	}
}

// notScheduler is how a replica that is not the scheduler refuses a
// front; it names the replica, so that CheckPeerAddr can tell it reached
// itself.
func notScheduler(identity string) string {
	return fmt.Sprintf("tollgate: replica %q is not the scheduler", identity)
}

// CheckPeerAddr checks, before the replica campaigns, that its published
// --peer-addr reaches its own peer listener: another replica could not
// reach it otherwise once it is elected. It retries until ctx ends.
func (s *Server) CheckPeerAddr(ctx context.Context) error {
	rc := s.cfg.Replica
	if rc == nil {
		return nil
	}
	var last error
	for {
		last = s.reachSelf(ctx, rc)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("extproc: --peer-addr %s does not reach this replica: %w", rc.PeerAddr, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// reachSelf greets the peer listener at rc.PeerAddr and expects this
// replica's own refusal (it is not the scheduler yet).
func (s *Server) reachSelf(ctx context.Context, rc *ReplicaConfig) error {
	dctx, cancel := context.WithTimeout(ctx, peerDialTimeout)
	defer cancel()
	cs, err := peer.Dial(dctx, rc.PeerAddr, rc.ClientTLS, rc.DialOptions...)
	if err != nil {
		return err
	}
	defer cs.Close()
	_, err = greet(dctx, cs, rc.Identity)
	switch st := status.Convert(err); {
	case err == nil:
		return errors.New("a scheduler answered there")
	case st.Code() == codes.FailedPrecondition && st.Message() == notScheduler(rc.Identity):
		return nil
	case st.Code() == codes.FailedPrecondition:
		return fmt.Errorf("another replica answered there: %s", st.Message())
	default:
		return err
	}
}

// recvHello waits for the front's Hello, at most peerHelloTimeout.
func recvHello(ctx context.Context, st peer.ServerStream) (*peer.Up, error) {
	type got struct {
		u   *peer.Up
		err error
	}
	ch := make(chan got, 1)
	go func() {
		u, err := st.Recv()
		ch <- got{u, err}
	}()
	timer := time.NewTimer(peerHelloTimeout)
	defer timer.Stop()
	select {
	case g := <-ch:
		switch {
		case g.err != nil:
			return nil, g.err
		case g.u.Kind != peer.UpHello:
			return nil, status.Errorf(codes.InvalidArgument, "tollgate: the first message is kind %d, not a hello", g.u.Kind)
		}
		return g.u, nil
	case <-timer.C:
		return nil, status.Error(codes.DeadlineExceeded, "tollgate: no hello in time")
	case <-ctx.Done():
		return nil, status.Error(codes.Unavailable, "tollgate: no longer the scheduler")
	}
}

// sendFront sends the queued messages to the front until ctx ends; a
// failed send ends the stream.
func sendFront(ctx context.Context, st peer.ServerStream, f *frontConn, cancel context.CancelFunc) {
	var batch []peer.Down
	for {
		var sealed, ok bool
		if batch, sealed, ok = f.out.take(ctx.Done(), batch); !ok {
			return
		}
		for i := range batch {
			if err := st.Send(&batch[i]); err != nil {
				cancel()
				return
			}
		}
		if sealed {
			cancel()
			return
		}
	}
}

// take hands one message of front f to the dispatcher, under the
// scheduler's own ID for the front's request.
func (p *peerDesk) take(ctx context.Context, f *frontConn, u *peer.Up) error {
	if u.Kind == peer.UpHello {
		return status.Error(codes.InvalidArgument, "tollgate: a second hello")
	}
	if u.Kind == peer.UpSynced {
		return p.s.disp.send(ctx, &event{kind: evSynced, front: f.name})
	}
	gid, known := f.ids[u.ID]
	switch u.Kind {
	case peer.UpSubmit, peer.UpAdopt:
		if known {
			return status.Errorf(codes.InvalidArgument, "tollgate: request %d submitted twice", u.ID)
		}
		if len(f.ids) >= p.maxRequests {
			return status.Errorf(codes.ResourceExhausted, "tollgate: more than %d live requests from one front", p.maxRequests)
		}
		gid = remoteIDBit | p.ids.Add(1)
		f.ids[u.ID] = gid
	case peer.UpRelease, peer.UpHello, peer.UpFirstToken, peer.UpServed, peer.UpUsage, peer.UpSynced:
	}
	if gid == 0 {
		return nil // a request the scheduler does not have (any more)
	}
	ev := eventOf(u, gid, frontBox{f, u.ID})
	if err := p.s.disp.send(ctx, &ev); err != nil {
		return err // the stream ended: releaseAll releases what is left
	}
	if u.Kind == peer.UpRelease {
		delete(f.ids, u.ID)
	}
	return nil
}

// eventOf turns a front's message into a dispatcher event about request
// id (the scheduler's ID), with box for a submit or an adoption.
func eventOf(u *peer.Up, id uint64, box noticeBox) event {
	ev := event{id: id, worker: u.Worker, rank: u.Rank, prompt: u.Prompt, completion: u.Completion}
	switch u.Kind {
	case peer.UpSubmit, peer.UpAdopt:
		ev.kind, ev.req, ev.box, ev.at = evSubmit, *u.Request, box, time.Now()
		ev.req.ID = id
		if u.Kind == peer.UpAdopt {
			ev.kind, ev.booking = evAdopt, *u.Booking
		}
	case peer.UpRelease:
		ev.kind = evRelease
	case peer.UpFirstToken:
		ev.kind = evFirstToken
	case peer.UpServed:
		ev.kind = evServed
	case peer.UpUsage:
		ev.kind = evUsage
	case peer.UpHello, peer.UpSynced:
	}
	return ev
}

// releaseAll releases every request of a front whose stream ended. The
// dispatcher takes them even after the stream's context ended; only its
// own end stops them.
func (p *peerDesk) releaseAll(f *frontConn) {
	for _, gid := range f.ids {
		_ = p.s.disp.send(context.Background(), &event{kind: evRelease, id: gid})
	}
	if n := len(f.ids); n > 0 {
		p.s.log.Info("front unlinked; its requests released", "front", f.name, "requests", n)
	}
	clear(f.ids)
}

// localLink is the relay's link to this replica's own dispatcher: the
// same messages as the peer channel, without a hop.
func (s *Server) localLink(gen uint64) *link {
	r := s.relay
	return newLink(gen, "", func(u *peer.Up) error {
		if u.Kind == peer.UpHello {
			return nil
		}
		if u.Kind == peer.UpSynced {
			return s.disp.send(context.Background(), &event{kind: evSynced, front: r.cfg.Identity})
		}
		ev := eventOf(u, u.ID, relayBox{r, gen, u.ID})
		return s.disp.send(context.Background(), &ev)
	}, nil)
}

// relayBox receives the local dispatcher's notices for a relayed request.
type relayBox struct {
	r   *relay
	gen uint64
	id  uint64
}

func (b relayBox) put(n notice) bool {
	b.r.notice(b.gen, b.id, n)
	return true
}
