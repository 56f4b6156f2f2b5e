package bench

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/sched/policy"
)

// startExtProc serves an in-process tollgate server routing to upstream and
// returns its gRPC address and its metrics base URL.
func startExtProc(t *testing.T, upstream string, slots uint32, priorityYAML string) (string, string) {
	t.Helper()
	// A long message timeout: under the race detector a burst of streams
	// may take more than Envoy's usual 1 s to be queued.
	cfg := extproc.Config{Logger: slog.New(slog.DiscardHandler), DrainDelay: -1, EnvoyMessageTimeout: testMessageTimeout}
	if priorityYAML != "" {
		pf, err := policy.ParsePriorityConfig([]byte(priorityYAML), "")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Sched.Priority = pf.PriorityConfig()
	}
	srv, err := extproc.New(cfg, []fleet.Worker{{ID: "w0", Address: upstream, MaxRunningRequests: slots}})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := make(chan struct{})
	go func() { defer close(run); _ = srv.Run(ctx) }()
	serve := make(chan struct{})
	go func() { defer close(serve); _ = gs.Serve(l) }()
	metrics := httptest.NewServer(srv.MetricsHandler())
	t.Cleanup(func() {
		metrics.Close()
		gs.Stop()
		<-serve
		cancel()
		<-run
		srv.Wait()
	})
	return l.Addr().String(), metrics.URL
}

// testMessageTimeout is the Envoy message timeout of these tests.
const testMessageTimeout = 5 * time.Second

func startUpstream(t *testing.T) string {
	t.Helper()
	up := httptest.NewServer(NewUpstream())
	t.Cleanup(up.Close)
	return strings.TrimPrefix(up.URL, "http://")
}

