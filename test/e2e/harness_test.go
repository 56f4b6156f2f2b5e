package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/envoy"
	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
	"github.com/tollgate/tollgate/test/envoysim"
	"github.com/tollgate/tollgate/test/memnet"
	"github.com/tollgate/tollgate/test/mockworker"
)

func TestMain(m *testing.M) {
	// go-zeromq/zmq4's PUB socket never stops its writer goroutine on
	// Close (v0.17.0); only the mock engines publish.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}

const model = "llama"

// bodyMode names one of the three request body modes under test.
type bodyMode struct {
	name string
	req  extprocfilterv3.ProcessingMode_BodySendMode
}

var bodyModes = []bodyMode{
	{"buffered", extprocfilterv3.ProcessingMode_BUFFERED},
	{"streamed", extprocfilterv3.ProcessingMode_STREAMED},
	{"full-duplex", extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED},
}

// processingMode is the shipped filter mode for a request body mode: the
// response headers and a streamed response body are sent, so tollgate sees
// the first token and the end of every request.
func processingMode(req extprocfilterv3.ProcessingMode_BodySendMode) *extprocfilterv3.ProcessingMode {
	m := &extprocfilterv3.ProcessingMode{
		RequestHeaderMode:   extprocfilterv3.ProcessingMode_SEND,
		ResponseHeaderMode:  extprocfilterv3.ProcessingMode_SEND,
		RequestBodyMode:     req,
		ResponseBodyMode:    extprocfilterv3.ProcessingMode_STREAMED,
		RequestTrailerMode:  extprocfilterv3.ProcessingMode_SKIP,
		ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
	}
	if req == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		m.RequestTrailerMode = extprocfilterv3.ProcessingMode_SEND
	}
	return m
}

// options shape a stack.
type options struct {
	mode extprocfilterv3.ProcessingMode_BodySendMode
	// messageTimeout and maxMessageTimeout are Envoy's, told to tollgate
	// too; maxMessageTimeout < 0 means Envoy accepts no override.
	messageTimeout, maxMessageTimeout time.Duration
	// workers is the number of mock workers (default 1), each with
	// maxRunning slots in tollgate's view (0: the default 64).
	workers    int
	maxRunning uint32
	// hold parks requests at the workers before their first token until
	// the test releases them (nil: never).
	hold func(mockworker.RequestInfo) bool
	// config adjusts tollgate's configuration.
	config func(*extproc.Config)
	// sim adjusts the simulated Envoy, after the shipped filter settings
	// were applied.
	sim func(*envoysim.Config)
	// deadWorker gives tollgate a worker address nothing listens on, so
	// every routed request meets Envoy's connect-failure 503.
	deadWorker bool
	// deadWorkers does the same for the workers of these indexes only.
	deadWorkers []int
	// anyModel lists the workers without a model, so that tollgate routes
	// every name to them (the default of Kubernetes discovery).
	anyModel bool
	// kvEvents makes every worker publish KV events (with a replay
	// socket) and tollgate subscribe to them.
	kvEvents bool
	// kvEndpoints names, by worker index, KV-event endpoints published by
	// something other than the worker (tollgate then subscribes to them).
	kvEndpoints map[int][2]string
	// roles gives the workers' prefill/decode roles by index (both when
	// absent), in the workers list and to the mock workers.
	roles map[int]mockworker.Role
}

// stack is tollgate between a simulated Envoy and mock workers. Without
// KV events (which the engines publish over ZeroMQ on TCP) the whole stack
// runs on an in-memory network, and the test must run it in a
// testing/synctest bubble (see inBubble): time is fake, a timer fires at
// its exact instant, and a wait for the stack's state is a wait until every
// goroutine is blocked, not a poll.
type stack struct {
	t *testing.T
	// net is the in-memory network, nil when the stack uses loopback TCP.
	net     *memnet.Network
	srv     *extproc.Server
	sim     *envoysim.Sim
	workers []*mockworker.Worker
	gate    *mockworker.Gate
	list    []fleet.Worker
	kv      *kvevents.Manager
}

