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
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate/tollgate/extproc/engine/enginemetrics"
	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/intake"
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
// request, one dispatcher owning the scheduler, metrics and health. Its
// methods are safe for concurrent use.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	cfg     Config
	log     *slog.Logger
	metrics *metrics
	deps    *exchangeDeps
	cache   *intake.CacheView
	disp    *dispatcher
	health  *health.Server
	ends    *streamEnds

	ids    atomic.Uint64
	active atomic.Int64 // open Process streams
	// idle is signalled when the last open stream ends; Drain waits on it.
	idle chan struct{}
	// shed ends when Drain sheds the queue: streams that have not sent
	// their first message end then.
	shed     context.Context
	shedNow  context.CancelFunc
	warnOnce sync.Once
	// kvOffOnce logs, once, a worker set that names KV-event endpoints
	// while KV events are off.
	kvOffOnce sync.Once
	// senders are the goroutines that hand the dispatcher's notices to
	// streams; one may outlive its stream's handler by a moment.
	senders *senderPool

	// started: Run runs once.
	started atomic.Bool
	// fleet applies every worker set; current is the set in force, for
	// the streams of replica mode.
	fleet   *fleet.Applier
	current atomic.Pointer[fleet.Set]
	// kv is the KV-event manager, nil without KV events (WithKVEvents).
	kv *kvevents.Manager
	// scraper reads the engines' metrics; nil when off. runCtx is Run's
	// context, which bounds a round's hand-over.
	scraper *enginemetrics.Scraper
	runCtx  atomic.Pointer[context.Context]

	// In replica mode (Config.Replica): the relay carries the streams'
	// scheduling events, the desk serves other fronts while this replica
	// is the scheduler; all nil otherwise.
	relay   *relay
	desk    *peerDesk
	replica *replicaMetrics
}

// Option adds a component to a Server.
type Option func(*Server)

// WithKVEvents prices and routes with the engines' own KV-cache events
// wherever a worker's stream is in sync, and with the approximate index
// elsewhere. The server hands m every worker set and registers its
// metrics; m's owner runs it (New, then Run). Its block size must be the
// scheduler's.
func WithKVEvents(m *kvevents.Manager) Option { return func(s *Server) { s.kv = m } }

// New builds a Server over an initial worker set. It fails on an invalid
// Config or worker set, and when the SMG reservations exceed the capacity
// of that set.
func New(cfg Config, workers []fleet.Worker, opts ...Option) (*Server, error) {
	cfg, ws, sch, err := prepare(cfg, workers)
	if err != nil {
		return nil, err
	}
	return newServer(cfg, ws, sch, opts...)
}

// prepare is New's first half: cfg with its defaults, the worker set and
// the scheduling core over it.
func prepare(cfg Config, workers []fleet.Worker) (c Config, ws *fleet.Set, sch *sched.Scheduler, err error) {
	if err = cfg.Validate(); err != nil {
		return c, nil, nil, err
	}
	c = cfg.withDefaults()
	if ws, err = fleet.NewSet(workers); err != nil {
		return c, nil, nil, fmt.Errorf("extproc: %w", err)
	}
	sc := c.Sched
	if sc.Start.IsZero() {
		sc.Start = time.Now()
	}
	sch, err = sched.New(sc, ws.Sched)
	return c, ws, sch, err
}

// newServer wires a Server around any scheduler; cfg has its defaults.
func newServer(cfg Config, ws *fleet.Set, sch scheduler, opts ...Option) (*Server, error) {
	s := &Server{cfg: cfg, log: cfg.Logger, health: health.NewServer(), idle: make(chan struct{}, 1), senders: newSenderPool()}
	for _, o := range opts {
		o(s)
	}
	s.shed, s.shedNow = context.WithCancel(context.Background())
	s.metrics = newMetrics(cfg.TenantMetricTopN, s.Stats)
	s.ends = newStreamEnds(s.metrics.reg, s.log, time.Now)
	s.metrics.reg.MustRegister(newStateCollector(s))
	s.metrics.reg.MustRegister(newBuildInfoGauge(cfg.Build))
	var exact *kvevents.Index
	if s.kv != nil {
		s.metrics.reg.MustRegister(s.kv.Collectors()...)
		exact = s.kv.Index()
	}
	s.cache = intake.NewCacheView(intake.CacheConfig{RouterTTL: cfg.RouterTTL, MaxEntries: cfg.PrefixMaxEntries, SpeculativeTTL: cfg.SpeculativeTTL, Exact: exact})
	s.metrics.reg.MustRegister(s.cache.Collectors()...)
	d, err := newExchangeDeps(&s.cfg, s.cache, s.metrics)
	if err != nil {
		return nil, fmt.Errorf("extproc: %w", err)
	}
	s.deps = d
	s.disp = newDispatcher(sch, ws, s.log, dispatcherHooks{
		submitted: func(d time.Duration) { s.metrics.decisionLatency.Observe(d.Seconds()) },
		waited:    s.metrics.observeWait,
		serving:   s.updateHealth,
	})
	if cfg.EngineMetrics != nil {
		ec := *cfg.EngineMetrics
		s.scraper = enginemetrics.New(ec, s.reportEngines)
		s.metrics.reg.MustRegister(s.scraper)
	}
	s.fleet = fleet.NewApplier(ws, s.commitWorkers, s.workerConsumers()...)
	if cfg.Replica != nil {
		s.replicaMode(cfg.Replica)
	}
	return s, nil
}

