package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
	"github.com/tollgate/tollgate/test/mockworker"
)

// hostileTenancy trusts the tenant header; tenant "capped" may ask for at
// most bulk, tenant "ops" for interactive.
func hostileTenancy(t *testing.T) *extproc.Tenancy {
	t.Helper()
	file := policy.DefaultPriorityFile()
	file.Tenants["header:capped"] = sched.PriorityBulk
	file.Tenants["header:ops"] = sched.PriorityInteractive
	tenants, err := policy.NewTenants(policy.TenantOptions{TrustHeader: true})
	if err != nil {
		t.Fatal(err)
	}
	return &extproc.Tenancy{Tenants: tenants, PriorityFile: file}
}

// TestStrictPriorityHintStaysUnderTheTenantCeiling: a tenant capped at bulk
// asks for interactive and the largest strict priority, in the header and in
// the body; queued interactive work of another tenant still goes first.
func TestStrictPriorityHintStaysUnderTheTenantCeiling(t *testing.T) {
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
}