func newStack(t *testing.T, o options) *stack {
	t.Helper()
	if o.workers == 0 {
		o.workers = 1
	}
	if o.messageTimeout == 0 {
		o.messageTimeout = 5 * time.Second
	}
	if o.maxMessageTimeout == 0 {
		o.maxMessageTimeout = 310 * time.Second
	}
	if o.mode == 0 {
		o.mode = extprocfilterv3.ProcessingMode_BUFFERED
	}
	st := &stack{t: t, gate: mockworker.NewGate()}
	if !o.kvEvents && len(o.kvEndpoints) == 0 {
		st.net = &memnet.Network{}
	}
	for i := range o.workers {
		wc := mockworker.Config{ID: fmt.Sprintf("w%d", i), Model: model, Speed: 1000, DefaultMaxTokens: 4, Role: o.roles[i]}
		if o.hold != nil {
			hold := o.hold
			wc.Hold = func(ctx context.Context, r mockworker.RequestInfo) error {
				if hold(r) {
					return st.gate.Wait(ctx, r)
				}
				return nil
			}
		}
		if o.kvEvents {
			wc.CacheBlocks = kvCacheBlocks
			wc.KVEvents = &mockworker.KVEventsConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"}
		}
		w := st.startWorker(wc)
		st.workers = append(st.workers, w)
		addr := w.Addr()
		if o.deadWorker || slices.Contains(o.deadWorkers, i) {
			addr = st.deadAddress()
		}
		ew := fleet.Worker{ID: wc.ID, Address: addr, MaxRunningRequests: o.maxRunning, Model: model, Role: string(o.roles[i])}
		if o.anyModel {
			ew.Model = ""
		}
		ew.KVEventsEndpoint, ew.KVEventsReplayEndpoint = w.KVEventEndpoints()
		if ep, ok := o.kvEndpoints[i]; ok {
			ew.KVEventsEndpoint, ew.KVEventsReplayEndpoint = ep[0], ep[1]
		}
		st.list = append(st.list, ew)
	}
	cfg := extproc.Config{
		EnvoyMessageTimeout:    o.messageTimeout,
		EnvoyMaxMessageTimeout: o.maxMessageTimeout,
		EnvoyTimeoutMargin:     min(100*time.Millisecond, o.messageTimeout/4),
		DrainDelay:             -1,
		ShutdownTimeout:        10 * time.Second,
	}
	if o.kvEvents || len(o.kvEndpoints) > 0 {
		// A short speculative TTL: the tests check what the engines report,
		// not what tollgate routed a moment ago.
		cfg.SpeculativeTTL = time.Millisecond
		kv, err := kvevents.New(kvevents.Config{BlockSize: sched.DefaultBlockSize, ReconnectDelay: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		// Cleaned up after the server (cleanups run last first).
		kvCtx, stopKV := context.WithCancel(context.Background())
		kvDone := make(chan struct{})
		go func() {
			defer close(kvDone)
			_ = kv.Run(kvCtx)
		}()
		t.Cleanup(func() {
			stopKV()
			<-kvDone
		})
		st.kv = kv
	}
	if o.config != nil {
		o.config(&cfg)
	}
	var srvOpts []extproc.Option
	if st.kv != nil {
		srvOpts = append(srvOpts, extproc.WithKVEvents(st.kv))
	}
	srv, err := extproc.New(cfg, st.list, srvOpts...)
	if err != nil {
		t.Fatal(err)
	}
	st.srv = srv
	opts, err := extproc.ServerOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, extProcAddr := st.listen()
	g := grpc.NewServer(opts...)
	srv.Register(g)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(ctx) })
	wg.Go(func() { _ = g.Serve(lis) })
	envoyMax := o.maxMessageTimeout
	if envoyMax < 0 {
		envoyMax = 0
	}
	shipped := shippedFilter(t, o.mode)
	sc := envoysim.Config{
		ExtProcAddr:       extProcAddr,
		Mode:              processingMode(o.mode),
		MessageTimeout:    o.messageTimeout,
		MaxMessageTimeout: envoyMax,
		StatusOnError:     http.StatusServiceUnavailable,
		RequestAttributes: shipped.GetRequestAttributes(),
		RequestChunkSize:  512,
		// The shipped files set the flag; the STREAMED request mode is not
		// shipped and keeps Envoy's default, so tollgate decides on the
		// headers alone there.
		SendBodyWithoutWaitingForHeaderResponse: shipped.GetSendBodyWithoutWaitingForHeaderResponse() &&
			o.mode != extprocfilterv3.ProcessingMode_STREAMED,
	}
	if st.net != nil {
		sc.ExtProcAddr = "passthrough:///" + extProcAddr
		sc.DialOptions = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return st.net.Dial(ctx, "tcp", addr)
		})}
		sc.UpstreamDialer = st.net.Dial
	}
	if o.sim != nil {
		o.sim(&sc)
	}
	sim, err := envoysim.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	st.sim = sim
	t.Cleanup(func() {
		if !t.Failed() {
			st.waitIdle()
		}
		st.gate.Open()
		_ = sim.Close()
		g.Stop()
		cancel()
		wg.Wait()
		srv.Wait()
	})
	return st
}

