package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
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

	"github.com/tollgate/tollgate/extproc/enginemetrics"
	"github.com/tollgate/tollgate/sched"
)

// ServiceName is the gRPC service name of the ext_proc API, also a health
// service name.
const ServiceName = "envoy.service.ext_proc.v3.ExternalProcessor"

// gRPC health service names the endpoint picker charts of the Gateway API
// Inference Extension and llm-d probe, beside "" and ServiceName.
const (
	// HealthLiveness is SERVING while the process answers: a standby,
	// draining or worker-less replica is alive and must not be restarted.
	HealthLiveness = "liveness"
	// HealthReadiness, like "" and ServiceName, is SERVING only while the
	// server is Ready: workers known, leading, not draining.
	HealthReadiness = "readiness"
	// HealthInferenceExtension is the lightweight picker's name for the
	// same readiness.
	HealthInferenceExtension = "inference-extension"
)

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
	ends    *streamEnds

	ids      atomic.Uint64
	active   atomic.Int64 // open Process streams
	draining atomic.Bool
	// shed is closed when Drain sheds the queue: streams that have not
	// sent their first message end then.
	shed     chan struct{}
	shedOnce sync.Once
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
	// scraper reads the engines' metrics; nil when off. runCtx is Run's
	// context, which bounds a round's hand-over.
	scraper *enginemetrics.Scraper
	runCtx  atomic.Pointer[context.Context]
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
	s := &Server{cfg: cfg, log: cfg.Logger, health: health.NewServer(), workerIDs: make(map[string]struct{}), shed: make(chan struct{})}
	s.metrics = newMetrics(cfg.TenantMetricTopN, s.stats)
	s.ends = newStreamEnds(s.metrics.reg, s.log, cfg.Now)
	if cfg.KVEvents != nil {
		s.metrics.reg.MustRegister(cfg.KVEvents.Collectors()...)
	}
	s.metrics.reg.MustRegister(newStateCollector(s))
	s.metrics.reg.MustRegister(newObjectiveCollector(s))
	s.metrics.reg.MustRegister(newRewriteCollector(s))
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
	if cfg.EngineMetrics != nil {
		ec := *cfg.EngineMetrics
		if ec.Now == nil {
			ec.Now = cfg.Now
		}
		s.scraper = enginemetrics.New(ec, s.reportEngines)
		s.metrics.reg.MustRegister(s.scraper)
	}
	s.noteWorkers(ws)
	return s, nil
}

// Register registers the ext_proc service and gRPC health on g: the
// overall service "", ServiceName, HealthReadiness and
// HealthInferenceExtension report readiness, HealthLiveness that the
// process answers; any other name is NOT_FOUND.
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
	var wg sync.WaitGroup
	if s.scraper != nil {
		sctx, stop := context.WithCancel(ctx)
		defer func() { stop(); wg.Wait() }()
		s.runCtx.Store(&sctx)
		wg.Go(func() { s.scraper.Run(sctx) })
	}
	s.disp.run(ctx)
	s.log.Info("dispatcher stopped")
	return nil
}

