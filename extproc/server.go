package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/sched"
)

// ServiceName is the gRPC service name of the ext_proc API, also a health
// service name.
const ServiceName = "envoy.service.ext_proc.v3.ExternalProcessor"

// Server is tollgate's ext_proc server: one Process stream per HTTP
// request, one dispatcher goroutine (Run) owning the scheduler, metrics and
// health. Its methods are safe for concurrent use.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	cfg     Config
	log     *slog.Logger
	metrics *metrics
	planner *planner
	disp    *dispatcher
	health  *health.Server

	ids      atomic.Uint64
	active   atomic.Int64 // open Process streams
	draining atomic.Bool
	// standby is set while another replica holds the leader lease.
	standby atomic.Bool
	ready   atomic.Bool
	// workerCount and leaderAcquisitions feed stateCollector.
	workerCount        atomic.Int64
	leaderAcquisitions atomic.Uint64
	// readers tracks the Recv goroutines, which outlive their handler by
	// the moment gRPC takes to cancel the stream.
	readers sync.WaitGroup

	// runMu guards started: before Run, worker changes apply directly.
	runMu   sync.Mutex
	started bool
	// workersMu serializes worker set changes and guards workerIDs.
	workersMu sync.Mutex
	workerIDs map[string]struct{}
}

// New builds a Server over an initial worker set. It fails on an invalid
// Config or worker set, and when the SMG reservations exceed the capacity
// of that set.
func New(cfg Config, workers []Worker) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ws, err := newWorkerSet(workers)
	if err != nil {
		return nil, fmt.Errorf("extproc: %w", err)
	}
	sc := cfg.Sched
	if sc.Start.IsZero() {
		sc.Start = cfg.Now()
	}
	sch, err := sched.New(sc, ws.sched)
	if err != nil {
		return nil, err
	}
	return newServer(cfg, ws, sch)
}

// newServer wires a Server around any scheduler; cfg has its defaults.
func newServer(cfg Config, ws *workerSet, sch scheduler) (*Server, error) {
	s := &Server{cfg: cfg, log: cfg.Logger, health: health.NewServer(), workerIDs: make(map[string]struct{})}
	s.metrics = newMetrics(cfg.TenantMetricTopN, s.stats)
	s.metrics.reg.MustRegister(newStateCollector(s))
	tok := cfg.Tokenizer
	if tok == nil {
		var err error
		if tok, err = defaultTokenizer(); err != nil {
			return nil, err
		}
	}
	p, err := newPlanner(&s.cfg, tok, s.metrics)
	if err != nil {
		return nil, fmt.Errorf("extproc: %w", err)
	}
	s.planner = p
	s.disp = newDispatcher(sch, ws, cfg.Now, s.log, func(d time.Duration) { s.metrics.decisionLatency.Observe(d.Seconds()) })
	s.noteWorkers(ws)
	return s, nil
}

// Register registers the ext_proc service and gRPC health (the overall
// service "" and ServiceName) on g.
func (s *Server) Register(g *grpc.Server) {
	extprocv3.RegisterExternalProcessorServer(g, s)
	healthgrpc.RegisterHealthServer(g, s.health)
}

// Run runs the dispatcher until ctx ends. Streams are answered only while
// it runs; call it exactly once.
func (s *Server) Run(ctx context.Context) error {
	s.runMu.Lock()
	if s.started {
		s.runMu.Unlock()
		return errors.New("extproc: Run called twice")
	}
	s.started = true
	s.runMu.Unlock()
	// A SetActive before Run only recorded the flag; the dispatcher starts
	// from it (a later SetActive reaches the dispatcher as an event).
	s.disp.standby = s.standby.Load()
	s.log.Info("dispatcher started")
	s.disp.run(ctx)
	s.log.Info("dispatcher stopped")
	return nil
}

// running reports whether Run was called.
func (s *Server) running() bool {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	return s.started
}

