package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/test/envoysim"
	"github.com/tollgate/tollgate/test/mockworker"
)

// HeaderEndpoint is the response header in which the demo's workers echo
// the x-gateway-destination-endpoint value that reached them, so a client
// sees where tollgate routed its request.
const HeaderEndpoint = "X-Tollgate-Endpoint"

// headerPrefiller is the response header in which a worker echoes the
// x-prefiller-host-port that reached it, so a client sees that tollgate
// split its request and which prefill worker it named.
const headerPrefiller = "X-Tollgate-Prefiller"

// demoModel is the model every demo worker serves.
const demoModel = "demo-model"

// messageTimeout is the ext_proc message_timeout of the demo's simulated
// Envoy, and what tollgate is told it is (--envoy-message-timeout). The
// shipped Envoy configurations use 1 s; the demo allows more because its
// bursts start hundreds of requests in the same instant on what may be a
// small, busy machine (or a race-detector build), where the simulator and
// the server can take longer than 1 s to answer every first message. Held
// messages are extended with override_message_timeout either way.
const messageTimeout = 10 * time.Second

// workerSpec describes a scenario's simulated workers.
type workerSpec struct {
	// count is the number of workers.
	count int
	// maxNumSeqs is each worker's sequence limit and, in the worker set,
	// its max_running_requests.
	maxNumSeqs int
	// maxBatchedTokens is max_num_batched_tokens in the worker set; 0 means
	// unset.
	maxBatchedTokens uint64
	// prefillRate and decodeRate are tokens per second at speed 1.
	prefillRate, decodeRate float64
	// hold is mockworker's Hold hook; nil means none.
	hold func(context.Context, mockworker.RequestInfo) error
	// naming is the workers' metrics naming (vllm or sglang); empty means
	// vllm.
	naming string
	// cacheBlocks is each worker's prefix-cache size; 0 means 65536.
	cacheBlocks int
	// kvEvents makes the workers publish KV events and tollgate price
	// and route with them.
	kvEvents bool
	// roles are the workers' prefill/decode roles by index, for tollgate
	// and the mock workers alike; a missing or empty one is both.
	roles []mockworker.Role
	// role is the one worker startWorker starts (startStack sets it from
	// roles); empty means both.
	role mockworker.Role
	// batch makes the workers run one shared batch in steps, as vLLM
	// does; nil times each sequence on its own.
	batch *mockworker.BatchConfig
}

// worker returns the spec of worker i: ws with its role.
func (ws workerSpec) worker(i int) workerSpec {
	ws.role = ""
	if i < len(ws.roles) {
		ws.role = ws.roles[i]
	}
	return ws
}

// simWorker is one mock worker behind its own HTTP server.
type simWorker struct {
	id   string
	addr string
	w    *mockworker.Worker
	hs   *http.Server
	done chan struct{} // closed when Serve returns
}

// stack is one running demo deployment: the tollgate server (gRPC ext_proc
// plus /metrics), the mock workers, and the simulated Envoy in front; or,
// started by startReplicaStack, tollgate replicas in replica mode, each
// behind its own simulated Envoy (srv, gs, ms and sim are then nil).
type stack struct {
	srv         *extproc.Server
	gs          *grpc.Server
	ms          *http.Server
	grpcAddr    string
	metricsAddr string
	workers     []*simWorker
	sim         *envoysim.Sim
	replicas    *replicaSet

	kv      *kvevents.Manager
	stopRun context.CancelFunc
	wg      sync.WaitGroup
}

// envoyMode is the processing mode of the shipped BUFFERED Envoy
// configuration: tollgate sees the whole request body, then the response
// headers and every response body chunk (the first one is the first token;
// end_of_stream is the end of the request).
func envoyMode() *extprocfilterv3.ProcessingMode {
	return &extprocfilterv3.ProcessingMode{
		RequestHeaderMode:   extprocfilterv3.ProcessingMode_SEND,
		RequestBodyMode:     extprocfilterv3.ProcessingMode_BUFFERED,
		RequestTrailerMode:  extprocfilterv3.ProcessingMode_SKIP,
		ResponseHeaderMode:  extprocfilterv3.ProcessingMode_SEND,
		ResponseBodyMode:    extprocfilterv3.ProcessingMode_STREAMED,
		ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
	}
}

// startStack starts workers, the tollgate server and the simulated Envoy.
// On error everything started is stopped again.
func startStack(ctx context.Context, spec serverSpec, ws workerSpec, speed float64, log *slog.Logger) (st *stack, err error) {
	st = &stack{}
	defer func() {
		if err != nil {
			st.close()
			st = nil
		}
	}()
	workers, err := st.startWorkers(ctx, ws, speed, log)
	if err != nil {
		return st, err
	}
	cfg, err := spec.build(log)
	if err != nil {
		return st, err
	}
	if ws.kvEvents {
		if st.kv, err = kvevents.New(kvevents.Config{BlockSize: int(cfg.Sched.BlockSize), Logger: log}); err != nil {
			return st, err
		}
	}
	return st, st.startServer(ctx, cfg, workers)
}

// startWorkers starts the workers ws describes and returns them as
// tollgate's worker set. The caller closes st on error.
func (st *stack) startWorkers(ctx context.Context, ws workerSpec, speed float64, log *slog.Logger) ([]fleet.Worker, error) {
	var workers []fleet.Worker
	for i := range ws.count {
		wi := ws.worker(i)
		sw, err := startWorker(ctx, fmt.Sprintf("worker-%d", i), wi, speed, log)
		if err != nil {
			return nil, err
		}
		st.workers = append(st.workers, sw)
		ew := fleet.Worker{
			ID:                  sw.id,
			Address:             sw.addr,
			MaxRunningRequests:  uint32(ws.maxNumSeqs),
			MaxNumBatchedTokens: ws.maxBatchedTokens,
			Model:               demoModel,
			Role:                string(wi.role),
		}
		ew.KVEventsEndpoint, ew.KVEventsReplayEndpoint = sw.w.KVEventEndpoints()
		workers = append(workers, ew)
	}
	return workers, nil
}

