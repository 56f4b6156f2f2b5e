package extproc

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testPriority is SMG admission without reservations, so one slot is a
// usable capacity: interactive and system may preempt.
func testPriority() sched.PriorityConfig {
	c := sched.PriorityConfig{Enabled: true}
	for p := range sched.Priority(sched.NumPriorities) {
		c.Classes[p] = sched.ClassConfig{QueueSize: 8, QueueTimeout: 30 * time.Second, StarvationThreshold: time.Minute,
			CanPreempt: p >= sched.PriorityInteractive}
	}
	return c
}

type testServer struct {
	t      *testing.T
	srv    *Server
	client extprocv3.ExternalProcessorClient
	health healthgrpc.HealthClient
}

// startServer runs a Server on a bufconn listener for the test's duration.
func startServer(t *testing.T, cfg Config, workers []fleet.Worker) *testServer {
	t.Helper()
	return startServerWith(t, cfg, workers, nil)
}

// startServerWith is startServer with a hook that runs before Run starts.
func startServerWith(t *testing.T, cfg Config, workers []fleet.Worker, beforeRun func(*Server)) *testServer {
	t.Helper()
	s, err := New(cfg, workers)
	if err != nil {
		t.Fatal(err)
	}
	if beforeRun != nil {
		beforeRun(s)
	}
	lis := bufconn.Listen(1 << 20)
	conn := serve(t, s, cfg, lis, "passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	return &testServer{t: t, srv: s, client: extprocv3.NewExternalProcessorClient(conn), health: healthgrpc.NewHealthClient(conn)}
}

// serve runs s, and a gRPC server for it on lis, until the test ends, and
// returns a client connection to target.
func serve(tb testing.TB, s *Server, cfg Config, lis net.Listener, target string, dial ...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	opts, err := ServerOptions(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	s.Register(g)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(ctx) })
	wg.Go(func() { _ = g.Serve(lis) })
	conn, err := grpc.NewClient(target, append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = conn.Close()
		g.Stop()
		cancel()
		wg.Wait()
		s.Wait()
	})
	return conn
}

// clientStream is one simulated Envoy side stream.
type clientStream struct {
	t      *testing.T
	s      extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
	// in carries replies and, last, the error that ended the stream.
	in   chan clientReceived
	done chan struct{}
}

// received is one reply or the stream's final error.
type clientReceived struct {
	m   *extprocv3.ProcessingResponse
	err error
}

func (ts *testServer) open() *clientStream {
	ts.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := ts.client.Process(ctx)
	if err != nil {
		ts.t.Fatal(err)
	}
	c := &clientStream{t: ts.t, s: s, cancel: cancel, in: make(chan clientReceived, 64), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			m, err := s.Recv()
			c.in <- clientReceived{m, err}
			if err != nil {
				return
			}
		}
	}()
	ts.t.Cleanup(func() { cancel(); <-c.done })
	return c
}

func (c *clientStream) send(ms ...*extprocv3.ProcessingRequest) {
	c.t.Helper()
	for _, m := range ms {
		if err := c.s.Send(m); err != nil {
			c.t.Fatalf("send: %v", err)
		}
	}
}

// recv returns the next reply, failing after a few seconds of the bubble's
// fake clock, that is when the test would otherwise deadlock. After an
// ImmediateResponse it closes the stream, as Envoy does once it has the
// final answer.
func (c *clientStream) recv() *extprocv3.ProcessingResponse {
	c.t.Helper()
	select {
	case r := <-c.in:
		if r.err != nil {
			c.t.Fatalf("stream ended: %v", r.err)
		}
		if r.m.GetImmediateResponse() != nil {
			_ = c.s.CloseSend()
		}
		return r.m
	case <-time.After(5 * time.Second):
		c.t.Fatal("no reply within 5 s")
	}
	return nil
}

// recvKinds receives n replies and returns their kinds.
func (c *clientStream) recvKinds(n int) []string {
	c.t.Helper()
	var out []*extprocv3.ProcessingResponse
	for range n {
		out = append(out, c.recv())
	}
	return kinds(out)
}

