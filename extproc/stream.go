package extproc

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched"
)

// processMethod is the full gRPC method name of the ext_proc stream.
const processMethod = "/" + ServiceName + "/Process"

// streamCancelKey is the context key of a stream's cancel function.
type streamCancelKey struct{}

// tapStream gives each ext_proc stream a context the server can cancel
// itself. gRPC's Recv waits on this context, so cancelling it is the one
// way to end a Recv without a second goroutine: one that waits for a first
// message that never comes, or one that waits for Envoy's next message
// after a notice or a deadline ended the exchange.
func tapStream(ctx context.Context, info *tap.Info) (context.Context, error) {
	if info.FullMethodName != processMethod {
		return ctx, nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	return context.WithValue(ctx, streamCancelKey{}, cancel), nil
}

// tapOption installs tapStream; ServerOptions includes it.
func tapOption() grpc.ServerOption { return grpc.InTapHandle(tapStream) }

// Causes of a stream context the server cancelled itself.
var (
	errNoFirstMessage = errors.New("extproc: no first message in time")
	errShedSilent     = errors.New("extproc: draining; the stream sent no message")
	errAnswered       = errors.New("extproc: the exchange ended and Envoy did not close the stream")
)

// answeredCloseWait bounds how long a stream whose exchange ended while it
// waited for Envoy's next message (a rejection, a preemption) waits for
// Envoy to close it. Envoy closes a stream as soon as it has its final
// answer (v1.37+), or when its local reply is done, so this is only for a
// peer that never does: the stream is then reset.
const answeredCloseWait = 5 * time.Second

// streamEnv connects an exchange to the dispatcher.
type streamEnv struct {
	s   *Server
	ctx context.Context
	// box receives the dispatcher's notices: the stream loop.
	box noticeBox
}

func (e *streamEnv) submit(r *sched.Request, sub *subset) error {
	if rl := e.s.relay; rl != nil {
		if sub != nil {
			if r.AllowedWorkers = e.s.workerSet().Allowed(sub.admits); r.AllowedWorkers == nil {
				e.box.put(subsetRejection(r))
				return nil
			}
		}
		rl.submit(r, e.box)
		return nil
	}
	return e.s.disp.submit(e.ctx, r, sub, e.box)
}

func (e *streamEnv) route(model string, sub *subset) (fleet.Target, bool, error) {
	r, err := e.s.disp.call(e.ctx, &event{kind: evRoute, model: model, subset: sub})
	return r.target, r.ok, err
}

// release and firstToken are not bound to the stream's context: a
// cancelled stream must still release what it booked. They give up only
// when the dispatcher has stopped.
func (e *streamEnv) release(id uint64) {
	if rl := e.s.relay; rl != nil {
		rl.release(id)
		return
	}
	_ = e.s.disp.send(context.Background(), &event{kind: evRelease, id: id})
}

func (e *streamEnv) firstToken(id uint64) {
	if rl := e.s.relay; rl != nil {
		rl.firstToken(id)
		return
	}
	_ = e.s.disp.send(context.Background(), &event{kind: evFirstToken, id: id})
}

func (e *streamEnv) usage(id, prompt, completion uint64) {
	if rl := e.s.relay; rl != nil {
		rl.usage(id, prompt, completion)
		return
	}
	_ = e.s.disp.send(context.Background(), &event{kind: evUsage, id: id, prompt: prompt, completion: completion})
}

func (e *streamEnv) served(id uint64, worker string, rank uint32) {
	if rl := e.s.relay; rl != nil {
		rl.served(id, worker, rank)
		return
	}
	_ = e.s.disp.send(context.Background(), &event{kind: evServed, id: id, worker: worker, rank: rank})
}

func (e *streamEnv) routed(now time.Time, worker string, pl *intake.Plan) {
	e.s.deps.planner.Routed(now, worker, pl)
}

func (e *streamEnv) context() context.Context { return e.ctx }

// Process serves one ext_proc stream: one HTTP request. The stream
// goroutine only ever receives: it waits in Recv for Envoy's next message,
// also while the request waits for the scheduler, so Envoy's own local
// reply to a queued request (Envoy 1.37+) is answered at once and frees
// the queue place. The notices its own message brings (a submit decided at
// once) it sends itself before the next Recv. What arrives meanwhile from
// elsewhere (a later notice, the exchange's deadline, the dispatcher's
// end) is handled by a short-lived goroutine under the stream's lock; one
// that ends the exchange also ends the Recv, through the stream's context.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) (err error) {
	growStack()
	n := s.streamOpened()
	defer s.streamClosed()
	id := s.ids.Add(1)
	defer func() { s.ends.ended(id, err) }()
	if n > int64(s.cfg.MaxConcurrentStreams) {
		return status.Errorf(codes.ResourceExhausted, "tollgate: more than %d concurrent ext_proc streams", s.cfg.MaxConcurrentStreams)
	}
	l := &streamLoop{s: s, stream: stream, ctx: stream.Context()}
	l.cancel, _ = l.ctx.Value(streamCancelKey{}).(context.CancelCauseFunc)
	env := &streamEnv{s: s, ctx: l.ctx, box: l}
	l.x = newExchange(s.deps, env, s.log, id)
	defer l.stop()
	m, err := s.firstMessage(l.ctx, stream)
	if err != nil {
		return l.fail(err)
	}
	return l.run(m)
}