// Register registers the ext_proc service and gRPC health on g: the
// overall service "", ServiceName, HealthReadiness and
// HealthInferenceExtension report readiness, HealthLiveness that the
// process answers; any other name is NOT_FOUND. Build g with
// ServerOptions: without them, a stream that never sends a message is
// not bounded.
func (s *Server) Register(g *grpc.Server) {
	extprocv3.RegisterExternalProcessorServer(g, s)
	healthgrpc.RegisterHealthServer(g, s.health)
}

// Run keeps the dispatcher's time (the scheduler's deadlines: queue
// timeouts, settle windows) and runs the engine scraper and the replica
// relay until ctx ends. Streams are answered from New on, but nothing
// times out before Run starts; once it returns, a waiting stream is
// answered 503 and the dispatcher refuses every later event. Call it
// exactly once.
func (s *Server) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("extproc: Run called twice")
	}
	s.log.Info("dispatcher started")
	var wg sync.WaitGroup
	if s.scraper != nil {
		sctx, stop := context.WithCancel(ctx)
		defer func() { stop(); wg.Wait() }()
		s.runCtx.Store(&sctx)
		wg.Go(func() { s.scraper.Run(sctx) })
	}
	if s.relay != nil {
		rctx, stop := context.WithCancel(ctx)
		defer func() { stop(); wg.Wait() }()
		wg.Go(func() { s.relay.run(rctx) })
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
	_ = s.disp.send(ctx, &event{kind: evEngine, loads: r.Loads})
}

// SetWorkers validates ws and swaps it in atomically: the scheduler's
// capacity and reservations follow it, queued requests pinned to a removed
// worker are answered 503, in-flight requests on removed workers keep
// their booking until they end, and the prefix index forgets removed
// workers. On error the current set stays. Discovery sources (the workers
// file, Kubernetes) all come through here.
func (s *Server) SetWorkers(ws []fleet.Worker) error {
	set, err := s.fleet.Apply(ws)
	if err != nil {
		return fmt.Errorf("extproc: %w", err)
	}
	s.log.Info("worker set applied", "workers", set.Len())
	return nil
}

// control applies a control event. A dispatcher that has stopped refuses
// it, which is no error here: it has nothing left to change.
func (s *Server) control(ctx context.Context, ev *event) error {
	if _, err := s.disp.call(ctx, ev); err != nil && !errors.Is(err, errStopped) {
		return err
	}
	return nil
}

// commitWorkers hands a worker set to the dispatcher, the owner of the
// scheduling core; it is the one consumer that may refuse.
func (s *Server) commitWorkers(set *fleet.Set) error {
	_, err := s.disp.call(context.Background(), &event{kind: evWorkers, workers: set})
	return err
}

// workerConsumers are the other holders of the worker set, each given its
// projection: the prefix indexes, the engine scraper, the KV events and
// the metric labels.
func (s *Server) workerConsumers() []fleet.Consumer {
	cs := []fleet.Consumer{
		func(set *fleet.Set, _ fleet.Diff) { s.current.Store(set) },
		func(_ *fleet.Set, d fleet.Diff) { s.cache.Forget(d.Removed) },
		func(set *fleet.Set, _ fleet.Diff) {
			s.metrics.setNamedModels(slices.Collect(maps.Keys(s.cfg.Sched.Policy.Models)), set.Sched)
		},
	}
	if s.scraper != nil {
		cs = append(cs, func(set *fleet.Set, _ fleet.Diff) { s.scraper.SetTargets(set.Targets) })
	}
	if s.kv != nil {
		cs = append(cs, func(set *fleet.Set, _ fleet.Diff) { s.kv.SetWorkers(set.KV) })
	} else {
		cs = append(cs, func(set *fleet.Set, _ fleet.Diff) {
			if w, ok := set.NamesKVEndpoint(); ok {
				s.kvOffOnce.Do(func() {
					s.log.Warn("a worker names a KV-event endpoint, but KV events are off: its events are ignored; start with --kv-events to use them", "worker", w)
				})
			}
		})
	}
	return cs
}