// untilRoute receives replies until the route, skipping the headers reply
// and an override.
func (c *clientStream) untilRoute() {
	c.t.Helper()
	for {
		k := c.recvKinds(1)[0]
		if strings.HasSuffix(k, "+route") {
			return
		}
		if k != "req_headers" && !strings.HasPrefix(k, "override") {
			c.t.Fatalf("got %s while waiting for the route", k)
		}
	}
}

// end waits for the server to end the stream and returns its status.
func (c *clientStream) end() error {
	c.t.Helper()
	select {
	case r := <-c.in:
		if r.err == nil {
			c.t.Fatalf("unexpected reply %v", kinds([]*extprocv3.ProcessingResponse{r.m}))
		}
		return r.err
	case <-time.After(5 * time.Second):
		c.t.Fatal("stream not ended within 5 s")
	}
	return nil
}

// quiet fails if a reply arrives within d of the bubble's fake clock.
func (c *clientStream) quiet(d time.Duration) {
	c.t.Helper()
	time.Sleep(d)
	synctest.Wait()
	select {
	case r := <-c.in:
		c.t.Fatalf("unexpected reply %v (%v)", kinds([]*extprocv3.ProcessingResponse{r.m}), r.err)
	default:
	}
}

// finish completes an admitted request's response and closes the stream.
func (c *clientStream) finish() {
	c.t.Helper()
	c.send(respHeaders(false), respBody("data: [DONE]\n\n", true))
	c.recvKinds(2)
	if err := c.s.CloseSend(); err != nil {
		c.t.Fatal(err)
	}
	if err := c.end(); !errors.Is(err, io.EOF) {
		c.t.Fatalf("stream end %v, want EOF", err)
	}
}

// admitThenQueue opens a, which takes the only slot, and b, which queues
// behind it; each has had its two replies (the headers' CONTINUE, then the
// route or the override).
func (ts *testServer) admitThenQueue(p proto) (a, b *clientStream) {
	ts.t.Helper()
	a, b = ts.open(), ts.open()
	for _, c := range []*clientStream{a, b} {
		c.send(reqHeaders(p, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
		c.recvKinds(2)
	}
	return a, b
}

// waitIdle waits until the scheduler holds nothing: no slot, no queue, no
// booking.
func (ts *testServer) waitIdle() {
	ts.t.Helper()
	ts.waitStats("idle", func(s sched.Stats) bool {
		for p := range sched.NumPriorities {
			if s.InFlight[p] != 0 || s.QueueDepth[p] != 0 {
				return false
			}
		}
		for _, r := range s.Ranks {
			if r.ActiveRequests != 0 || r.ActivePrefillTokens != 0 || r.ActiveBlocks != 0 {
				return false
			}
		}
		for _, q := range s.Queues {
			if q.Requests != 0 {
				return false
			}
		}
		return true
	})
}

// waitStats checks the scheduler once every goroutine of the test's
// bubble is blocked: what the test waits for has happened by then, or
// never will.
func (ts *testServer) waitStats(what string, ok func(sched.Stats) bool) {
	ts.t.Helper()
	synctest.Wait()
	if s, got := ts.srv.Stats(context.Background()); !got || !ok(s) {
		ts.t.Fatalf("scheduler not %s: %+v", what, s)
	}
}

var oneWorker = []fleet.Worker{{ID: "w0", Address: "10.0.0.7:8000", MaxRunningRequests: 1}}

func TestServer_BufferedRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startServer(t, Config{}, []fleet.Worker{{ID: "w0", Address: "10.0.0.7:8000"}, {ID: "w1", Address: "10.0.0.8:8000", DPSize: 2}})
		c := ts.open()
		p := proto{req: modeBuffered, resp: modeStreamed}
		c.send(reqHeaders(p, "POST", "/v1/chat/completions", false))
		if got := c.recvKinds(1); !cmp.Equal([]string{"req_headers"}, got) {
			t.Fatalf("headers: %v", got)
		}
		c.send(reqBody(chatBody, true))
		m := c.recv()
		if got := kinds([]*extprocv3.ProcessingResponse{m}); !cmp.Equal([]string{"req_body+route"}, got) {
			t.Fatalf("body: %v", got)
		}
		dest := headerMap(m.GetRequestBody().GetResponse().GetHeaderMutation())[headerDestination]
		if dest != "10.0.0.7:8000" && dest != "10.0.0.8:8000" {
			t.Fatalf("destination %q", dest)
		}
		ts.waitStats("booked", func(s sched.Stats) bool { return s.InFlight[sched.PriorityDefault] == 1 })
		c.finish()
		ts.waitIdle()
	})
}

