package kube

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/test/envoysim"
	"github.com/tollgate/tollgate/test/memnet"
	"github.com/tollgate/tollgate/test/mockworker"
)

// mem is the in-memory network of the end-to-end tests: each runs in a
// testing/synctest bubble, on fake time, and reaches its workers at
// workerIP.
var mem memnet.Network

const workerIP = memnet.Host

// stack is a real ext_proc server behind a simulated Envoy, with mock
// workers whose requests carrying x-hold park on a shared gate.
type stack struct {
	t    *testing.T
	srv  *extproc.Server
	sim  *envoysim.Sim
	gate *mockworker.Gate
}

// priorityConfig is SMG admission without reservations or preemption, so
// a worker's slots are exactly what it may run.
func priorityConfig() sched.PriorityConfig {
	c := sched.PriorityConfig{Enabled: true}
	for p := range sched.Priority(sched.NumPriorities) {
		c.Classes[p] = sched.ClassConfig{QueueSize: 8, QueueTimeout: 30 * time.Second, StarvationThreshold: time.Minute}
	}
	return c
}

func startStack(t *testing.T) *stack {
	t.Helper()
	return startStackWith(t, extproc.Config{Sched: sched.Config{Priority: priorityConfig()}})
}

func startStackWith(t *testing.T, cfg extproc.Config) *stack {
	t.Helper()
	srv, err := extproc.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	lis, addr := mem.Listen()
	g := grpc.NewServer()
	srv.Register(g)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(ctx) })
	wg.Go(func() { _ = g.Serve(lis) })
	sim, err := envoysim.New(envoysim.Config{
		ExtProcAddr: "passthrough:///" + addr,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return mem.Dial(ctx, "tcp", addr)
		})},
		UpstreamDialer: mem.Dial,
		Mode: &extprocfilterv3.ProcessingMode{
			RequestHeaderMode:  extprocfilterv3.ProcessingMode_SEND,
			RequestBodyMode:    extprocfilterv3.ProcessingMode_BUFFERED,
			ResponseHeaderMode: extprocfilterv3.ProcessingMode_SEND,
			ResponseBodyMode:   extprocfilterv3.ProcessingMode_STREAMED,
		},
		MessageTimeout:    extproc.DefaultEnvoyMessageTimeout,
		MaxMessageTimeout: extproc.DefaultEnvoyMaxMessageTimeout,
		Route:             envoysim.Route{MetadataKey: "x-gateway-destination-endpoint"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sim.Close()
		g.Stop()
		cancel()
		wg.Wait()
		srv.Wait()
	})
	return &stack{t: t, srv: srv, sim: sim, gate: mockworker.NewGate()}
}

// worker starts a mock worker whose x-hold requests park on s.gate and
// returns its port.
func (s *stack) worker(id string) int32 { return startWorker(s.t, s.gate, id) }

