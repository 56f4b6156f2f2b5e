package extproc

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

// TestMetrics_Exposition runs requests through a server and compares the
// scheduler series with their upstream names and labels.
func TestMetrics_Exposition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		file := policy.DefaultPriorityFile()
		file.Tenants["header:red"] = sched.PriorityBulk
		tenants, err := policy.NewTenants(policy.TenantOptions{TrustHeader: true})
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{
			Sched:            sched.Config{Priority: testPriority()},
			Tenancy:          &intake.Tenancy{Tenants: tenants, PriorityFile: file},
			TenantMetricTopN: 1,
		}
		ts := startServer(t, cfg, oneWorker)
		p := proto{req: modeBuffered, resp: modeStreamed}
		a := ts.open()
		a.send(reqHeaders(p, "POST", "/v1/chat/completions", false, "x-smg-tenant-id", "red", "x-smg-priority", "interactive"), reqBody(chatBody, true))
		a.recvKinds(2)
		b := ts.open()
		b.send(reqHeaders(p, "POST", "/v1/chat/completions", false, "x-smg-tenant-id", "blue", "x-smg-priority", "urgent"), reqBody(chatBody, true))
		b.recvKinds(2) // queued: override
		ts.waitStats("b queued", func(s sched.Stats) bool { return s.QueueDepth[sched.PriorityDefault] == 1 })

		reg := ts.srv.metrics.reg
		expect := func(text string, names ...string) {
			t.Helper()
			if err := testutil.GatherAndCompare(reg, strings.NewReader(text), names...); err != nil {
				t.Error(err)
			}
		}
		expect(`
# HELP smg_scheduler_clamp_total Requests whose x-smg-priority was lowered to the tenant's max class.
# TYPE smg_scheduler_clamp_total counter
smg_scheduler_clamp_total{effective_class="bulk",requested_class="interactive",tenant="header:red"} 1
# HELP smg_scheduler_unknown_priority_value_total Requests whose non-empty x-smg-priority value was not a known class.
# TYPE smg_scheduler_unknown_priority_value_total counter
smg_scheduler_unknown_priority_value_total{tenant="other"} 1
# HELP smg_scheduler_inflight Dispatched requests holding a slot, by class.
# TYPE smg_scheduler_inflight gauge
smg_scheduler_inflight{class="bulk"} 1
smg_scheduler_inflight{class="default"} 0
smg_scheduler_inflight{class="interactive"} 0
smg_scheduler_inflight{class="system"} 0
# HELP smg_scheduler_queue_depth Queued requests by class.
# TYPE smg_scheduler_queue_depth gauge
smg_scheduler_queue_depth{class="bulk"} 0
smg_scheduler_queue_depth{class="default"} 1
smg_scheduler_queue_depth{class="interactive"} 0
smg_scheduler_queue_depth{class="system"} 0
# HELP smg_scheduler_queue_size_limit Configured queue_size by class.
# TYPE smg_scheduler_queue_size_limit gauge
smg_scheduler_queue_size_limit{class="bulk"} 8
smg_scheduler_queue_size_limit{class="default"} 8
smg_scheduler_queue_size_limit{class="interactive"} 8
smg_scheduler_queue_size_limit{class="system"} 8
# HELP smg_scheduler_utilization Total in-flight requests / slot capacity.
# TYPE smg_scheduler_utilization gauge
smg_scheduler_utilization 1
# HELP dynamo_frontend_router_queue_pending_requests Queued requests in the policy class.
# TYPE dynamo_frontend_router_queue_pending_requests gauge
dynamo_frontend_router_queue_pending_requests{model="unknown",policy_class="default",worker_type="decode"} 1
# HELP tollgate_worker_active_requests Requests booked on the worker rank.
# TYPE tollgate_worker_active_requests gauge
tollgate_worker_active_requests{rank="0",worker="w0"} 1
`, "smg_scheduler_clamp_total", "smg_scheduler_unknown_priority_value_total", "smg_scheduler_inflight", "smg_scheduler_queue_depth",
			"smg_scheduler_queue_size_limit", "smg_scheduler_utilization", "dynamo_frontend_router_queue_pending_requests", "tollgate_worker_active_requests")

		a.finish()
		b.untilRoute()
		b.finish()
		ts.waitIdle()
		expect(`
# HELP smg_scheduler_admit_total Admission outcomes by effective priority class.
# TYPE smg_scheduler_admit_total counter
smg_scheduler_admit_total{class="bulk",outcome="admitted"} 1
smg_scheduler_admit_total{class="bulk",outcome="client_cancelled"} 0
smg_scheduler_admit_total{class="bulk",outcome="preempted"} 0
smg_scheduler_admit_total{class="bulk",outcome="rejected_queue_full"} 0
smg_scheduler_admit_total{class="bulk",outcome="rejected_queue_timeout"} 0
smg_scheduler_admit_total{class="default",outcome="admitted"} 1
smg_scheduler_admit_total{class="default",outcome="client_cancelled"} 0
smg_scheduler_admit_total{class="default",outcome="preempted"} 0
smg_scheduler_admit_total{class="default",outcome="rejected_queue_full"} 0
smg_scheduler_admit_total{class="default",outcome="rejected_queue_timeout"} 0
smg_scheduler_admit_total{class="interactive",outcome="admitted"} 0
smg_scheduler_admit_total{class="interactive",outcome="client_cancelled"} 0
smg_scheduler_admit_total{class="interactive",outcome="preempted"} 0
smg_scheduler_admit_total{class="interactive",outcome="rejected_queue_full"} 0
smg_scheduler_admit_total{class="interactive",outcome="rejected_queue_timeout"} 0
smg_scheduler_admit_total{class="system",outcome="admitted"} 0
smg_scheduler_admit_total{class="system",outcome="client_cancelled"} 0
smg_scheduler_admit_total{class="system",outcome="preempted"} 0
smg_scheduler_admit_total{class="system",outcome="rejected_queue_full"} 0
smg_scheduler_admit_total{class="system",outcome="rejected_queue_timeout"} 0
`, "smg_scheduler_admit_total")
		if n := testutil.CollectAndCount(ts.srv.metrics.smgQueueWait); n != 1 {
			t.Errorf("queue wait series %d, want 1 (the queued default request)", n)
		}
		if n := testutil.CollectAndCount(ts.srv.metrics.decisionLatency); n != 1 {
			t.Errorf("decision latency series %d", n)
		}

		rec := httptest.NewRecorder()
		ts.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "smg_scheduler_class_capacity_pressure") {
			t.Errorf("/metrics %d", rec.Code)
		}
		for path, want := range map[string]int{"/healthz": 200, "/readyz": 200} {
			rec := httptest.NewRecorder()
			ts.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			if rec.Code != want {
				t.Errorf("%s = %d, want %d", path, rec.Code, want)
			}
		}
		if _, ok := ts.srv.Stats(context.Background()); !ok {
			t.Error("no stats")
		}
	})
}