func TestServer_GetRoutesWithoutAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startServer(t, Config{}, oneWorker)
		c := ts.open()
		c.send(reqHeaders(proto{req: modeBuffered}, "GET", "/v1/models", true))
		if got := c.recvKinds(1); !cmp.Equal([]string{"req_headers+route"}, got) {
			t.Fatalf("%v", got)
		}
		_ = c.s.CloseSend()
		if err := c.end(); !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		s, _ := ts.srv.Stats(context.Background())
		if s.Admits[sched.PriorityDefault][sched.OutcomeAdmitted] != 0 {
			t.Error("a GET was counted as an admission")
		}
	})
}

func TestServer_ClientCancelWhileQueuedThenCapacityFrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startServer(t, Config{Sched: sched.Config{Priority: testPriority()}}, oneWorker)
		p := proto{req: modeBuffered, resp: modeStreamed}
		admit := func() *clientStream {
			c := ts.open()
			c.send(reqHeaders(p, "POST", "/v1/chat/completions", false))
			c.recv()
			c.send(reqBody(chatBody, true))
			return c
		}
		a := admit()
		if got := a.recvKinds(1); !cmp.Equal([]string{"req_body+route"}, got) {
			t.Fatalf("a: %v", got)
		}
		b := admit()
		if got := b.recvKinds(1); !cmp.Equal([]string{"override 30.1s"}, got) {
			t.Fatalf("b queued: %v", got)
		}
		ts.waitStats("b queued", func(s sched.Stats) bool { return s.QueueDepth[sched.PriorityDefault] == 1 })
		b.cancel() // Envoy resets the stream: the client went away.
		ts.waitStats("b gone", func(s sched.Stats) bool {
			return s.QueueDepth[sched.PriorityDefault] == 0 && s.Admits[sched.PriorityDefault][sched.OutcomeClientCancelled] == 1
		})
		c := admit()
		if got := c.recvKinds(1); !cmp.Equal([]string{"override 30.1s"}, got) {
			t.Fatalf("c queued: %v", got)
		}
		a.finish()
		if got := c.recvKinds(1); !cmp.Equal([]string{"req_body+route"}, got) {
			t.Fatalf("c after a finished: %v", got)
		}
		c.finish()
		ts.waitIdle()
	})
}

// TestServer_HalfCloseWhileQueuedLeavesTheQueue: Envoy half-closes without
// a reset only under an opt-in runtime flag, when the client has gone, and
// resets the stream remote_close_timeout later (envoy-source-audit.md 8a).
// A queued stream still receives, so it sees the half-close at once: the
// request leaves the queue before its turn and the stream ends cleanly.
func TestServer_HalfCloseWhileQueuedLeavesTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startServer(t, Config{Sched: sched.Config{Priority: testPriority()}}, oneWorker)
		p := proto{req: modeBuffered}
		a, b := ts.admitThenQueue(p)
		if err := b.s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if err := b.end(); !errors.Is(err, io.EOF) {
			t.Fatalf("b end %v", err)
		}
		var st sched.Stats
		ts.waitStats("b out of the queue", func(s sched.Stats) bool { st = s; return s.QueueDepth[sched.PriorityDefault] == 0 })
		if got := st.Admits[sched.PriorityDefault][sched.OutcomeClientCancelled]; got != 1 {
			t.Errorf("client_cancelled %d, want 1", got)
		}
		a.finish()
		ts.waitIdle()
	})
}