// workerSet returns the worker set in force.
func (s *Server) workerSet() *fleet.Set { return s.current.Load() }

// Ready reports whether the server has workers, leads (or runs without
// leader election) and is not draining.
func (s *Server) Ready() bool { return s.unready(s.disp.serving()) == "" }

// unready says why the replica should not receive traffic, or "" when it
// should. In replica mode a front is ready while it reaches a scheduler,
// whichever replica that is.
func (s *Server) unready(v serving) string {
	switch {
	case v.draining:
		return "draining"
	case s.relay != nil && !s.relay.linked():
		return "no scheduler reachable"
	case s.relay == nil && v.standby:
		return "standby: another replica leads"
	case v.workers == 0:
		return "no workers"
	}
	return ""
}

// SetActive switches the server between leading (true, the initial state)
// and standing by (false) for leader election. A standby reports NOT_SERVING
// on gRPC health and 503 on /readyz at once, answers every queued request
// 503 with Retry-After, and answers new requests the same way; its worker
// view stays current, so it can take over as soon as it is made active
// again. Requests already dispatched finish normally.
//
// In replica mode (Config.Replica) it starts or ends this replica's term
// as the scheduler instead; the replica serves Envoy either way.
func (s *Server) SetActive(ctx context.Context, active bool) error {
	s.log.Info("leadership changed", "active", active)
	if s.relay != nil {
		return s.setReplicaActive(ctx, active)
	}
	return s.control(ctx, &event{kind: evActive, active: active})
}

// updateHealth publishes a serving snapshot on gRPC health.
func (s *Server) updateHealth(v serving) {
	st := healthgrpc.HealthCheckResponse_NOT_SERVING
	if s.unready(v) == "" {
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
// in-flight streams have ended, at most ShutdownTimeout (in replica mode
// the queued requests are not answered: they wait for the scheduler,
// which by then is another replica). It returns an
// error when streams are still open then or ctx ends first. The caller
// then stops the gRPC server and cancels Run's context.
func (s *Server) Drain(ctx context.Context) error {
	if err := s.control(ctx, &event{kind: evDrain}); err != nil {
		return err
	}
	s.log.Info("draining", "delay", s.cfg.DrainDelay, "open_streams", s.active.Load())
	if err := sleepCtx(ctx, s.cfg.DrainDelay); err != nil {
		return err
	}
	s.shedNow()
	// In replica mode the queued requests wait on: another replica
	// schedules them while this one drains, until the shutdown timeout.
	if s.relay == nil {
		if err := s.control(ctx, &event{kind: evShed}); err != nil {
			return err
		}
	}
	deadline := time.NewTimer(s.cfg.ShutdownTimeout)
	defer deadline.Stop()
	for s.active.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("extproc: %d streams still open after the shutdown timeout of %v", s.active.Load(), s.cfg.ShutdownTimeout)
		case <-s.idle:
		}
	}
	s.log.Info("drained")
	return nil
}

// streamOpened counts an open stream and returns the number open.
func (s *Server) streamOpened() int64 { return s.active.Add(1) }

// streamClosed counts a stream's end and signals Drain when it was the
// last one.
func (s *Server) streamClosed() {
	if s.active.Add(-1) == 0 {
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
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

// Wait blocks until every notice sender has exited. Call it after the
// gRPC server and Run have stopped.
func (s *Server) Wait() { s.senders.Wait() }

// MetricsHandler serves /metrics (this server's registry), /healthz (the
// process is alive) and /readyz (workers loaded and not draining).
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelError)}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := s.unready(s.disp.serving()); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}

// Stats returns a scheduler snapshot; ok is false when ctx has ended or
// Run has stopped.
func (s *Server) Stats(ctx context.Context) (sched.Stats, bool) {
	r, err := s.disp.call(ctx, &event{kind: evStats})
	if err != nil {
		return sched.Stats{}, false
	}
	return *r.stats, true
}