func TestMetrics_ModelLabelOnlyForNamedModels(t *testing.T) {
	m := newMetrics(1, nil)
	m.setNamedModels([]string{"configured"}, []sched.Worker{{ID: "a", Model: "listed"}, {ID: "b"}})
	for in, want := range map[string]string{"": "unknown", "configured": "configured", "listed": "listed", "client-chosen": "other"} {
		if got := m.modelLabel(in); got != want {
			t.Errorf("modelLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMetrics_BuildInfo checks tollgate_build_info on a server's registry:
// Config.Build's version and revision and the Go release, and "unknown"
// for what the build did not record.
func TestMetrics_BuildInfo(t *testing.T) {
	for _, tc := range []struct {
		build             BuildInfo
		version, revision string
	}{
		{BuildInfo{Version: "1.2.3", Revision: "0123abc"}, "1.2.3", "0123abc"},
		{BuildInfo{}, "unknown", "unknown"},
	} {
		s, err := New(Config{Build: tc.build}, oneWorker)
		if err != nil {
			t.Fatal(err)
		}
		runServer(t, s)
		want := `
# HELP tollgate_build_info A constant 1 labelled with the version, source revision and Go release tollgate was built from.
# TYPE tollgate_build_info gauge
tollgate_build_info{goversion="` + runtime.Version() + `",revision="` + tc.revision + `",version="` + tc.version + `"} 1
`
		if err := testutil.GatherAndCompare(s.metrics.reg, strings.NewReader(want), "tollgate_build_info"); err != nil {
			t.Errorf("%+v: %v", tc.build, err)
		}
	}
}