// TestServer_PreemptedVictimGetsTheImmediateResponse: a victim with no
// message outstanding gets SMG's 503 as an unsolicited ImmediateResponse,
// which Envoy accepts whenever processing is not complete
// (ext_proc.cc:1876-1899), and its stream then ends cleanly.
func TestServer_PreemptedVictimGetsTheImmediateResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Sched: sched.Config{Priority: testPriority()}, Tenancy: &intake.Tenancy{DefaultMaxClass: "system"}}
		ts := startServer(t, cfg, oneWorker)
		p := proto{req: modeBuffered, resp: modeStreamed, early: true}
		victim := ts.open()
		victim.send(reqHeaders(p, "POST", "/v1/chat/completions", false, "x-smg-priority", "bulk"), reqBody(chatBody, true))
		if got := victim.recvKinds(2); !cmp.Equal([]string{"req_headers", "req_body+route"}, got) {
			t.Fatalf("victim: %v", got)
		}
		urgent := ts.open()
		urgent.send(reqHeaders(p, "POST", "/v1/chat/completions", false, "x-smg-priority", "interactive"), reqBody(chatBody, true))
		ir := victim.recv().GetImmediateResponse()
		if ir.GetStatus().GetCode() != 503 || headerMap(ir.GetHeaders())["x-smg-preempted"] != "true" {
			t.Fatalf("victim answer %v", ir)
		}
		if err := victim.end(); !errors.Is(err, io.EOF) {
			t.Fatalf("victim end %v, want a clean end", err)
		}
		// The victim's slot goes to the preemptor.
		urgent.untilRoute()
		urgent.finish()
		ts.waitIdle()
		s, _ := ts.srv.Stats(context.Background())
		if s.Preemptions[sched.PriorityBulk][sched.PriorityInteractive] != 1 {
			t.Errorf("preemptions %v", s.Preemptions)
		}
	})
}

func TestServer_PreemptedVictimWithHeldResponseGets503(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Sched: sched.Config{Priority: testPriority()}, Tenancy: &intake.Tenancy{DefaultMaxClass: "system"}}
		ts := startServer(t, cfg, oneWorker)
		p := proto{req: modeBuffered, resp: modeStreamed, early: true}
		victim := ts.open()
		victim.send(reqHeaders(p, "POST", "/v1/chat/completions", false, "x-smg-priority", "bulk"), reqBody(chatBody, true))
		victim.recvKinds(2)
		victim.send(respHeaders(false))
		victim.quiet(50 * time.Millisecond) // held until the first token
		urgent := ts.open()
		urgent.send(reqHeaders(p, "POST", "/v1/chat/completions", false, "x-smg-priority", "interactive"), reqBody(chatBody, true))
		m := victim.recv()
		ir := m.GetImmediateResponse()
		if ir.GetStatus().GetCode() != 503 || headerMap(ir.GetHeaders())["x-smg-preempted"] != "true" {
			t.Fatalf("victim got %v", kinds([]*extprocv3.ProcessingResponse{m}))
		}
		if err := victim.end(); !errors.Is(err, io.EOF) {
			t.Fatalf("victim end %v", err)
		}
		urgent.untilRoute()
		urgent.finish()
		ts.waitIdle()
	})
}

func TestServer_DrainAnswersQueuedAndWaitsForInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startServer(t, Config{Sched: sched.Config{Priority: testPriority()}, DrainDelay: 10 * time.Millisecond}, oneWorker)
		p := proto{req: modeBuffered, resp: modeStreamed}
		a, b := ts.admitThenQueue(p)
		drained := make(chan error, 1)
		go func() { drained <- ts.srv.Drain(context.Background()) }()
		m := b.recv()
		ir := m.GetImmediateResponse()
		if ir.GetStatus().GetCode() != 503 || headerMap(ir.GetHeaders())["retry-after"] == "" {
			t.Fatalf("queued request got %v", kinds([]*extprocv3.ProcessingResponse{m}))
		}
		hc, err := ts.health.Check(context.Background(), &healthgrpc.HealthCheckRequest{Service: ServiceName})
		if err != nil || hc.GetStatus() != healthgrpc.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("health while draining %v %v", hc.GetStatus(), err)
		}
		rec := httptest.NewRecorder()
		ts.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz while draining: %d", rec.Code)
		}
		// A new arrival is answered 503 too.
		c := ts.open()
		c.send(reqHeaders(p, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
		c.recv()
		if ir := c.recv().GetImmediateResponse(); ir.GetStatus().GetCode() != 503 {
			t.Fatalf("arrival while draining: %v", ir)
		}
		synctest.Wait()
		select {
		case err := <-drained:
			t.Fatalf("drain returned %v with a request in flight", err)
		default:
		}
		a.finish()
		if err := <-drained; err != nil {
			t.Fatal(err)
		}
		ts.waitIdle()
	})
}