// startServer starts the tollgate server over workers and the simulated
// Envoy in front of it. The caller closes st on error.
func (st *stack) startServer(ctx context.Context, cfg extproc.Config, workers []fleet.Worker) error {
	var opts []extproc.Option
	if st.kv != nil {
		opts = append(opts, extproc.WithKVEvents(st.kv))
	}
	srv, err := extproc.New(cfg, workers, opts...)
	if err != nil {
		return err
	}
	gopts, err := extproc.ServerOptions(cfg)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	gl, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: grpc listener: %w", err)
	}
	ml, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		_ = gl.Close()
		return fmt.Errorf("demo: metrics listener: %w", err)
	}
	st.srv = srv
	st.gs = grpc.NewServer(gopts...)
	srv.Register(st.gs)
	st.ms = &http.Server{Handler: srv.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second}
	st.grpcAddr, st.metricsAddr = gl.Addr().String(), ml.Addr().String()

	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	st.stopRun = stopRun
	if st.kv != nil {
		st.wg.Go(func() { _ = st.kv.Run(runCtx) })
	}
	st.wg.Go(func() { _ = srv.Run(runCtx) })
	st.wg.Go(func() { _ = st.gs.Serve(gl) })
	st.wg.Go(func() { _ = st.ms.Serve(ml) })

	st.sim, err = envoysim.New(gatewayConfig(st.grpcAddr))
	return err
}

// gatewayConfig is the simulated Envoy in front of the tollgate serving
// ext_proc on addr.
func gatewayConfig(addr string) envoysim.Config {
	return envoysim.Config{
		ExtProcAddr:       addr,
		Mode:              envoyMode(),
		MessageTimeout:    messageTimeout,
		MaxMessageTimeout: extproc.DefaultEnvoyMaxMessageTimeout,
		StatusOnError:     http.StatusServiceUnavailable,
		// As the shipped envoy.yaml: the client address for ip: tenants,
		// and response headers tollgate may hold for preemption.
		RequestAttributes:                       []string{"source.address"},
		SendBodyWithoutWaitingForHeaderResponse: true,
	}
}

// startWorker starts one mock worker on 127.0.0.1:0 behind a handler that
// echoes the routing header back in HeaderEndpoint.
func startWorker(ctx context.Context, id string, ws workerSpec, speed float64, log *slog.Logger) (*simWorker, error) {
	var kv *mockworker.KVEventsConfig
	if ws.kvEvents {
		kv = &mockworker.KVEventsConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0",
			Topic: "kv@" + id + "@" + demoModel}
	}
	w, err := mockworker.New(mockworker.Config{
		ID:                  id,
		Model:               demoModel,
		MaxNumSeqs:          ws.maxNumSeqs,
		PrefillTokensPerSec: ws.prefillRate,
		DecodeTokensPerSec:  ws.decodeRate,
		Speed:               speed,
		CacheBlocks:         cmp.Or(ws.cacheBlocks, 1<<16),
		KVEvents:            kv,
		MaxRecords:          1 << 14,
		Hold:                ws.hold,
		MetricsNaming:       ws.naming,
		Role:                ws.role,
		Batch:               ws.batch,
		Logger:              log,
	})
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("demo: worker listener: %w", err)
	}
	sw := &simWorker{
		id:   id,
		addr: l.Addr().String(),
		w:    w,
		hs:   &http.Server{Handler: echoEndpoint(w.Handler()), ReadHeaderTimeout: 10 * time.Second},
		done: make(chan struct{}),
	}
	go func() {
		defer close(sw.done)
		_ = sw.hs.Serve(l)
	}()
	return sw, nil
}

// echoEndpoint sets HeaderEndpoint to the request's routing header, and
// headerPrefiller to its x-prefiller-host-port, before the worker answers.
func echoEndpoint(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get(envoysim.DefaultDestinationHeader); v != "" {
			w.Header().Set(HeaderEndpoint, v)
		}
		if v := r.Header.Get(mockworker.HeaderPrefillerHostPort); v != "" {
			w.Header().Set(headerPrefiller, v)
		}
		h.ServeHTTP(w, r)
	})
}

// close stops everything in reverse order: the simulated Envoys (their
// side streams and upstream calls end), the workers, then tollgate.
func (st *stack) close() {
	if st.sim != nil {
		_ = st.sim.Close()
	}
	if st.replicas != nil {
		st.replicas.closeEnvoys()
	}
	for _, sw := range st.workers {
		sw.close()
	}
	if st.replicas != nil {
		st.replicas.stop()
	}
	if st.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = st.srv.Drain(ctx)
		cancel()
	}
	if st.gs != nil {
		st.gs.Stop()
	}
	if st.ms != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := st.ms.Shutdown(ctx); err != nil {
			_ = st.ms.Close()
		}
		cancel()
	}
	if st.stopRun != nil {
		st.stopRun()
	}
	if st.srv != nil {
		st.srv.Wait()
	}
	st.wg.Wait() // the KV-event manager's Run too
}

// close cancels the worker's requests, then stops its server.
func (sw *simWorker) close() {
	_ = sw.w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sw.hs.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = sw.hs.Close()
	}
	<-sw.done
}
