package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/test/mockworker"
)

// TestEngine_SlowWorkerIsAvoidedWithMetrics runs the engine-truth scenario
// at a small size: without engine metrics worker-0 keeps its share of the
// requests, with them it is passed over while its engine queue is past the
// threshold.
func TestEngine_SlowWorkerIsAvoidedWithMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two arms of a few seconds each")
	}
	arms, err := runEngine(t.Context(), engineConfig{requests: 90, speed: 2, seed: 1, log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	off, on := arms[0], arms[1]
	for _, a := range arms {
		if a.Non200 != 0 || a.Total != 90 {
			t.Fatalf("%s: %d of %d requests not 200", a.Name, a.Non200, a.Total)
		}
		t.Logf("%s: TTFT p50 %v p99 %v, %d to worker-0, peak queue %d", a.Name, a.P50, a.P99, a.ToSlow, a.PeakQueue)
	}
	if off.ToSlow < 5 {
		t.Errorf("bookings only: %d requests to worker-0; want it kept in the rotation", off.ToSlow)
	}
	if 3*on.ToSlow >= 2*off.ToSlow {
		t.Errorf("with engine metrics %d requests went to worker-0, without %d; want at least a third fewer", on.ToSlow, off.ToSlow)
	}
	var svg bytes.Buffer
	if err := WriteSVG(&svg, engineChart(arms)); err != nil {
		t.Fatal(err)
	}
	if panels := parseSVG(t, svg.Bytes()); len(panels) != 2 || len(panels[0].series) != 2 || len(panels[1].series) != 2 {
		t.Fatalf("engine chart: %+v; want the queue and the TTFT of both arms", panels)
	}
}

// TestEngine_FailoverWarmStartStaysWithinCapacity: two workers already
// run 3 requests each for a server that is gone; a new server starts and
// gets a burst of 8. The workers state no max_running_requests; their
// engines report 4 (SGLang naming). With the warm start the new server
// admits only the free slots, so no engine ever queues; without it (the
// control) it takes the workers for idle and floods them.
func TestEngine_FailoverWarmStartStaysWithinCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two servers of about two seconds each")
	}
	for _, warm := range []bool{true, false} {
		peaks := runFailover(t, warm)
		for i, p := range peaks {
			t.Logf("warm start %v: worker-%d peak running %d, peak waiting %d", warm, i, p.MaxRunning, p.MaxWaiting)
			if warm && (p.MaxRunning > 4 || p.MaxWaiting > 0) {
				t.Errorf("warm start: worker-%d ran %d and queued %d; want at most its 4 and no queue", i, p.MaxRunning, p.MaxWaiting)
			}
		}
		if !warm && peaks[0].MaxWaiting+peaks[1].MaxWaiting == 0 {
			t.Errorf("without warm start no engine queued: the scenario does not detect a flood")
		}
	}
}