func TestServer_StandbyAnswersQueuedAndNewRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startServer(t, Config{Sched: sched.Config{Priority: testPriority()}}, oneWorker)
		p := proto{req: modeBuffered, resp: modeStreamed}
		a, b := ts.admitThenQueue(p)
		if err := ts.srv.SetActive(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		if ir := b.recv().GetImmediateResponse(); ir.GetStatus().GetCode() != 503 || headerMap(ir.GetHeaders())["retry-after"] == "" {
			t.Fatalf("queued request on losing the lease got %v", ir)
		}
		hc, err := ts.health.Check(context.Background(), &healthgrpc.HealthCheckRequest{Service: ServiceName})
		if err != nil || hc.GetStatus() != healthgrpc.HealthCheckResponse_NOT_SERVING || ts.srv.Ready() {
			t.Fatalf("standby health %v %v, ready %v", hc.GetStatus(), err, ts.srv.Ready())
		}
		c := ts.open()
		c.send(reqHeaders(p, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
		c.recv()
		if ir := c.recv().GetImmediateResponse(); ir.GetStatus().GetCode() != 503 {
			t.Fatalf("arrival on a standby: %v", ir)
		}
		a.finish() // the request dispatched before the lease was lost completes

		if err := ts.srv.SetActive(context.Background(), true); err != nil {
			t.Fatal(err)
		}
		if !ts.srv.Ready() {
			t.Fatal("not ready after regaining the lease")
		}
		d := ts.open()
		d.send(reqHeaders(p, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
		if got := d.recvKinds(2); !cmp.Equal([]string{"req_headers", "req_body+route"}, got) {
			t.Fatalf("arrival after regaining the lease: %v", got)
		}
		d.finish()
		ts.waitIdle()
	})
}

func TestServer_StandbyBeforeRunStaysStandby(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startServerWith(t, Config{}, oneWorker, func(s *Server) {
			if err := s.SetActive(context.Background(), false); err != nil {
				t.Fatal(err)
			}
		})
		p := proto{req: modeBuffered, resp: modeStreamed}
		c := ts.open()
		c.send(reqHeaders(p, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
		c.recv()
		if ir := c.recv().GetImmediateResponse(); ir.GetStatus().GetCode() != 503 {
			t.Fatalf("a server made standby before Run admitted a request: %v", ir)
		}
		ts.waitIdle()
	})
}

func TestServer_HealthFollowsWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startServer(t, Config{}, nil)
		check := func(want healthgrpc.HealthCheckResponse_ServingStatus) {
			t.Helper()
			for _, svc := range []string{"", ServiceName} {
				hc, err := ts.health.Check(context.Background(), &healthgrpc.HealthCheckRequest{Service: svc})
				if err != nil || hc.GetStatus() != want {
					t.Fatalf("health %q = %v %v, want %v", svc, hc.GetStatus(), err, want)
				}
			}
		}
		check(healthgrpc.HealthCheckResponse_NOT_SERVING)
		if err := ts.srv.SetWorkers(oneWorker); err != nil {
			t.Fatal(err)
		}
		check(healthgrpc.HealthCheckResponse_SERVING)
		if err := ts.srv.SetWorkers([]fleet.Worker{{ID: "w0", Address: "gpu-0:8000"}}); err == nil || !strings.Contains(err.Error(), `worker "w0"`) {
			t.Fatalf("hostname accepted: %v", err)
		}
		check(healthgrpc.HealthCheckResponse_SERVING)
	})
}