// shippedFilter is the ext_proc filter of the standalone bootstrap for a
// request body mode: envoy-full-duplex.yaml for FULL_DUPLEX_STREAMED,
// envoy.yaml otherwise.
func shippedFilter(t *testing.T, mode extprocfilterv3.ProcessingMode_BodySendMode) *extprocfilterv3.ExternalProcessor {
	t.Helper()
	name := "envoy.yaml"
	if mode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		name = "envoy-full-duplex.yaml"
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "envoy", name))
	if err != nil {
		t.Fatal(err)
	}
	b, err := envoy.DecodeBootstrap(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm, err := envoy.Unpack[*hcmv3.HttpConnectionManager](f.GetTypedConfig())
				if err != nil {
					continue
				}
				for _, hf := range hcm.GetHttpFilters() {
					if ep, err := envoy.Unpack[*extprocfilterv3.ExternalProcessor](hf.GetTypedConfig()); err == nil {
						return ep
					}
				}
			}
		}
	}
	t.Fatalf("%s has no ext_proc filter", name)
	return nil
}

// inBubble runs a test in a testing/synctest bubble, as an in-memory stack
// needs.
func inBubble(f func(t *testing.T)) func(t *testing.T) {
	return func(t *testing.T) { synctest.Test(t, f) }
}

// startWorker starts a mock worker on the stack's network.
func (s *stack) startWorker(wc mockworker.Config) *mockworker.Worker {
	s.t.Helper()
	if s.net == nil {
		return mockworker.Start(s.t, wc)
	}
	wc.Dial = s.net.Dial // a decode worker's sidecar calls its prefill worker
	w, err := mockworker.New(wc)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		if err := w.Close(); err != nil {
			s.t.Errorf("mockworker: %v", err)
		}
	})
	l, addr := s.net.Listen()
	if err := w.Serve(l, addr); err != nil {
		s.t.Fatal(err)
	}
	return w
}

// listen returns a listener on the stack's network and its address.
func (s *stack) listen() (net.Listener, string) {
	s.t.Helper()
	if s.net != nil {
		return s.net.Listen()
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.t.Fatal(err)
	}
	return l, l.Addr().String()
}

// deadAddress is an IP:port on the stack's network that nothing listens on.
func (s *stack) deadAddress() string {
	if s.net != nil {
		return s.net.Reserve()
	}
	l, addr := s.listen()
	_ = l.Close()
	return addr
}

// chat is a streamed chat request for the test model.
func chat(content string, header ...string) envoysim.Request {
	body, _ := json.Marshal(map[string]any{
		"model":    model,
		"messages": []map[string]string{{"role": "user", "content": content}},
		"stream":   true,
	})
	return post("/v1/chat/completions", body, header...)
}

// completion is a non-streamed completion request.
func completion(prompt string, header ...string) envoysim.Request {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt})
	return post("/v1/completions", body, header...)
}

func post(path string, body []byte, header ...string) envoysim.Request {
	h := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(header); i += 2 {
		h.Add(header[i], header[i+1])
	}
	return envoysim.Request{Method: http.MethodPost, Path: path, Header: h, Body: body}
}

// do sends one request and fails the test on a transport error.
func (s *stack) do(req envoysim.Request) *envoysim.Response {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := s.sim.Do(ctx, req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", req.Method, req.Path, err)
	}
	return r
}

// async sends a request in the background.
func (s *stack) async(ctx context.Context, req envoysim.Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		r, err := s.sim.Do(ctx, req)
		ch <- result{r, err}
	}()
	return ch
}

type result struct {
	r   *envoysim.Response
	err error
}

// await returns a background request's result.
func (s *stack) await(ch <-chan result) result {
	s.t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		s.t.Fatal("request did not finish within 20 s")
	}
	return result{}
}

// waitStats returns the scheduler's state once every goroutine of the
// test's bubble waits; ok must accept it. In-memory stacks only.
func (s *stack) waitStats(what string, ok func(sched.Stats) bool) sched.Stats {
	s.t.Helper()
	if s.net == nil {
		s.t.Fatal("waitStats needs an in-memory stack in a testing/synctest bubble")
	}
	synctest.Wait()
	st, got := s.srv.Stats(context.Background())
	if !got || !ok(st) {
		s.t.Fatalf("scheduler not %s once every goroutine waits: %+v", what, st)
	}
	return st
}