func TestRunLoad(t *testing.T) {
	ext, _ := startExtProc(t, startUpstream(t), 0, "")
	for _, m := range []Mode{ModeBuffered, ModeDuplex} {
		// No warm-up and a window long enough for the first requests
		// (connection set-up under the race detector on a loaded machine)
		// to end inside it.
		r, err := RunLoad(context.Background(), LoadConfig{ExtProcAddr: ext, Mode: m, Concurrency: 4,
			Duration: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if r.Requests == 0 || r.Errors != 0 || r.RPS <= 0 {
			t.Fatalf("%s: %d requests, %d errors (%s), %v req/s", m, r.Requests, r.Errors, r.FirstError, r.RPS)
		}
		if r.TotalP50 <= 0 || r.TotalP99 < r.TotalP50 || r.DecisionP50 <= 0 || r.DecisionP50 > r.TotalP50 {
			t.Errorf("%s: implausible latencies %+v", m, r)
		}
		if r.Mode != m || r.Concurrency != 4 || r.Seconds != 1 {
			t.Errorf("%s: result describes %s at %d for %vs", m, r.Mode, r.Concurrency, r.Seconds)
		}
	}
	if _, err := RunLoad(context.Background(), LoadConfig{ExtProcAddr: ext, Mode: ModeBuffered}); err == nil {
		t.Error("a load without concurrency or duration was accepted")
	}
}

func TestRunHold(t *testing.T) {
	const prio = `classes:
  system: {reserved_floor: 0, queue_size: 8, queue_timeout_secs: 30, starvation_threshold_secs: 5, can_preempt: true}
  interactive: {reserved_floor: 0, queue_size: 8, queue_timeout_secs: 30, starvation_threshold_secs: 5, can_preempt: true}
  default: {reserved_floor: 0, queue_size: 1000, queue_timeout_secs: 300, starvation_threshold_secs: 3600, can_preempt: false}
  bulk: {reserved_floor: 0, queue_size: 8, queue_timeout_secs: 300, starvation_threshold_secs: 120, can_preempt: false}
`
	upstream := startUpstream(t)
	ext, metrics := startExtProc(t, upstream, 4, prio)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	pp := httptest.NewServer(mux)
	t.Cleanup(pp.Close)
	r, err := RunHold(context.Background(), HoldConfig{ExtProcAddr: ext, MetricsURL: metrics, UpstreamURL: "http://" + upstream,
		PprofURL: pp.URL, PID: os.Getpid(), Held: 150, Running: 4, Conns: 2, Warmup: 20, MessageTimeout: testMessageTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if r.Held != 150 || r.Errors != 0 || r.EarlyFinishes != 0 {
		t.Fatalf("held %d, %d errors (%s), %d early finishes", r.Held, r.Errors, r.FirstError, r.EarlyFinishes)
	}
	if r.BaseRSS == 0 || r.HeldRSS == 0 || r.Drain <= 0 || r.DrainPerHeld != r.Drain/150 {
		t.Errorf("implausible measurement %+v", r)
	}
	// The test process hosts the client too, so only the source (the
	// server's own go_goroutines, preferred over pprof) and a lower bound
	// (at least the server's handler per held stream) are checked.
	if r.GoroutineSource != "go_goroutines" || r.GoroutinesPerHeld < 1 {
		t.Errorf("goroutines: %v per held request from %q", r.GoroutinesPerHeld, r.GoroutineSource)
	}

	_, err = RunHold(context.Background(), HoldConfig{ExtProcAddr: ext, MetricsURL: metrics, UpstreamURL: "http://" + upstream,
		PID: os.Getpid(), Held: 10, Running: 4, Warmup: 4, QueueMetric: "no_such_metric", MessageTimeout: testMessageTimeout})
	if err == nil || !strings.Contains(err.Error(), "no_such_metric") {
		t.Errorf("hold with an unknown queue metric: %v, want an error naming it", err)
	}
}

func TestRunLong(t *testing.T) {
	ext, _ := startExtProc(t, startUpstream(t), 0, "")
	servers := []LongServer{{Name: "a", Addr: ext}, {Name: "b", Addr: ext}}
	for _, m := range []Mode{ModeBuffered, ModeDuplex} {
		r, err := RunLong(context.Background(), LongConfig{Servers: servers, Mode: m, ChunkBytes: 4096, Model: BenchModel,
			ContextBytes: 20000, Requests: 3, Warmup: 1, Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		if r.Mode != m || r.Requests != 3 || r.BodyBytes < 20000 || len(r.Passes) != 2 {
			t.Fatalf("%s: result %+v", m, r)
		}
		for _, pass := range []string{PassUnseen, PassSeen} {
			for _, srv := range []string{"a", "b"} {
				s, ok := r.Find(pass, srv)
				if !ok {
					t.Fatalf("%s: no %s/%s", m, pass, srv)
				}
				if s.Requests != 3 || s.Errors != 0 || len(s.Decisions) != 3 || s.DecisionP50 <= 0 || s.DecisionP99 < s.DecisionP50 {
					t.Errorf("%s %s %s: %+v", m, pass, srv, s)
				}
			}
			if d := r.PairedDiffs(pass, "a", "b"); len(d) != 3 {
				t.Errorf("%s %s: %d paired differences, want 3", m, pass, len(d))
			}
		}
	}
	if _, err := RunLong(context.Background(), LongConfig{Mode: ModeBuffered, Requests: 1}); err == nil {
		t.Error("a run without servers was accepted")
	}
}

func TestRunLoadStreamedResponses(t *testing.T) {
	ext, _ := startExtProc(t, startUpstream(t), 0, "")
	var msgs [2]float64
	for i, oneWrite := range []bool{false, true} {
		r, err := RunLoad(context.Background(), LoadConfig{ExtProcAddr: ext, Mode: ModeBuffered, Concurrency: 2,
			Duration: time.Second, ResponseChunks: 8, ChunkGap: 2 * time.Millisecond, OneWrite: oneWrite, Shipped: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Requests == 0 || r.Errors != 0 || r.Completed == 0 {
			t.Fatalf("one write %v: %d requests, %d errors (%s)", oneWrite, r.Requests, r.Errors, r.FirstError)
		}
		msgs[i] = float64(r.MsgsSent) / float64(r.Completed)
	}
	// Headers, body, response headers, the body chunks and the end:
	// streamed, up to a message per event (12), fewer when a loaded
	// machine reads two events in one go; written at once, a few.
	if msgs[0] < 9 || msgs[1] > 7 {
		t.Errorf("messages per request: streamed %.1f, one write %.1f", msgs[0], msgs[1])
	}
}