// reportEngines hands one scrape round to the dispatcher. Failures are
// logged at debug level; they are counted by the scraper's metrics.
func (s *Server) reportEngines(r enginemetrics.Round) {
	for _, res := range r.Results {
		if res.Err != nil {
			s.log.Debug("engine metrics scrape failed", "worker", res.Worker, "reason", string(res.Reason), "error", res.Err)
		}
	}
	ctx := context.Background()
	if p := s.runCtx.Load(); p != nil {
		ctx = *p
	}
	_ = s.disp.send(ctx, event{kind: evEngine, loads: r.Loads})
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
	if s.scraper != nil {
		s.scraper.SetTargets(set.targets)
	}
	s.metrics.setNamedModels(slices.Collect(maps.Keys(s.cfg.Sched.Policy.Models)), set.sched)
	if s.cfg.KVEvents != nil {
		s.cfg.KVEvents.SetWorkers(set.kv)
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
	for _, name := range []string{"", ServiceName, HealthReadiness, HealthInferenceExtension} {
		s.health.SetServingStatus(name, st)
	}
	s.health.SetServingStatus(HealthLiveness, healthgrpc.HealthCheckResponse_SERVING)
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
	s.shedOnce.Do(func() { close(s.shed) })
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

func (e *streamEnv) submit(r *sched.Request, sub *subset) error {
	return e.s.disp.send(e.ctx, event{kind: evSubmit, id: r.ID, req: *r, subset: sub, tk: e.tk, at: e.s.cfg.Now()})
}

func (e *streamEnv) route(model string, sub *subset) (target, bool, error) {
	r, err := e.s.disp.call(e.ctx, event{kind: evRoute, model: model, subset: sub})
	return r.target, r.ok, err
}

func (e *streamEnv) notify(kind eventKind, id uint64) { e.s.disp.notify(kind, id) }

func (e *streamEnv) served(id uint64, worker string, rank uint32) {
	_ = e.s.disp.send(context.Background(), event{kind: evServed, id: id, worker: worker, rank: rank})
}

type received struct {
	m   *extprocv3.ProcessingRequest
	err error
}

// Process serves one ext_proc stream: one HTTP request. The stream
// goroutine runs the exchange; a reader goroutine turns Recv into a
// channel so the loop also sees the scheduler's ticket, the hold deadline,
// the stream's end and the dispatcher's.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) (err error) {
	n := s.active.Add(1)
	defer s.active.Add(-1)
	ctx := stream.Context()
	id := s.ids.Add(1)
	defer func() { s.ends.ended(id, err) }()
	if n > int64(s.cfg.MaxConcurrentStreams) {
		return status.Errorf(codes.ResourceExhausted, "tollgate: more than %d concurrent ext_proc streams", s.cfg.MaxConcurrentStreams)
	}
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
	next, ended, err := s.firstMessage(ctx, x, in)
	if ended {
		return err
	}
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
		if next != nil {
			st, next = x.message(s.cfg.Now(), next), nil
		} else {
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
				// gRPC also cancels the stream when it refuses a message
				// (oversized, undecodable); the reader then holds that error.
				return s.endStream(x, lastRecvErr(in))
			}
		}
		for _, m := range st.send {
			if err := stream.Send(m); err != nil {
				if ctx.Err() != nil {
					// The stream is done; the reader holds why.
					return s.endStream(x, lastRecvErr(in))
				}
				x.close(s.cfg.Now(), err)
				return err
			}
		}
		if st.end {
			x.close(s.cfg.Now(), st.err)
			return st.err
		}
	}
}

// firstMessage waits for a stream's first message, at most
// FirstMessageTimeout; a stream that was open when Drain shed the queue and
// has sent nothing ends then. When ended is set the stream is over and err
// is what Process returns.
func (s *Server) firstMessage(ctx context.Context, x *exchange, in <-chan received) (m *extprocv3.ProcessingRequest, ended bool, err error) {
	first := time.NewTimer(s.cfg.FirstMessageTimeout)
	defer first.Stop()
	shed := s.shed
	select {
	case <-shed:
		shed = nil // opened after the shedding: new arrivals get their answer
	default:
	}
	var r received
	select {
	case r = <-in:
	case <-first.C:
		x.close(s.cfg.Now(), errClientGone)
		return nil, true, status.Errorf(codes.DeadlineExceeded, "tollgate: no message within %v of opening the stream", s.cfg.FirstMessageTimeout)
	case <-shed:
		select {
		case r = <-in: // it raced the shedding
		default:
			x.close(s.cfg.Now(), errClientGone)
			return nil, true, status.Error(codes.Unavailable, "tollgate: draining; the stream sent no message")
		}
	case <-ctx.Done():
		return nil, true, s.endStream(x, lastRecvErr(in))
	}
	if r.err != nil {
		return nil, true, s.endStream(x, r.err)
	}
	return r.m, false, nil
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
	x.close(now, err) // logged, rate-limited, by streamEnds
	return err
}