// firstMessage receives a stream's first message, waiting at most
// FirstMessageTimeout; a stream that has sent nothing when Drain sheds the
// queue ends then. Both end the Recv by cancelling the stream's context
// (tapStream).
func (s *Server) firstMessage(ctx context.Context, stream extprocv3.ExternalProcessor_ProcessServer) (*extprocv3.ProcessingRequest, error) {
	cancel, ok := ctx.Value(streamCancelKey{}).(context.CancelCauseFunc)
	if !ok {
		s.warnOnce.Do(func() {
			s.log.Warn("the gRPC server was built without extproc.ServerOptions: streams that never send a message are not bounded")
		})
		return stream.Recv()
	}
	timer := time.AfterFunc(s.cfg.FirstMessageTimeout, func() { cancel(errNoFirstMessage) })
	defer timer.Stop()
	if s.shed.Err() == nil { // a stream opened after the shedding gets its answer
		defer context.AfterFunc(s.shed, func() { cancel(errShedSilent) })()
	}
	m, err := stream.Recv()
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errNoFirstMessage):
		return nil, status.Errorf(codes.DeadlineExceeded, "tollgate: no message within %v of opening the stream", s.cfg.FirstMessageTimeout)
	case errors.Is(cause, errShedSilent):
		return nil, status.Error(codes.Unavailable, "tollgate: draining; the stream sent no message")
	}
	return m, err
}

// streamLoop runs one stream's exchange. The stream goroutine receives
// Envoy's messages; notices, the deadline and the dispatcher's end arrive
// on other goroutines. mu serializes them all: it guards the exchange, the
// stream's Send and the loop's end.
type streamLoop struct {
	s      *Server
	stream extprocv3.ExternalProcessor_ProcessServer
	ctx    context.Context
	// cancel ends the stream's context (tapStream); nil on a server built
	// without ServerOptions.
	cancel context.CancelCauseFunc

	mu sync.Mutex
	x  *exchange
	// over is set once the exchange ended; result is then what Process
	// returns.
	over   bool
	result error
	// timer fires at the exchange's deadline; made at the first one.
	timer *time.Timer
	// unwatch stops watching for the dispatcher's end; set once the
	// request was submitted.
	unwatch func() bool
	// closeWait resets a stream that Envoy does not close after an answer
	// sent off the stream goroutine; see answeredCloseWait.
	closeWait *time.Timer

	// notices holds the dispatcher's notices in order until a sender
	// takes them; delivering is set while a sender runs, or while the
	// stream goroutine handles a message and will send them itself (see
	// claim). nmu guards these and is never held across a Send, so the
	// dispatcher never waits on a stream.
	nmu        sync.Mutex
	notices    [noticeCap]notice
	pending    int
	delivering bool
}

// run handles m and every later message until the exchange ends.
func (l *streamLoop) run(m *extprocv3.ProcessingRequest) error {
	for {
		l.mu.Lock()
		if !l.over {
			own := l.claim()
			l.send(l.x.message(time.Now(), m), false)
			if own {
				l.drain(false)
			}
			l.watch()
		}
		over, result := l.over, l.result
		l.mu.Unlock()
		if over {
			return result
		}
		var err error
		if m, err = l.stream.Recv(); err != nil {
			return l.fail(err)
		}
	}
}

// fail ends the exchange with err, unless it is over already, and returns
// what Process returns.
func (l *streamLoop) fail(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.over {
		l.finish(err, false)
	}
	return l.result
}

// apply carries out a step that comes off the stream goroutine (the
// exchange's deadline, the dispatcher's end), then watches what the
// exchange still waits for. l.mu is held.
func (l *streamLoop) apply(st step) {
	l.send(st, true)
	l.watch()
}

// send sends a step's messages and ends the exchange when the step says
// so. async is set off the stream goroutine, whose Recv must then be
// ended with the exchange. l.mu is held.
func (l *streamLoop) send(st step, async bool) {
	for _, m := range st.send {
		if err := l.stream.Send(m); err != nil {
			if l.ctx.Err() != nil { // the stream ended: say how
				err = status.FromContextError(l.ctx.Err()).Err()
			}
			l.finish(err, async)
			return
		}
	}
	if st.end {
		l.finish(st.err, async)
	}
}

