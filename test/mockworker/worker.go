package mockworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/extproc/engine/kvevents"
)

// Worker is one simulated vLLM engine behind an OpenAI-compatible HTTP API.
// Its methods are safe for concurrent use.
type Worker struct {
	cfg     Config // With defaults applied.
	engine  *engine
	metrics *metrics
	handler http.Handler
	client  *http.Client // The decode sidecar's, to prefill workers.
	created int64
	nextID  atomic.Uint64

	// ctx ends when Close is called; every request's context follows it.
	ctx    context.Context
	cancel context.CancelFunc

	// mu guards the fields below it.
	mu       sync.Mutex
	closed   bool
	srv      *http.Server
	addr     string
	inflight sync.WaitGroup // Generate handlers in progress; Add only while !closed.
	serving  sync.WaitGroup // The Serve goroutine.
}

// New returns a worker for cfg, or the errors of cfg.Validate. The worker
// serves through Handler or, after Listen, its own server; Close stops it.
func New(cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	w := &Worker{cfg: cfg, created: time.Now().Unix()}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.metrics = newMetrics(cfg, func() Stats { return w.engine.statsSnapshot() })
	w.engine = newEngine(cfg, w.metrics)
	if cfg.KVEvents != nil {
		pub, err := newPublisher(*cfg.KVEvents)
		if err != nil {
			return nil, err
		}
		w.engine.pub = pub
	}
	w.handler = w.routes()
	w.client = newSidecarClient(cfg.Dial)
	return w, nil
}

// Config returns the worker's configuration with defaults applied.
func (w *Worker) Config() Config { return w.cfg }

// Handler returns the worker's HTTP API: POST /v1/completions and
// /v1/chat/completions, GET /v1/models, /health and /metrics. It may be
// mounted on any server; Close cancels the requests it is serving.
func (w *Worker) Handler() http.Handler { return w.handler }

// Listen starts serving Handler on a new TCP listener at addr (use
// "127.0.0.1:0" in tests) and returns the bound address as "IP:port". A
// worker listens at most once.
func (w *Worker) Listen(addr string) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return "", errors.New("mockworker: listen on a closed worker")
	}
	if w.srv != nil {
		return "", fmt.Errorf("mockworker: already listening on %s", w.addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("mockworker: %w", err)
	}
	w.serveLocked(l, l.Addr().String())
	return w.addr, nil
}

// Serve starts serving Handler on l, which addr reaches (an in-memory
// listener, for example); Addr then reports addr. A worker listens or
// serves at most once.
func (w *Worker) Serve(l net.Listener, addr string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("mockworker: serve on a closed worker")
	}
	if w.srv != nil {
		return fmt.Errorf("mockworker: already listening on %s", w.addr)
	}
	w.serveLocked(l, addr)
	return nil
}

// serveLocked serves on l; w.mu is held.
func (w *Worker) serveLocked(l net.Listener, addr string) {
	w.srv = &http.Server{
		Handler:           w.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(w.cfg.Logger.Handler(), slog.LevelWarn),
	}
	w.addr = addr
	srv := w.srv
	w.serving.Go(func() { _ = srv.Serve(l) }) // Serve returns ErrServerClosed after Close.
	w.cfg.Logger.Info("listening", slog.String("worker", w.cfg.ID), slog.String("addr", w.addr),
		slog.String("model", w.cfg.Model))
}

// Addr returns the address Listen bound or Serve was given, or "" before.
func (w *Worker) Addr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.addr
}

// URL returns "http://" and the address Listen bound, or "" before Listen.
func (w *Worker) URL() string {
	if a := w.Addr(); a != "" {
		return "http://" + a
	}
	return ""
}

// Close cancels every in-flight request, stops the server Listen started,
// closes the decode sidecar's connections, and returns once every request
// handler and server goroutine the worker owns, and the shared batch's
// step loop, has returned (waiting at most a few seconds for a client that
// stops reading, and one step for the step loop). Later requests get
// 503. Close is idempotent.
func (w *Worker) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	srv := w.srv
	w.mu.Unlock()

	w.cancel()
	var err error
	if srv != nil {
		// In-flight handlers end at once now; Shutdown then waits for their
		// connections to finish closing, so no connection goroutine
		// outlives Close. A handler stuck writing to a client that does not
		// read is cut off by Close after the grace period.
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		err = srv.Shutdown(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			err = srv.Close()
		}
		w.serving.Wait()
	}
	w.inflight.Wait()
	// The shared batch's step loop, if any, returns after its last step.
	w.engine.wait()
	w.client.CloseIdleConnections() // No prefill call is left to make.
	if w.engine.pub != nil {
		w.engine.pub.close()
	}
	if err != nil {
		return fmt.Errorf("mockworker: close: %w", err)
	}
	return nil
}

// shutdownGrace bounds how long Close waits for connections to close.
const shutdownGrace = 2 * time.Second

// Stats returns a snapshot of the worker's counters.
func (w *Worker) Stats() Stats { return w.engine.statsSnapshot() }

// Await blocks until cond holds for the worker's counters, or until ctx
// ends, and then returns ctx's cause. cond is called with no lock held each
// time the counters change.
func (w *Worker) Await(ctx context.Context, cond func(Stats) bool) error {
	return w.engine.await(ctx, cond)
}

// Records returns copies of the kept request records, oldest first.
func (w *Worker) Records() []Record { return w.engine.allRecords() }

// Record returns a copy of the newest record with the given request ID.
func (w *Worker) Record(id string) (Record, bool) { return w.engine.record(id) }

// begin registers a generate request and returns its context, which ends
// with the client or with Close, and the function to call when it is done.
// ok is false once the worker is closed.
func (w *Worker) begin(parent context.Context) (ctx context.Context, done func(), ok bool) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, nil, false
	}
	w.inflight.Add(1)
	w.mu.Unlock()

	ctx, cancel := context.WithCancel(parent)
	stop := context.AfterFunc(w.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
		w.inflight.Done()
	}, true
}

// requestID returns the request's x-request-id, or a new "<worker id>-<n>".
func (w *Worker) requestID(h http.Header) string {
	if id := h.Get("X-Request-Id"); id != "" {
		return id
	}
	return w.cfg.ID + "-" + strconv.FormatUint(w.nextID.Add(1), 10)
}

// KVEventEndpoints returns the bound KV-event PUB and replay endpoints
// (tcp://IP:PORT), empty when not configured or not bound.
func (w *Worker) KVEventEndpoints() (pub, replay string) {
	if w.engine.pub == nil {
		return "", ""
	}
	return w.engine.pub.endpoints()
}

// RestartEngine simulates an engine restart: the prefix cache is emptied,
// the KV-event sequence starts again at 0 with an empty replay buffer, and
// an AllBlocksCleared batch is published.
func (w *Worker) RestartEngine() {
	e := w.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cache.clear()
	e.stats.CachedBlocks = 0
	if e.pub != nil {
		e.pub.restart()
		e.pub.publish([]kvevents.Event{{Kind: kvevents.KindCleared}})
	}
}

// DropKVBatches makes the next n KV-event batches go unsent while staying
// in the replay buffer, so that a subscriber sees a sequence gap.
func (w *Worker) DropKVBatches(n int) {
	if w.engine.pub != nil {
		w.engine.pub.dropNext(n)
	}
}