// waitSim checks the simulated Envoy's counters as waitStats does.
func (s *stack) waitSim(what string, ok func(envoysim.Stats) bool) {
	s.t.Helper()
	if s.net == nil {
		s.t.Fatal("waitSim needs an in-memory stack in a testing/synctest bubble")
	}
	synctest.Wait()
	if st := s.sim.Stats(); !ok(st) {
		s.t.Fatalf("envoy not %s once every goroutine waits: %+v", what, st)
	}
}

// queued waits until n requests of class p are queued.
func (s *stack) queued(p sched.Priority, n uint32) {
	s.t.Helper()
	s.waitStats(fmt.Sprintf("holding %d queued %v requests", n, p), func(st sched.Stats) bool { return st.QueueDepth[p] == n })
}

// parked waits until n requests are parked at the workers' gate.
func (s *stack) parked(n int) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.gate.WaitParked(ctx, n); err != nil {
		s.t.Fatalf("%d requests not parked: %v (parked %v)", n, err, s.gate.Parked())
	}
}

// waitIdle checks that the scheduler holds nothing: no slot, no queued
// request, no booking on any worker rank.
//
// Over TCP it first waits until every ext_proc stream has ended, which the
// simulated Envoy does by itself once every request is complete.
func (s *stack) waitIdle() {
	s.t.Helper()
	if s.net == nil {
		ended := make(chan struct{})
		go func() { s.srv.Wait(); close(ended) }()
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			s.t.Fatal("ext_proc streams still open 10 s after the test")
		}
		st, _ := s.srv.Stats(context.Background())
		if !idle(st) {
			s.t.Fatalf("scheduler not idle after every stream ended: %+v", st)
		}
		return
	}
	s.waitStats("idle", idle)
}

// idle reports whether the scheduler holds nothing.
func idle(st sched.Stats) bool {
	for p := range sched.NumPriorities {
		if st.InFlight[p] != 0 || st.QueueDepth[p] != 0 {
			return false
		}
	}
	for _, q := range st.Queues {
		if q.Requests != 0 || q.ISLTokens != 0 || q.CachedTokens != 0 {
			return false
		}
	}
	for _, r := range st.Ranks {
		if r.ActiveRequests != 0 || r.ActivePrefillTokens != 0 || r.ActiveBlocks != 0 {
			return false
		}
	}
	return true
}

// errorBody decodes the SMG / OpenAI error object of a response.
func errorBody(t *testing.T, r *envoysim.Response) map[string]any {
	t.Helper()
	var v struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal(r.Body, &v); err != nil || v.Error == nil {
		t.Fatalf("body %q is not an error object: %v", r.Body, err)
	}
	return v.Error
}

// expectStatus checks a response's status and, for SMG errors, its code.
func expectStatus(t *testing.T, r *envoysim.Response, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d (body %q, details %q)", r.Status, status, r.Body, r.Details)
	}
	if code != "" {
		if got := r.Header.Get("X-Smg-Error-Code"); got != code {
			t.Errorf("X-SMG-Error-Code %q, want %q", got, code)
		}
		if got := errorBody(t, r)["code"]; got != code {
			t.Errorf("error code %v, want %q", got, code)
		}
	}
	if ct := r.Header.Get("Content-Type"); r.LocalReply && code != "" && !strings.HasPrefix(ct, "application/json") {
		t.Errorf("content-type %q", ct)
	}
}

// priorityConfig is SMG admission without reservations, so that a single
// slot is a usable capacity; interactive and system may preempt.
func priorityConfig(queueTimeout time.Duration) sched.PriorityConfig {
	c := sched.PriorityConfig{Enabled: true}
	for p := range sched.Priority(sched.NumPriorities) {
		c.Classes[p] = sched.ClassConfig{QueueSize: 16, QueueTimeout: queueTimeout, StarvationThreshold: time.Hour,
			CanPreempt: p >= sched.PriorityInteractive}
	}
	return c
}

// mustTenants builds tenant resolution from --tenant-api-key values.
func mustTenants(t *testing.T, keys ...string) *policy.Tenants {
	t.Helper()
	ts, err := policy.NewTenants(policy.TenantOptions{TenantAPIKeys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