// SetWorkers validates ws and swaps it in atomically: the scheduler's
// capacity and reservations follow it, queued requests pinned to a removed
// worker are answered 503, in-flight requests on removed workers keep
// their booking until they end, and the prefix index forgets removed
// workers. On error the current set stays. Discovery sources (the workers
// file, Kubernetes) all come through here.
func (s *Server) SetWorkers(ws []Worker) error {
	set, err := newWorkerSet(ws)
	if err != nil {
		return fmt.Errorf("extproc: %w", err)
	}
	s.workersMu.Lock()
	defer s.workersMu.Unlock()
	s.runMu.Lock()
	if !s.started {
		d := s.disp
		d.workers = set
		d.deliver(d.sch.SetWorkers(s.cfg.Now(), set.sched))
		s.runMu.Unlock()
	} else {
		s.runMu.Unlock()
		if _, err := s.disp.call(context.Background(), event{kind: evWorkers, workers: set}); err != nil {
			return err
		}
	}
	s.noteWorkers(set)
	s.log.Info("worker set applied", "workers", len(set.sched))
	return nil
}

// noteWorkers updates readiness and the prefix index after a swap.
// s.workersMu is held (or s is being built).
func (s *Server) noteWorkers(set *workerSet) {
	for id := range s.workerIDs {
		if _, ok := set.byID[id]; !ok {
			s.planner.prefix.removeWorker(id)
			delete(s.workerIDs, id)
		}
	}
	for id := range set.byID {
		s.workerIDs[id] = struct{}{}
	}
	s.ready.Store(len(set.byID) > 0)
	s.workerCount.Store(int64(len(set.byID)))
	s.updateHealth()
}

// Ready reports whether the server has workers, leads (or runs without
// leader election) and is not draining.
func (s *Server) Ready() bool { return s.ready.Load() && !s.draining.Load() && !s.standby.Load() }

// SetActive switches the server between leading (true, the initial state)
// and standing by (false) for leader election. A standby reports NOT_SERVING
// on gRPC health and 503 on /readyz at once, answers every queued request
// 503 with Retry-After, and answers new requests the same way; its worker
// view stays current, so it can take over as soon as it is made active
// again. Requests already dispatched finish normally.
func (s *Server) SetActive(ctx context.Context, active bool) error {
	if wasStandby := s.standby.Swap(!active); wasStandby && active {
		s.leaderAcquisitions.Add(1)
	}
	s.updateHealth()
	s.log.Info("leadership changed", "active", active)
	if !s.running() {
		return nil
	}
	if _, err := s.disp.call(ctx, event{kind: evActive, active: active}); err != nil && !errors.Is(err, errStopped) {
		return err
	}
	return nil
}

func (s *Server) updateHealth() {
	st := healthgrpc.HealthCheckResponse_NOT_SERVING
	if s.Ready() {
		st = healthgrpc.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(ServiceName, st)
}

// Drain shuts the server down gracefully: it marks the server not ready
// (gRPC health NOT_SERVING, /readyz 503), waits DrainDelay so Envoy and
// Kubernetes stop sending new requests, answers every queued request 503
// with Retry-After (and every later arrival too), then waits until the
// in-flight streams have ended, at most ShutdownTimeout. It returns an
// error when streams are still open then or ctx ends first. The caller
// then stops the gRPC server and cancels Run's context.
func (s *Server) Drain(ctx context.Context) error {
	s.draining.Store(true)
	s.updateHealth()
	s.log.Info("draining", "delay", s.cfg.DrainDelay, "open_streams", s.active.Load())
	if err := sleepCtx(ctx, s.cfg.DrainDelay); err != nil {
		return err
	}
	if s.running() {
		if _, err := s.disp.call(ctx, event{kind: evDrain}); err != nil && !errors.Is(err, errStopped) {
			return err
		}
	}
	deadline := time.NewTimer(s.cfg.ShutdownTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for s.active.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("extproc: %d streams still open after the shutdown timeout of %v", s.active.Load(), s.cfg.ShutdownTimeout)
		case <-tick.C:
		}
	}
	s.log.Info("drained")
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Wait blocks until every stream reader goroutine has exited. Call it after
// the gRPC server has stopped.
func (s *Server) Wait() { s.readers.Wait() }

// MetricsHandler serves /metrics (this server's registry), /healthz (the
// process is alive) and /readyz (workers loaded and not draining).
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelError)}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case s.draining.Load():
			http.Error(w, "draining", http.StatusServiceUnavailable)
		case s.standby.Load():
			http.Error(w, "standby: another replica leads", http.StatusServiceUnavailable)
		case !s.ready.Load():
			http.Error(w, "no workers", http.StatusServiceUnavailable)
		default:
			_, _ = io.WriteString(w, "ready\n")
		}
	})
	return mux
}