func TestServer_WorkerRemovalAnswersQueuedPinnedRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ws := []fleet.Worker{{ID: "w0", Address: "10.0.0.7:8000", MaxRunningRequests: 1}, {ID: "w1", Address: "10.0.0.8:8000", MaxRunningRequests: 1}}
		ts := startServer(t, Config{Sched: sched.Config{Priority: testPriority()}}, ws)
		p := proto{req: modeBuffered}
		var held []*clientStream
		for range 2 {
			c := ts.open()
			c.send(reqHeaders(p, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
			if got := c.recvKinds(2); got[1] != "req_body+route" {
				t.Fatalf("fill: %v", got)
			}
			held = append(held, c)
		}
		pinned := ts.open()
		pinned.send(reqHeaders(p, "POST", "/v1/chat/completions", false, "x-dynamo-worker-instance-id", "w1"), reqBody(chatBody, true))
		pinned.recvKinds(2)
		if err := ts.srv.SetWorkers(ws[:1]); err != nil {
			t.Fatal(err)
		}
		ir := pinned.recv().GetImmediateResponse()
		if ir.GetStatus().GetCode() != 503 || !strings.Contains(string(ir.GetBody()), "w1") {
			t.Fatalf("pinned: %d %s", ir.GetStatus().GetCode(), ir.GetBody())
		}
		for _, c := range held {
			c.finish()
		}
		ts.waitIdle()
	})
}

// TestServer_MessageOverTheReceiveLimitFailsClosed: gRPC itself ends a
// stream whose message exceeds the receive limit; Envoy then answers with
// its status_on_error, and nothing stays booked.
func TestServer_MessageOverTheReceiveLimitFailsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startServer(t, Config{MaxBodyBytes: 1024, MaxHeaderBytes: 1024}, oneWorker)
		c := ts.open()
		c.send(reqHeaders(proto{req: modeBuffered}, "POST", "/v1/completions", false))
		c.recv()
		_ = c.s.Send(reqBody(strings.Repeat("x", 300<<10), true)) // over 1 KiB + 1 KiB + 256 KiB
		if err := c.end(); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("end %v", err)
		}
		ts.waitIdle()
	})
}

func TestServer_ClientIPFromForwardedFor(t *testing.T) {
	tenants, err := policy.NewTenants(policy.TenantOptions{})
	if err != nil {
		t.Fatal(err)
	}
	file := policy.DefaultPriorityFile()
	file.Tenants["ip:198.51.100.7"] = sched.PriorityBulk
	cfg := testConfig(func(c *Config) {
		c.ClientIP, c.ForwardedForTrustedHops = ClientIPForwardedFor, 1
		c.Tenancy = &intake.Tenancy{Tenants: tenants, PriorityFile: file}
	})
	x, env, _ := newTestExchange(t, cfg)
	feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false,
		"x-forwarded-for", "198.51.100.7, 10.1.1.1", "x-smg-priority", "interactive"), reqBody(chatBody, true))
	if x.who.Tenant != "ip:198.51.100.7" || env.submits[0].Priority != sched.PriorityBulk {
		t.Fatalf("tenant %q priority %v", x.who.Tenant, env.submits[0].Priority)
	}
	// The default source is the source.address attribute, never the peer.
	x, _, _ = newTestExchange(t, testConfig(nil))
	feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false, "x-forwarded-for", "198.51.100.7"))
	if x.who.Tenant != "ip:192.0.2.10" {
		t.Fatalf("tenant %q", x.who.Tenant)
	}
}

// TestServer_StatsUntilRunStops: the scheduler answers from the start,
// before Run too; once Run has stopped, nothing does.
func TestServer_StatsUntilRunStops(t *testing.T) {
	srv, err := New(Config{}, oneWorker)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := srv.Stats(context.Background()); !ok || st.Capacity == 0 {
		t.Fatalf("Stats before Run: %v, capacity %d", ok, st.Capacity)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Run(ctx); close(done) }()
	if st, ok := srv.Stats(context.Background()); !ok || st.Capacity == 0 {
		t.Fatalf("Stats while Run runs: %v, capacity %d", ok, st.Capacity)
	}
	cancel()
	<-done
	if _, ok := srv.Stats(context.Background()); ok {
		t.Fatal("Stats answered after Run stopped")
	}
}

