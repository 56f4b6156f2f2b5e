package sched

import (
	"testing"
	"time"
)

// simBudgets: unlisted tenants get 600 tokens and 2 requests a minute;
// auth:a gets 6000 and 100, with a 150-token prefix rule for m- and an
// exact rule for m-exact.
func simBudgets() *TenantBudgets {
	return &TenantBudgets{
		Default: BudgetPolicy{TokensPerMinute: 600, RequestsPerMinute: 2},
		Tenants: map[string]BudgetPolicy{"auth:a": {
			TokensPerMinute: 6000, RequestsPerMinute: 100,
			Rules: []ModelRule{
				{ID: "small", Prefix: true, Value: "m-", TokensPerMinute: 150, RequestsPerMinute: 100},
				{ID: "exact", Value: "m-exact", TokensPerMinute: 6000, RequestsPerMinute: 100},
			},
		}},
	}
}

func budgetSim(t *testing.T, maxScopes int) *sim {
	return newSim(t, Config{TenantBudgets: simBudgets(), MaxBudgetScopes: maxScopes}, simWorker("w", 64))
}

func tenantReq(id uint64, tenant, model string, isl uint64) Request {
	return Request{ID: id, Tenant: tenant, Model: model, ISL: isl}
}

func TestBudget_TokensAndRequests(t *testing.T) {
	h := budgetSim(t, 0)
	h.want("400 of 600 tokens", h.submit(tenantReq(1, "ip:10.0.0.1", "m", 400)), "dispatch 1 w/0")
	h.want("300 more: 100 short at 10/s", h.submit(tenantReq(2, "ip:10.0.0.1", "m", 300)), "reject 2 tenant_rate_limited retry 10s")
	h.want("200 fit", h.submit(tenantReq(3, "ip:10.0.0.1", "m", 200)), "dispatch 3 w/0")
	h.want("third request: 1 short at 2/min", h.submit(tenantReq(4, "ip:10.0.0.1", "m", 0)), "reject 4 tenant_rate_limited retry 30s")
	h.want("another tenant has its own", h.submit(tenantReq(5, "ip:10.0.0.2", "m", 600)), "dispatch 5 w/0")
	h.want("an ask over the capacity never fits", h.submit(tenantReq(6, "ip:10.0.0.3", "m", 601)), "reject 6 tenant_rate_limited")
	h.at(30 * time.Second)
	h.want("30 s later: one request and 300 tokens back", h.submit(tenantReq(7, "ip:10.0.0.1", "m", 300)), "dispatch 7 w/0")
	if st := *h.s.Stats().Budgets; st.Allowed != 4 || st.Denied != 3 || st.Scopes != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestBudget_SettleToUsage(t *testing.T) {
	h := budgetSim(t, 0)
	h.submit(tenantReq(1, "ip:10.0.0.1", "m", 100))
	h.want("usage before the end", simRender(h.s.Usage(h.now, 1, 100, 1000)))
	h.want("a second report is ignored", simRender(h.s.Usage(h.now, 1, 100, 100000)))
	h.finish(1)
	// 600 - 100 reserved - 1000 settled = -500: 501 short at 10/s.
	h.want("in debt", h.submit(tenantReq(2, "ip:10.0.0.1", "m", 1)), "reject 2 tenant_rate_limited retry 51s")
	h.at(50 * time.Second)
	h.want("still short", h.submit(tenantReq(3, "ip:10.0.0.1", "m", 1)), "reject 3 tenant_rate_limited retry 1s")
	h.at(51 * time.Second)
	h.want("paid off", h.submit(tenantReq(4, "ip:10.0.0.1", "m", 1)), "dispatch 4 w/0")
}

func TestBudget_SettleRefundsUnused(t *testing.T) {
	h := budgetSim(t, 0)
	h.submit(tenantReq(1, "ip:10.0.0.1", "m", 600))
	h.s.Usage(h.now, 1, 200, 0) // the estimate was high: 400 come back
	h.want("refunded", h.submit(tenantReq(2, "ip:10.0.0.1", "m", 400)), "dispatch 2 w/0")
}

// At most one rule applies: an exact match beats a prefix, and a rule's
// scope adds to the tenant's own.
func TestBudget_ModelRules(t *testing.T) {
	h := budgetSim(t, 0)
	h.want("prefix rule", h.submit(tenantReq(1, "auth:a", "m-large", 100)), "dispatch 1 w/0")
	h.want("prefix rule short: 50 at 2.5/s", h.submit(tenantReq(2, "auth:a", "m-large", 100)), "reject 2 tenant_rate_limited retry 20s")
	h.want("exact rule instead of the prefix", h.submit(tenantReq(3, "auth:a", "m-exact", 1000)), "dispatch 3 w/0")
	h.want("no rule: the tenant scope only", h.submit(tenantReq(4, "auth:a", "other", 4000)), "dispatch 4 w/0")
	h.want("tenant scope short: 900 left, 100 short at 100/s", h.submit(tenantReq(5, "auth:a", "other", 1000)), "reject 5 tenant_rate_limited retry 1s")
}

// Beyond MaxBudgetScopes the least recently used scope is forgotten.
func TestBudget_BoundedScopes(t *testing.T) {
	h := budgetSim(t, 2)
	h.submit(tenantReq(1, "ip:10.0.0.1", "m", 600))
	h.submit(tenantReq(2, "ip:10.0.0.2", "m", 600))
	h.want("ip 1 is out of tokens", h.submit(tenantReq(3, "ip:10.0.0.1", "m", 1)), "reject 3 tenant_rate_limited retry 1s")
	h.submit(tenantReq(4, "ip:10.0.0.3", "m", 1)) // forgets ip 2, the least recently used
	h.want("ip 1 was used last: still out", h.submit(tenantReq(5, "ip:10.0.0.1", "m", 1)), "reject 5 tenant_rate_limited retry 1s")
	h.want("ip 2 starts over", h.submit(tenantReq(6, "ip:10.0.0.2", "m", 600)), "dispatch 6 w/0")
	if st := *h.s.Stats().Budgets; st.Scopes != 2 || st.Evicted != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// The SMG gate comes first: a request refused by the rate check takes
// nothing from its tenant.
func TestBudget_AfterRateCheck(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	cfg.Admission = AdmissionConfig{Capacity: 1, RatePerSecond: 1}
	cfg.TenantBudgets = simBudgets()
	h := newSim(t, cfg, simWorker("w", 64))
	h.want("1", h.submit(tenantReq(1, "ip:10.0.0.1", "m", 0)), "dispatch 1 w/0")
	h.want("rate check", h.submit(tenantReq(2, "ip:10.0.0.1", "m", 0)), "reject 2 rate_limited")
	h.at(time.Second)
	h.want("the tenant's second request", h.submit(tenantReq(3, "ip:10.0.0.1", "m", 0)), "dispatch 3 w/0")
}
