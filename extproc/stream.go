package extproc

import (
	"context"
	"errors"
	"io"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/tollgate/tollgate/sched"
)

// processMethod is the full gRPC method name of the ext_proc stream.
const processMethod = "/" + ServiceName + "/Process"

// streamCancelKey is the context key of a stream's cancel function.
type streamCancelKey struct{}

// tapStream gives each ext_proc stream a context the server can cancel
// itself. gRPC's Recv waits on this context, so cancelling it is the one
// way to end a Recv that waits for a first message that never comes,
// without a goroutine per stream.
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
)

// streamEnv connects an exchange to the dispatcher.
type streamEnv struct {
	s   *Server
	ctx context.Context
	// box receives the dispatcher's notices; made at submit.
	box chan notice
}

func (e *streamEnv) submit(r *sched.Request, sub *subset) error {
	e.box = make(chan notice, noticeCap)
	return e.s.disp.send(e.ctx, event{kind: evSubmit, id: r.ID, req: *r, subset: sub, box: e.box, at: time.Now()})
}

func (e *streamEnv) route(model string, sub *subset) (target, bool, error) {
	r, err := e.s.disp.call(e.ctx, event{kind: evRoute, model: model, subset: sub})
	return r.target, r.ok, err
}

// release and firstToken are not bound to the stream's context: a
// cancelled stream must still release what it booked. They give up only
// when the dispatcher has stopped.
func (e *streamEnv) release(id uint64) {
	_ = e.s.disp.send(context.Background(), event{kind: evRelease, id: id})
}

func (e *streamEnv) firstToken(id uint64) {
	_ = e.s.disp.send(context.Background(), event{kind: evFirstToken, id: id})
}

func (e *streamEnv) served(id uint64, worker string, rank uint32) {
	_ = e.s.disp.send(context.Background(), event{kind: evServed, id: id, worker: worker, rank: rank})
}

func (e *streamEnv) routed(now time.Time, worker string, pl *plan) {
	e.s.planner.prefix.record(now, worker, pl.hashes, pl.exact)
}

// received is one Recv result, from a reader goroutine.
type received struct {
	m   *extprocv3.ProcessingRequest
	err error
}

// Process serves one ext_proc stream: one HTTP request. The stream
// goroutine receives Envoy's messages itself. While the request waits for
// the scheduler it receives nothing and waits on its notices, the stream's
// context (Envoy resets the stream when the client goes away), the
// dispatcher's end and, when there is a deadline, one timer. Only an
// admitted request that can still be preempted starts a reader goroutine,
// so that a preemption reaches it while it waits for the response.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) (err error) {
	n := s.streamOpened()
	defer s.streamClosed()
	id := s.ids.Add(1)
	defer func() { s.ends.ended(id, err) }()
	if n > int64(s.cfg.MaxConcurrentStreams) {
		return status.Errorf(codes.ResourceExhausted, "tollgate: more than %d concurrent ext_proc streams", s.cfg.MaxConcurrentStreams)
	}
	env := &streamEnv{s: s, ctx: stream.Context()}
	l := &streamLoop{s: s, stream: stream, ctx: env.ctx, env: env, x: newExchange(s.planner, env, s.log, id)}
	defer l.stop()
	m, err := s.firstMessage(l.ctx, stream)
	if err != nil {
		return l.end(err)
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

// streamLoop runs one stream's exchange.
type streamLoop struct {
	s      *Server
	stream extprocv3.ExternalProcessor_ProcessServer
	ctx    context.Context
	env    *streamEnv
	x      *exchange
	// timer is made at the first deadline.
	timer *time.Timer
	// in and done connect the reader goroutine, started only for a
	// request that can still be preempted; in is nil without one.
	in   chan received
	done chan struct{}
}

// run handles m and every later input until the exchange ends.
func (l *streamLoop) run(m *extprocv3.ProcessingRequest) error {
	st := l.x.message(time.Now(), m)
	for {
		for _, m := range st.send {
			if err := l.stream.Send(m); err != nil {
				if l.ctx.Err() != nil { // the stream ended: say how
					err = status.FromContextError(l.ctx.Err()).Err()
				}
				return l.end(err)
			}
		}
		if st.end {
			return l.end(st.err)
		}
		if l.in == nil && l.x.preemptible() {
			l.startReader()
		}
		var err error
		if st, err = l.next(); err != nil {
			return l.end(err)
		}
	}
}

// next waits for the exchange's next input and handles it. An error is a
// Recv error or the end of the stream's context.
func (l *streamLoop) next() (step, error) {
	x := l.x
	var box chan notice
	if l.env.box != nil {
		box = l.env.box
		select { // a notice that is already there comes first
		case n := <-box:
			return x.onNotice(time.Now(), n, len(box) > 0), nil
		default:
		}
	}
	waiting := x.waiting()
	if !waiting && l.in == nil {
		m, err := l.stream.Recv()
		if err != nil {
			return step{}, err
		}
		return x.message(time.Now(), m), nil
	}
	var expired <-chan time.Time
	if at, ok := x.deadline(); ok {
		expired = l.arm(at)
	}
	var stopped <-chan struct{}
	if waiting {
		stopped = l.s.disp.stopped
	}
	select {
	case r := <-l.in: // nil while waiting without a reader
		if r.err != nil {
			return step{}, r.err
		}
		return x.message(time.Now(), r.m), nil
	case n := <-box:
		return x.onNotice(time.Now(), n, len(box) > 0), nil
	case <-expired:
		return x.onExpire(time.Now()), nil
	case <-stopped:
		return x.onShutdown(time.Now()), nil
	case <-l.ctx.Done():
		if l.in != nil {
			// gRPC also cancels the stream when it refuses a message
			// (oversized, undecodable); the reader then holds that error.
			return step{}, lastRecvErr(l.in)
		}
		return step{}, status.FromContextError(l.ctx.Err()).Err()
	}
}

// arm sets the stream's one timer to fire at at.
func (l *streamLoop) arm(at time.Time) <-chan time.Time {
	d := max(0, time.Until(at))
	if l.timer == nil {
		l.timer = time.NewTimer(d)
	} else {
		l.timer.Reset(d)
	}
	return l.timer.C
}

// startReader turns Recv into a channel for the rest of the stream, so
// that the loop also sees preemption and the held response's deadline.
func (l *streamLoop) startReader() {
	l.in, l.done = make(chan received), make(chan struct{})
	in, done := l.in, l.done
	l.s.readers.Go(func() {
		for {
			m, err := l.stream.Recv()
			select {
			case in <- received{m, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	})
}

// stop releases the loop's timer and reader.
func (l *streamLoop) stop() {
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.done != nil {
		close(l.done)
	}
}

// lastRecvErr returns the error that ends the reader's Recv loop, skipping
// messages still in flight. Once the stream's context is done Recv returns
// at once, so this does not block for long.
func lastRecvErr(in <-chan received) error {
	for r := range in {
		if r.err != nil {
			return r.err
		}
	}
	return io.EOF
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