// stats fetches a scheduler snapshot from the dispatcher. Called before
// Run, it waits for Run to start, at most until ctx ends.
func (s *Server) stats(ctx context.Context) (sched.Stats, bool) {
	r, err := s.disp.call(ctx, event{kind: evStats})
	if err != nil {
		return sched.Stats{}, false
	}
	return r.stats, true
}

// Stats returns a scheduler snapshot. It waits for Run to serve, at most
// until ctx ends; ok is false when ctx ended first or Run has stopped.
func (s *Server) Stats(ctx context.Context) (sched.Stats, bool) { return s.stats(ctx) }

// streamEnv connects an exchange to the dispatcher.
type streamEnv struct {
	s   *Server
	tk  *ticket
	ctx context.Context
}

func (e *streamEnv) submit(r *sched.Request) error {
	return e.s.disp.send(e.ctx, event{kind: evSubmit, id: r.ID, req: *r, tk: e.tk, at: e.s.cfg.Now()})
}

func (e *streamEnv) route(model string) (target, bool, error) {
	r, err := e.s.disp.call(e.ctx, event{kind: evRoute, model: model})
	return r.target, r.ok, err
}

func (e *streamEnv) notify(kind eventKind, id uint64) { e.s.disp.notify(kind, id) }

type received struct {
	m   *extprocv3.ProcessingRequest
	err error
}

// Process serves one ext_proc stream: one HTTP request. The stream
// goroutine runs the exchange; a reader goroutine turns Recv into a
// channel so the loop also sees the scheduler's ticket, the hold deadline,
// the stream's end and the dispatcher's.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	s.active.Add(1)
	defer s.active.Add(-1)
	ctx := stream.Context()
	id := s.ids.Add(1)
	tk := newTicket(id)
	x := newExchange(s.planner, &streamEnv{s: s, tk: tk, ctx: ctx}, s.log, id)

	in := make(chan received)
	done := make(chan struct{})
	defer close(done)
	s.readers.Go(func() {
		for {
			m, err := stream.Recv()
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

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if at, ok := x.deadline(); ok {
			timer.Reset(max(0, at.Sub(s.cfg.Now())))
		} else {
			timer.Stop()
		}
		var stopped <-chan struct{}
		if x.waiting() {
			stopped = s.disp.stopped
		}
		var st step
		select {
		case r := <-in:
			if r.err != nil {
				return s.endStream(x, r.err)
			}
			st = x.message(s.cfg.Now(), r.m)
		case <-tk.wake:
			st = x.onTicket(s.cfg.Now(), tk.load())
		case <-timer.C:
			st = x.onExpire(s.cfg.Now())
		case <-stopped:
			st = x.onShutdown(s.cfg.Now())
		case <-ctx.Done():
			x.close(s.cfg.Now(), errClientGone)
			return nil
		}
		for _, m := range st.send {
			if err := stream.Send(m); err != nil {
				x.close(s.cfg.Now(), err)
				return nil
			}
		}
		if st.end {
			x.close(s.cfg.Now(), st.err)
			return st.err
		}
	}
}

// endStream handles a Recv error. A half-close (io.EOF) or a reset
// (Canceled) is Envoy's normal way to end a stream. Any other error (for
// example a message over the receive limit, which gRPC answers with
// ResourceExhausted itself) ends the stream with that error: Envoy fails the
// request closed with its status_on_error.
func (s *Server) endStream(x *exchange, err error) error {
	now := s.cfg.Now()
	if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
		x.close(now, errClientGone)
		return nil
	}
	s.log.Warn("ext_proc stream failed", "request", x.id, "error", err)
	x.close(now, err)
	return err
}
