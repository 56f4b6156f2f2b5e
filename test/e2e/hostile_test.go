package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
	"github.com/tollgate/tollgate/test/mockworker"
)

// hostileTenancy trusts the tenant header; tenant "capped" may ask for at
// most bulk, tenant "ops" for interactive.
func hostileTenancy(t *testing.T) *intake.Tenancy {
	t.Helper()
	file := policy.DefaultPriorityFile()
	file.Tenants["header:capped"] = sched.PriorityBulk
	file.Tenants["header:ops"] = sched.PriorityInteractive
	tenants, err := policy.NewTenants(policy.TenantOptions{TrustHeader: true})
	if err != nil {
		t.Fatal(err)
	}
	return &intake.Tenancy{Tenants: tenants, PriorityFile: file}
}

// TestStrictPriorityHintStaysUnderTheTenantCeiling: a tenant capped at bulk
// asks for interactive and the largest strict priority, in the header and in
// the body; queued interactive work of another tenant still goes first.
func TestStrictPriorityHintStaysUnderTheTenantCeiling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStack(t, options{maxRunning: 1, hold: func(mockworker.RequestInfo) bool { return true },
			config: func(c *extproc.Config) {
				c.Sched.Priority = priorityConfig(30 * time.Second)
				for p := range c.Sched.Priority.Classes {
					c.Sched.Priority.Classes[p].CanPreempt = false
				}
				c.Tenancy = hostileTenancy(t)
			}})
		first := s.async(context.Background(), chat("first", "X-Request-Id", "first", "X-Smg-Tenant-Id", "ops"))
		s.parked(1)

		hinted := s.async(context.Background(), chat("hinted", "X-Request-Id", "hinted", "X-Smg-Tenant-Id", "capped", "X-Smg-Priority", "interactive",
			"X-Dynamo-Request-Strict-Priority", "4294967295"))
		s.queued(sched.PriorityBulk, 1)
		body := []byte(`{"model":"` + model + `","prompt":"hinted body","nvext":{"agent_hints":{"strict_priority":4294967295}}}`)
		hintedBody := s.async(context.Background(), post("/v1/completions", body, "X-Request-Id", "hinted-body", "X-Smg-Tenant-Id", "capped"))
		s.queued(sched.PriorityBulk, 2)
		urgent := s.async(context.Background(), chat("urgent", "X-Request-Id", "urgent", "X-Smg-Tenant-Id", "ops", "X-Smg-Priority", "interactive"))
		s.queued(sched.PriorityInteractive, 1)

		// One slot: release the first request; the next to reach the worker
		// must be the interactive one.
		s.gate.Release(1)
		expectStatus(t, s.await(first).r, http.StatusOK, "")
		s.parked(1)
		if got := s.gate.Parked(); len(got) != 1 || got[0] != "urgent" {
			t.Fatalf("at the worker after the first request: %q, want the interactive request", got)
		}
		s.gate.Open()
		for _, ch := range []<-chan result{urgent, hinted, hintedBody} {
			expectStatus(t, s.await(ch).r, http.StatusOK, "")
		}
	})
}

// scrape returns the server's /metrics page.
func (s *stack) scrape() string {
	s.t.Helper()
	rec := httptest.NewRecorder()
	s.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		s.t.Fatalf("/metrics: %d", rec.Code)
	}
	return rec.Body.String()
}

// TestClientModelNamesStayOutOfMetricsAndQueues: behind a worker that
// serves every model, client-chosen names used to become queues and metric
// labels for the life of the process, of any length.
func TestClientModelNamesStayOutOfMetricsAndQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStack(t, options{anyModel: true})
		long := strings.Repeat("m", openai.MaxModelNameBytes+1)
		r := s.do(post("/v1/completions", []byte(`{"model":"`+long+`","prompt":"hi"}`)))
		if r.Status != http.StatusBadRequest || errorBody(t, r)["param"] != "model" {
			t.Fatalf("over-long model: %d %q", r.Status, r.Body)
		}
		var names []string
		for i := range 20 {
			name := fmt.Sprintf("%0200d", i)
			names = append(names, name)
			// The mock worker serves one model and answers 404 for the others:
			// tollgate admitted and routed each request.
			if r := s.do(post("/v1/completions", []byte(`{"model":"`+name+`","prompt":"hi"}`))); r.Status != http.StatusNotFound {
				t.Fatalf("model %d: %d %q", i, r.Status, r.Body)
			}
		}
		st := s.waitStats("settled", func(sched.Stats) bool { return true })
		if len(st.Queues) != 1 || st.Queues[0].Model != "" {
			t.Errorf("queues %+v, want only the shared one", st.Queues)
		}
		page := s.scrape()
		for _, n := range names {
			if strings.Contains(page, n) {
				t.Fatalf("/metrics carries the client's model name %q", n)
			}
		}
	})
}

// TestUnknownModelBodyNamesTheModelOnce: the 404 for a model no worker
// serves names the client's (bounded) model name once, in its message.
func TestUnknownModelBodyNamesTheModelOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStack(t, options{})
		name := strings.Repeat("x", openai.MaxModelNameBytes)
		r := s.do(post("/v1/completions", []byte(`{"model":"`+name+`","prompt":"hi"}`)))
		expectStatus(t, r, http.StatusNotFound, "")
		if n := strings.Count(string(r.Body), name); n != 1 {
			t.Fatalf("the body names the model %d times: %s", n, r.Body)
		}
		if errorBody(t, r)["code"] != "model_not_found" {
			t.Errorf("code missing: %s", r.Body)
		}
	})
}

// TestHeaderEntryLimit: empty header entries used to count as 0 bytes, so
// any number of them passed the header limit. A request with more entries
// than Envoy's default max_headers_count is answered 431.
func TestHeaderEntryLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStack(t, options{})
		var h []string
		for i := range extproc.DefaultMaxHeaderCount {
			h = append(h, fmt.Sprintf("x-empty-%d", i), "")
		}
		r := s.do(chat("hi", h...))
		expectStatus(t, r, http.StatusRequestHeaderFieldsTooLarge, "request_headers_too_large")
		if !strings.Contains(errorBody(t, r)["message"].(string), "more than the limit of 100") {
			t.Errorf("body %s", r.Body)
		}
		expectStatus(t, s.do(chat("hi", h[:2*80]...)), http.StatusOK, "")
	})
}
