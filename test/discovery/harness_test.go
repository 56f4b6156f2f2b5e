package discovery

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/test/envoysim"
	"github.com/tollgate/tollgate/test/kubefixture"
	"github.com/tollgate/tollgate/test/memnet"
	"github.com/tollgate/tollgate/test/mockworker"
)

func TestMain(m *testing.M) {
	klog.SetSlogLogger(slog.New(slog.DiscardHandler)) // client-go's own logs
	goleak.VerifyTestMain(m)
}

// ns is the namespace of every fixture object.
const ns = kubefixture.Namespace

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

func itoa32(n int32) string { return strconv.Itoa(int(n)) }
