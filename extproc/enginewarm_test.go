package extproc

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate/tollgate/extproc/engine/enginemetrics"
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/sched"
)

// fakeEngines answers engine metrics scrapes in memory, by host, so the
// scraper runs inside a synctest bubble; a host without a body answers
// 404, as a worker that serves no /metrics does.
type fakeEngines map[string]string

func (f fakeEngines) RoundTrip(r *http.Request) (*http.Response, error) {
	body, ok := f[r.URL.Host]
	status := http.StatusOK
	if !ok {
		status = http.StatusNotFound
	}
	return &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
}

// vllmLoad is a vLLM exposition of one engine's queue.
func vllmLoad(waiting, running float64) string {
	return fmt.Sprintf("vllm:num_requests_waiting{engine=\"0\"} %g\nvllm:num_requests_running{engine=\"0\"} %g\n", waiting, running)
}

// engineTestConfig is SMG admission with engine signals at the shipped
// defaults, scraping engines.
func engineTestConfig(engines fakeEngines) Config {
	interval, timeout := enginemetrics.DefaultInterval, enginemetrics.DefaultTimeout
	return Config{
		Sched: sched.Config{Priority: testPriority(), Engine: sched.EngineConfig{
			MaxAge: 2 * time.Second, Saturation: true, WaitingThreshold: 5, KVThreshold: 0.8,
			WarmStart: true, WarmWait: 2*interval + timeout, Capacity: true,
		}},
		EngineMetrics: &enginemetrics.Config{Interval: interval, Timeout: timeout, Client: &http.Client{Transport: engines}},
	}
}

// sendChat opens a stream and sends a buffered chat request.
func (ts *testServer) sendChat() *clientStream {
	ts.t.Helper()
	c := ts.open()
	c.send(reqHeaders(proto{req: modeBuffered, resp: modeStreamed}, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
	return c
}

// routeOf waits for the reply carrying the route and returns its
// destination; it fails on any other answer.
func (c *clientStream) routeOf() string {
	c.t.Helper()
	for {
		m := c.recv()
		k := kinds([]*extprocv3.ProcessingResponse{m})[0]
		switch {
		case strings.HasSuffix(k, "+route"):
			return headerMap(m.GetRequestBody().GetResponse().GetHeaderMutation())[headerDestination]
		case k == "req_headers", strings.HasPrefix(k, "override"):
		default:
			c.t.Fatalf("got %s while waiting for the route", k)
		}
	}
}

// TestServer_LyingEngineLeavesTheOtherWorkersOpen: one of eight engines
// reports 1e9 waiting requests for as long as it answers. The other seven
// workers' 28 slots admit at once; the liar's report holds only its own 4
// slots and it gets no request.
func TestServer_LyingEngineLeavesTheOtherWorkersOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		engines := fakeEngines{}
		var workers []fleet.Worker
		for i := range 8 {
			addr := fmt.Sprintf("10.0.0.%d:8000", 10+i)
			workers = append(workers, fleet.Worker{ID: fmt.Sprintf("w%d", i), Address: addr, MaxRunningRequests: 4})
			engines[addr] = vllmLoad(0, 0)
		}
		liar := workers[0].Address
		engines[liar] = vllmLoad(1e9, 4)
		ts := startServer(t, engineTestConfig(engines), workers)
		start := time.Now()
		perAddr := map[string]int{}
		var streams []*clientStream
		for range 28 {
			c := ts.sendChat()
			perAddr[c.routeOf()]++
			streams = append(streams, c)
		}
		t.Logf("28 requests routed %v after the start: %v", time.Since(start), perAddr)
		if perAddr[liar] != 0 || len(perAddr) != 7 {
			t.Fatalf("routes %v; want 4 on each worker but the liar", perAddr)
		}
		for addr, n := range perAddr {
			if n != 4 {
				t.Fatalf("%s got %d requests, want its 4 slots: %v", addr, n, perAddr)
			}
		}
		queued := ts.sendChat()
		ts.waitStats("full", func(s sched.Stats) bool {
			return s.QueueDepth[sched.PriorityDefault] == 1 && s.InFlight[sched.PriorityDefault] == 28 && s.Seeded == 4
		})
		// The liar keeps answering; its seed still holds only its own slots.
		time.Sleep(5 * time.Second)
		ts.waitStats("liar still seeded", func(s sched.Stats) bool { return s.Seeded == 4 && !s.Warming })
		streams[0].finish()
		if got := queued.routeOf(); got == liar {
			t.Fatalf("queued request routed to the liar %s", got)
		}
	})
}

// TestServer_WarmStartHoldsRequestsInsteadOfRefusing: a class with
// queue_size 0, and one worker that serves no /metrics, so the warm start
// lasts its whole bound. A request arriving meanwhile waits for the warm
// start to end and is routed then; health says SERVING throughout.
func TestServer_WarmStartHoldsRequestsInsteadOfRefusing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		engines := fakeEngines{"10.0.0.7:8000": vllmLoad(0, 1)}
		workers := []fleet.Worker{
			{ID: "a", Address: "10.0.0.7:8000", MaxRunningRequests: 2},
			{ID: "b", Address: "10.0.0.8:8000", MaxRunningRequests: 2},
		}
		cfg := engineTestConfig(engines)
		cfg.Sched.Priority.Classes[sched.PriorityDefault].QueueSize = 0
		ts := startServer(t, cfg, workers)
		start := time.Now()
		c := ts.sendChat()
		ts.waitStats("held", func(s sched.Stats) bool { return s.Warming && s.QueueDepth[sched.PriorityDefault] == 1 })
		h, err := ts.health.Check(context.Background(), &healthgrpc.HealthCheckRequest{})
		if err != nil || h.GetStatus() != healthgrpc.HealthCheckResponse_SERVING {
			t.Fatalf("health during the warm start: %v %v; want SERVING (requests wait there)", h.GetStatus(), err)
		}
		dest := c.routeOf()
		waited := time.Since(start)
		t.Logf("routed to %s after %v", dest, waited)
		bound := cfg.Sched.Engine.WarmWait
		if waited < bound || waited > bound+cfg.EngineMetrics.Interval {
			t.Fatalf("routed after %v; want when the warm start's bound %v ends", waited, bound)
		}
	})
}