// TestServer_AnsweredStreamEnvoyKeepsOpenIsReset: a queued request answered
// off its stream goroutine (here by Drain's shedding) waits for Envoy to
// close the stream, as Envoy does once it has the final answer; a peer
// that never closes it is reset after answeredCloseWait, so the stream's
// goroutine never outlives the exchange for long.
func TestServer_AnsweredStreamEnvoyKeepsOpenIsReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startServer(t, Config{Sched: sched.Config{Priority: testPriority()}}, oneWorker)
		p := proto{req: modeBuffered, resp: modeStreamed}
		a, b := ts.admitThenQueue(p)
		go func() { _ = ts.srv.Drain(context.Background()) }()
		r := <-b.in // read without closing, unlike recv
		if ir := r.m.GetImmediateResponse(); ir.GetStatus().GetCode() != 503 {
			t.Fatalf("queued request got %v (%v)", kinds([]*extprocv3.ProcessingResponse{r.m}), r.err)
		}
		start := time.Now()
		r = <-b.in
		if status.Code(r.err) != codes.Canceled {
			t.Fatalf("stream end %v, want a reset", r.err)
		}
		if waited := time.Since(start); waited != answeredCloseWait {
			t.Errorf("reset after %v, want %v", waited, answeredCloseWait)
		}
		a.finish()
		ts.waitIdle()
	})
}

// TestServer_DecidedAtOnceEndsOnTheStream: a submit the scheduler decides
// at once is answered on the stream goroutine, before its next Recv, so a
// rejection ends the stream cleanly right after its answer: it does not
// wait for Envoy to close the stream, as an answer sent from elsewhere
// must (TestServer_AnsweredStreamEnvoyKeepsOpenIsReset).
func TestServer_DecidedAtOnceEndsOnTheStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startServer(t, Config{}, []fleet.Worker{{ID: "w0", Address: "10.0.0.7:8000", Model: "llama"}})
		c := ts.open()
		p := proto{req: modeBuffered, resp: modeStreamed}
		c.send(reqHeaders(p, "POST", "/v1/chat/completions", false), reqBody(`{"model":"gpt-nope","messages":[{"role":"user","content":"hi"}]}`, true))
		c.recv()    // the headers' reply
		r := <-c.in // read without closing, unlike recv
		if ir := r.m.GetImmediateResponse(); ir.GetStatus().GetCode() != 404 {
			t.Fatalf("got %v (%v), want the 404", kinds([]*extprocv3.ProcessingResponse{r.m}), r.err)
		}
		start := time.Now()
		r = <-c.in
		if !errors.Is(r.err, io.EOF) || time.Since(start) != 0 {
			t.Fatalf("stream end %v after %v, want a clean end at once", r.err, time.Since(start))
		}
	})
}

// TestServer_UnknownModelIs404: a model no worker of the fleet has served
// gets OpenAI's 404 model_not_found, which clients do not retry (vLLM gives
// the same); a known model whose workers are all gone for now keeps the
// protocol's 503, which they retry.
func TestServer_UnknownModelIs404(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startServer(t, Config{}, []fleet.Worker{{ID: "w0", Address: "10.0.0.7:8000", Model: "llama"}})
		p := proto{req: modeBuffered, resp: modeStreamed}
		ask := func(model string) *extprocv3.ImmediateResponse {
			c := ts.open()
			c.send(reqHeaders(p, "POST", "/v1/chat/completions", false), reqBody(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`, true))
			c.recv() // the headers' reply
			return c.recv().GetImmediateResponse()
		}
		ir := ask("gpt-nope")
		want := "{\"error\":{\"message\":\"The model `gpt-nope` does not exist.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_not_found\"}}"
		if ir.GetStatus().GetCode() != 404 || string(ir.GetBody()) != want {
			t.Fatalf("unknown model: %d %s", ir.GetStatus().GetCode(), ir.GetBody())
		}
		if err := ts.srv.SetWorkers([]fleet.Worker{{ID: "w1", Address: "10.0.0.8:8000", Model: "qwen"}}); err != nil {
			t.Fatal(err)
		}
		if ir := ask("llama"); ir.GetStatus().GetCode() != 503 {
			t.Fatalf("known model without workers: %d %s", ir.GetStatus().GetCode(), ir.GetBody())
		}
	})
}