func startWorker(t *testing.T, gate *mockworker.Gate, id string) int32 {
	t.Helper()
	w, err := mockworker.New(mockworker.Config{ID: id, Speed: 50, Hold: func(ctx context.Context, req mockworker.RequestInfo) error {
		if req.Header.Get("X-Hold") != "" {
			return gate.Wait(ctx, req)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("mockworker: %v", err)
		}
	})
	l, addr := mem.Listen()
	if err := w.Serve(l, addr); err != nil {
		t.Fatal(err)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return int32(ap.Port())
}

// do sends one chat completion; kv are extra headers.
func (s *stack) do(kv ...string) *envoysim.Response {
	s.t.Helper()
	h := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := s.sim.Do(ctx, envoysim.Request{Method: "POST", Path: "/v1/chat/completions", Header: h,
		Body: []byte(`{"model":"mock-model","messages":[{"role":"user","content":"hello there"}],"stream":true,"max_tokens":4}`)})
	if err != nil {
		s.t.Fatal(err)
	}
	return resp
}

// awaitStats returns the scheduler's state once every goroutine in the
// test's bubble waits; cond must accept it.
func (s *stack) awaitStats(what string, cond func(sched.Stats) bool) sched.Stats {
	s.t.Helper()
	synctest.Wait()
	st, ok := s.srv.Stats(context.Background())
	if !ok || !cond(st) {
		s.t.Fatalf("%s: not so once every goroutine waits; stats %+v", what, st.Ranks)
	}
	return st
}

func queued(st sched.Stats) uint32 {
	var n uint32
	for _, d := range st.QueueDepth {
		n += d
	}
	return n
}

func rankOf(st sched.Stats, worker string) (sched.RankStats, bool) {
	for _, r := range st.Ranks {
		if r.Worker == worker {
			return r, true
		}
	}
	return sched.RankStats{}, false
}

func TestEndToEnd_RoutingFollowsEndpointSlices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startStack(t)
		port0, port1 := s.worker("w0"), s.worker("w1")
		addr0, addr1 := workerIP+":"+itoa32(port0), workerIP+":"+itoa32(port1)
		tr, f := ptr(true), ptr(false)
		slot := []string{AnnotationMaxRunningRequests, "1"}
		client := fake.NewClientset(pod("p0", workerIP, slot...), pod("p1", workerIP, slot...),
			slice("vllm-0", "vllm", port0, ep{pod: "p0", ip: workerIP, ready: tr}),
			slice("vllm-1", "vllm", port1, ep{pod: "p1", ip: workerIP, ready: tr}))
		rec := newRecorder(s.srv.SetWorkers)
		src, err := NewEndpointSliceSource(SourceConfig{Client: client, Namespace: ns, Apply: rec.apply, Debounce: 10 * time.Millisecond},
			SliceSelection{Service: "vllm", Port: "http"})
		if err != nil {
			t.Fatal(err)
		}
		runWorkerSource(t, src)
		rec.await(t, "llm/p0@"+addr0+" llm/p1@"+addr1)
		if !s.srv.Ready() {
			t.Fatal("server not ready with two workers")
		}

		// Requests are routed to both workers, with the EPP header and the
		// same value as envoy.lb metadata.
		seen := map[string]bool{}
		for range 8 {
			r := s.do()
			if r.Status != 200 {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
			if md := r.Metadata["envoy.lb"].GetFields()["x-gateway-destination-endpoint"].GetStringValue(); md != r.Endpoint {
				t.Errorf("envoy.lb metadata %q, routed to %q", md, r.Endpoint)
			}
			seen[r.Endpoint] = true
		}
		if !seen[addr0] || !seen[addr1] {
			t.Errorf("requests went to %v, want both workers", seen)
		}

		// Fill both slots with held requests, one per worker, then queue a
		// request pinned to p1.
		type result struct {
			name string
			resp *envoysim.Response
		}
		results := make(chan result, 3)
		var wg sync.WaitGroup
		defer wg.Wait()
		for _, w := range []string{"llm/p0", "llm/p1"} {
			wg.Go(func() { results <- result{w, s.do("X-Hold", "1", "X-Dynamo-Worker-Instance-Id", w)} })
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.gate.WaitParked(ctx, 2); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { results <- result{"queued", s.do("X-Dynamo-Worker-Instance-Id", "llm/p1")} })
		s.awaitStats("pinned request queued", func(st sched.Stats) bool { return queued(st) == 1 })

		// p1 starts terminating: it leaves the set, its queued pinned request
		// is answered 503, and its in-flight request carries on.
		s1 := slice("vllm-1", "vllm", port1, ep{pod: "p1", ip: workerIP, ready: f, terminating: tr})
		if _, err := client.DiscoveryV1().EndpointSlices(ns).Update(context.Background(), s1, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.await(t, "llm/p0@"+addr0)
		r := <-results
		if r.name != "queued" || r.resp.Status != 503 {
			t.Fatalf("%s answered %d %s, want the queued pinned request answered 503", r.name, r.resp.Status, r.resp.Body)
		}
		st := s.awaitStats("p1 removed with its request in flight", func(st sched.Stats) bool {
			rs, ok := rankOf(st, "llm/p1")
			return ok && rs.Removed && rs.ActiveRequests == 1
		})
		if st.Capacity != 1 {
			t.Errorf("capacity %d after p1 left, want 1", st.Capacity)
		}
		if r := s.do("X-Dynamo-Worker-Instance-Id", "llm/p1"); r.Status != 503 {
			t.Errorf("new request pinned to the removed worker: %d, want 503", r.Status)
		}

		// The held requests finish where they started; afterwards nothing of
		// p1 is booked any more.
		s.gate.Open()
		for range 2 {
			r := <-results
			want := addr0
			if r.name == "llm/p1" {
				want = addr1
			}
			if r.resp.Status != 200 || r.resp.Endpoint != want {
				t.Errorf("%s: status %d at %s, want 200 at %s", r.name, r.resp.Status, r.resp.Endpoint, want)
			}
		}
		s.awaitStats("p1 forgotten", func(st sched.Stats) bool {
			_, ok := rankOf(st, "llm/p1")
			p0, _ := rankOf(st, "llm/p0")
			return !ok && p0.ActiveRequests == 0
		})
		for range 3 {
			if r := s.do(); r.Status != 200 || r.Endpoint != addr0 {
				t.Errorf("after p1 left: %d at %s, want 200 at %s", r.Status, r.Endpoint, addr0)
			}
		}

		// p1 comes back.
		s1 = slice("vllm-1", "vllm", port1, ep{pod: "p1", ip: workerIP, ready: tr})
		if _, err := client.DiscoveryV1().EndpointSlices(ns).Update(context.Background(), s1, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.await(t, "llm/p0@"+addr0+" llm/p1@"+addr1)
		if r := s.do("X-Dynamo-Worker-Instance-Id", "llm/p1"); r.Status != 200 || r.Endpoint != addr1 {
			t.Errorf("pinned to the returned worker: %d at %s, want 200 at %s", r.Status, r.Endpoint, addr1)
		}
		s.awaitStats("all requests ended", func(st sched.Stats) bool {
			for _, r := range st.Ranks {
				if r.ActiveRequests > 0 {
					return false
				}
			}
			return true
		})
	})
}

func TestEndToEnd_InferencePool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startStack(t)
		port0, port1 := s.worker("w0"), s.worker("w1")
		addr0, addr1 := workerIP+":"+itoa32(port0), workerIP+":"+itoa32(port1)
		client := fake.NewClientset(pod("vllm-0", workerIP))
		dyn := newDynamic(inferencePool("pool", int64(port0), int64(port1)))
		src, err := NewPoolSource(SourceConfig{Client: client, Namespace: ns, Apply: s.srv.SetWorkers, Debounce: 10 * time.Millisecond}, dyn, "pool")
		if err != nil {
			t.Fatal(err)
		}
		runWorkerSource(t, src)
		settle()
		if !s.srv.Ready() {
			t.Fatal("server not ready")
		}

		// One pod, two target ports: two workers, both used.
		seen := map[string]bool{}
		for range 8 {
			r := s.do()
			if r.Status != 200 {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
			seen[r.Endpoint] = true
		}
		if !seen[addr0] || !seen[addr1] {
			t.Errorf("requests went to %v, want both ports", seen)
		}
		if r := s.do("X-Dynamo-Worker-Instance-Id", "llm/vllm-0:"+itoa32(port1)); r.Status != 200 || r.Endpoint != addr1 {
			t.Errorf("pin to a port worker: %d at %s, want 200 at %s", r.Status, r.Endpoint, addr1)
		}

		// The pod stops being ready: no worker is left, and requests get 503.
		nr := pod("vllm-0", workerIP)
		nr.Status.Conditions[0].Status = corev1.ConditionFalse
		if _, err := client.CoreV1().Pods(ns).Update(context.Background(), nr, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		settle()
		if s.srv.Ready() {
			t.Fatal("server still ready without workers")
		}
		if r := s.do(); r.Status != 503 {
			t.Errorf("without workers: %d, want 503", r.Status)
		}
	})
}

func itoa32(n int32) string { return strconv.Itoa(int(n)) }

func TestEndToEnd_LeaderFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := startStack(t), startStack(t)
		b.gate = a.gate
		port := a.worker("w0")
		addr := workerIP + ":" + itoa32(port)
		var partitioned atomic.Bool // a's writes to the Lease fail while set
		client := leaseClient(&partitioned)
		for _, o := range []runtime.Object{pod("p0", workerIP, AnnotationMaxRunningRequests, "1"),
			slice("vllm-0", "vllm", port, ep{pod: "p0", ip: workerIP, ready: ptr(true)})} {
			if err := client.Tracker().Add(o); err != nil {
				t.Fatal(err)
			}
		}
		run := func(s *stack, id string) {
			src, err := NewEndpointSliceSource(SourceConfig{Client: client, Namespace: ns, Apply: s.srv.SetWorkers, Debounce: 10 * time.Millisecond},
				SliceSelection{Service: "vllm"})
			if err != nil {
				t.Fatal(err)
			}
			runWorkerSource(t, src)
			el, err := NewElector(LeaderConfig{Client: client, Namespace: ns, Name: "tollgate", Identity: id, Activator: s.srv,
				LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = el.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
		}
		run(a, "a")
		eventually(t, 3*time.Second, "a leads and is ready", a.srv.Ready)
		run(b, "b")

		// The standby keeps a warm worker view but is not ready and sheds.
		settle()
		b.awaitStats("standby knows the worker", func(st sched.Stats) bool { return st.Capacity == 1 })
		time.Sleep(200 * time.Millisecond)
		if b.srv.Ready() {
			t.Fatal("the standby reports ready")
		}
		if r := b.do(); r.Status != 503 || r.Header.Get("Retry-After") == "" {
			t.Errorf("standby answered %d (Retry-After %q), want 503 with Retry-After", r.Status, r.Header.Get("Retry-After"))
		}

		// The leader holds the only slot and queues another request.
		results := make(chan *envoysim.Response, 2)
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { results <- a.do("X-Hold", "1") })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.gate.WaitParked(ctx, 1); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { results <- a.do() })
		a.awaitStats("a request queued on the leader", func(st sched.Stats) bool { return queued(st) == 1 })

		// The leader stops renewing: it fails readiness and sheds its queue
		// at once; the standby takes over and is the only one ready.
		partitioned.Store(true)
		if r := <-results; r.Status != 503 || r.Header.Get("Retry-After") == "" {
			t.Errorf("queued request on the old leader: %d (Retry-After %q), want 503 with Retry-After", r.Status, r.Header.Get("Retry-After"))
		}
		if a.srv.Ready() {
			t.Error("the old leader still reports ready")
		}
		eventually(t, 3*time.Second, "b takes over", b.srv.Ready)
		if a.srv.Ready() {
			t.Error("both replicas ready")
		}
		if r := b.do(); r.Status != 200 || r.Endpoint != addr {
			t.Errorf("new leader answered %d at %s, want 200 at %s", r.Status, r.Endpoint, addr)
		}

		// The old leader's admitted request finishes normally.
		a.gate.Open()
		if r := <-results; r.Status != 200 {
			t.Errorf("in-flight request on the old leader: %d, want 200", r.Status)
		}
		if r := a.do(); r.Status != 503 {
			t.Errorf("old leader answered %d after failover, want 503", r.Status)
		}
	})
}