// runFailover runs one failover and returns each worker's stats after the
// new server's first second.
func runFailover(t *testing.T, warm bool) []mockworker.Stats {
	t.Helper()
	ctx := t.Context()
	log := testLogger(t)
	gate := mockworker.NewGate()
	hold := func(ctx context.Context, req mockworker.RequestInfo) error {
		if req.Header.Get("X-Old-Leader") != "" {
			return gate.Wait(ctx, req)
		}
		return nil
	}
	st := &stack{}
	t.Cleanup(func() {
		gate.Open()
		st.close()
	})
	var workers []fleet.Worker
	for i := range 2 {
		sw, err := startWorker(ctx, fmt.Sprintf("worker-%d", i), workerSpec{
			maxNumSeqs: 4, prefillRate: 8000, decodeRate: 50, hold: hold, naming: "sglang",
		}, 1, log)
		if err != nil {
			t.Fatal(err)
		}
		st.workers = append(st.workers, sw)
		workers = append(workers, fleet.Worker{ID: sw.id, Address: sw.addr, Model: demoModel})
	}
	// The old server's requests: three in flight on each worker.
	var old sync.WaitGroup
	t.Cleanup(old.Wait)
	for _, sw := range st.workers {
		for i := range 3 {
			old.Go(func() {
				body := completionBody(7000+i, 64, 4, false)
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+sw.addr+"/v1/completions", bytes.NewReader(body))
				if err != nil {
					return
				}
				req.Header.Set("X-Old-Leader", "1")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			})
		}
		if err := sw.w.Await(ctx, func(s mockworker.Stats) bool { return s.Running == 3 }); err != nil {
			t.Fatal(err)
		}
	}

	cfg, err := engineServerConfig(serverSpec{priority: true, seed: 1}, true, log)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sched.Engine.WarmStart = warm
	for p := range cfg.Sched.Priority.Classes {
		// No reservations: every slot is open to the burst's class.
		cfg.Sched.Priority.Classes[p].ReservedFloor = 0
		cfg.Sched.Priority.Classes[p].ReservedPerSlot = 0
	}
	if err := st.startServer(ctx, cfg, workers); err != nil {
		t.Fatal(err)
	}
	// The burst arrives with the new server: 8 requests of a second each.
	var burst sync.WaitGroup
	bctx, stopBurst := context.WithCancel(ctx)
	defer func() { stopBurst(); burst.Wait() }()
	for i := range 8 {
		burst.Go(func() {
			spec := &reqSpec{id: fmt.Sprintf("burst-%d", i), tokenID: 100 + i, tokens: 64, maxTokens: 50, stream: true}
			_, _ = st.sim.Do(bctx, spec.request())
		})
	}
	if err := sleepCtx(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if s, ok := st.srv.Stats(ctx); ok {
		t.Logf("capacity %d seeded %d warming %v inflight %v", s.Capacity, s.Seeded, s.Warming, s.InFlight)
		for _, r := range s.Ranks {
			t.Logf("rank %s: booked %d engine %+v", r.Worker, r.ActiveRequests, r.Engine)
		}
	}
	m, err := scrapeMetrics(ctx, st.metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	// What tollgate saw next to what it booked.
	for _, sw := range st.workers {
		l := map[string]string{"worker": sw.id, "rank": "0"}
		running := m.value("tollgate_engine_reported_requests", map[string]string{"worker": sw.id, "rank": "0", "state": "running"})
		if running < 3 {
			t.Errorf("%s: reported running %v; want the engine's 3 old requests at least", sw.id, running)
		}
		if len(m.matching("tollgate_worker_active_requests", l)) != 1 || len(m.matching("tollgate_engine_warm_seed_requests", l)) != 1 {
			t.Errorf("%s: booked or seeded requests not exported", sw.id)
		}
		if n := m.value("tollgate_engine_scrapes_total", map[string]string{"worker": sw.id}); n < 1 {
			t.Errorf("%s: %v scrapes counted", sw.id, n)
		}
	}
	var out []mockworker.Stats
	for _, sw := range st.workers {
		out = append(out, sw.w.Stats())
	}
	return out
}

// TestEngine_ScrapeOutageNeverHaltsDispatch points every worker's metrics
// URL (the per-worker override) at endpoints that hang, fail or send
// garbage: with the priority scheduler and the warm start on, requests are
// still served (after the warm start's bounded hold), and every failure is
// counted under its reason.
func TestEngine_ScrapeOutageNeverHaltsDispatch(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the warm start's hold")
	}
	ctx := t.Context()
	log := testLogger(t)
	bad := map[string]http.HandlerFunc{
		"timeout":     func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
		"http_status": func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) },
		"parse": func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("vllm:num_requests_waiting{{{ x\n"))
		},
	}
	st := &stack{}
	t.Cleanup(st.close)
	var workers []fleet.Worker
	reasons := []string{"timeout", "http_status", "parse"}
	for i, reason := range reasons {
		sw, err := startWorker(ctx, fmt.Sprintf("worker-%d", i), workerSpec{maxNumSeqs: 4, prefillRate: 8000, decodeRate: 50}, 1, log)
		if err != nil {
			t.Fatal(err)
		}
		st.workers = append(st.workers, sw)
		metrics := httptest.NewServer(bad[reason])
		t.Cleanup(metrics.Close)
		workers = append(workers, fleet.Worker{ID: sw.id, Address: sw.addr, Model: demoModel, MetricsURL: metrics.URL + "/metrics"})
	}
	cfg, err := engineServerConfig(serverSpec{priority: true, seed: 1}, true, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.startServer(ctx, cfg, workers); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	statuses := make([]int, 6)
	for i := range statuses {
		wg.Go(func() {
			spec := &reqSpec{id: fmt.Sprintf("outage-%d", i), tokenID: 10 + i, tokens: 32, maxTokens: 2, stream: true}
			if resp, err := st.sim.Do(ctx, spec.request()); err == nil {
				statuses[i] = resp.Status
			}
		})
	}
	wg.Wait()
	for i, s := range statuses {
		if s != http.StatusOK {
			t.Errorf("request %d: status %d, want 200", i, s)
		}
	}
	m, err := scrapeMetrics(ctx, st.metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	for i, reason := range reasons {
		worker := fmt.Sprintf("worker-%d", i)
		if n := m.value("tollgate_engine_scrape_failures_total", map[string]string{"worker": worker, "reason": reason}); n < 1 {
			t.Errorf("%s: %s failures %v, want >= 1", worker, reason, n)
		}
	}
}