// watch sets the timer to the exchange's deadline and, while its request
// waits for the scheduler, watches for the dispatcher's end. It runs once
// a batch of steps is sent, so that a submit decided at once sets up
// neither. l.mu is held.
func (l *streamLoop) watch() {
	if l.over {
		return
	}
	l.arm()
	if l.unwatch == nil && l.x.waiting() {
		l.unwatch = context.AfterFunc(l.s.disp.halted, l.shutdown)
	}
}

// finish ends the exchange with err. Off the stream goroutine (async),
// that goroutine still waits in Recv: Envoy ends it by closing the stream
// once it has the final answer, and the stream is reset if Envoy has not
// within answeredCloseWait. Resetting it at once would count as a failed
// stream at Envoy. l.mu is held.
func (l *streamLoop) finish(err error, async bool) {
	l.result = l.end(err)
	l.over = true
	l.release()
	if async && l.cancel != nil {
		l.closeWait = time.AfterFunc(answeredCloseWait, func() { l.cancel(errAnswered) })
	}
}

// release stops the loop's timer and its watch on the dispatcher. l.mu is
// held.
func (l *streamLoop) release() {
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.unwatch != nil {
		l.unwatch()
	}
}

// stop ends the loop when Process returns: a notice or a deadline that
// comes later finds it over. Nothing may Send once Process has returned.
func (l *streamLoop) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.over {
		l.over = true
		l.release()
	}
	if l.closeWait != nil {
		l.closeWait.Stop()
	}
}

// arm sets the timer to the exchange's deadline, or stops it. l.mu is held.
func (l *streamLoop) arm() {
	at, ok := l.x.deadline()
	switch {
	case ok && l.timer == nil:
		l.timer = time.AfterFunc(max(0, time.Until(at)), l.expire)
	case ok:
		l.timer.Reset(max(0, time.Until(at)))
	case l.timer != nil:
		l.timer.Stop()
	}
}

// expire acts at the exchange's deadline, on the timer's goroutine.
func (l *streamLoop) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.over {
		return
	}
	now := time.Now()
	if at, ok := l.x.deadline(); !ok || now.Before(at) {
		l.arm() // moved since the timer was set
		return
	}
	l.apply(l.x.onExpire(now))
}

// shutdown answers a waiting request when the dispatcher has stopped.
func (l *streamLoop) shutdown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.over {
		l.apply(l.x.onShutdown(time.Now()))
	}
}

// put takes a notice from the dispatcher and starts a sender unless one
// runs. It never waits on the stream. A request gets at most one notice
// of each kind, so the box never fills; false reports a full one.
func (l *streamLoop) put(n notice) bool {
	l.nmu.Lock()
	if l.pending == len(l.notices) {
		l.nmu.Unlock()
		return false
	}
	l.notices[l.pending] = n
	l.pending++
	start := !l.delivering
	l.delivering = true
	l.nmu.Unlock()
	if start {
		l.s.senders.Go(l.deliver)
	}
	return true
}

// claim makes the stream goroutine the sender for the message it is about
// to handle, unless a sender runs: the notices that handling brings (the
// scheduler decides a submit at once, under the dispatcher's lock) are
// then sent on the stream goroutine, with no hand-off. l.mu is held.
func (l *streamLoop) claim() bool {
	l.nmu.Lock()
	defer l.nmu.Unlock()
	if l.delivering {
		return false
	}
	l.delivering = true
	return true
}

// deliver applies the notices in order until none is left: the sender.
func (l *streamLoop) deliver() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.drain(true)
	l.watch()
}

// drain sends the steps of the notices in order until none is left and
// ends the sender's turn; the caller watches afterwards. l.mu is held.
func (l *streamLoop) drain(async bool) {
	for {
		n, more, ok := l.take()
		if !ok {
			return
		}
		if !l.over {
			l.send(l.x.onNotice(time.Now(), n, more), async)
		}
	}
}

// take removes the first notice; more reports another behind it. When
// none is left it ends the sender's turn.
func (l *streamLoop) take() (n notice, more, ok bool) {
	l.nmu.Lock()
	defer l.nmu.Unlock()
	if l.pending == 0 {
		l.delivering = false
		return notice{}, false, false
	}
	n = l.notices[0]
	copy(l.notices[:], l.notices[1:l.pending])
	l.pending--
	return n, l.pending > 0, true
}

// end closes the exchange and returns what Process returns, whatever ended
// the stream: nil after a final answer; a half-close (io.EOF), a reset
// (Canceled) or a client that left (errClientGone) is Envoy's normal way
// to end a stream. Any other error (a protocol error, a failed Send, a
// message over the receive limit, which gRPC answers with
// ResourceExhausted itself) ends the stream with that error: Envoy fails
// the request closed with its status_on_error.
func (l *streamLoop) end(err error) error {
	now := time.Now()
	if errors.Is(err, io.EOF) || errors.Is(err, errClientGone) || status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
		l.x.close(now, errClientGone)
		return nil
	}
	l.x.close(now, err) // logged, rate-limited, by streamEnds
	return err
}
