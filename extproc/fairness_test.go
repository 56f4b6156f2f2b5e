package extproc

import (
	"bytes"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

// fairnessConfig trusts the tenant header, caps tenant red at default and
// maps two objectives.
func fairnessConfig(t *testing.T, mode policy.FairnessMode) Config {
	tenants, err := policy.NewTenants(policy.TenantOptions{TrustHeader: true})
	if err != nil {
		t.Fatal(err)
	}
	file := policy.DefaultPriorityFile()
	file.Tenants["header:red"] = sched.PriorityDefault
	return testConfig(func(c *Config) {
		c.Tenancy = &intake.Tenancy{Tenants: tenants, PriorityFile: file, DefaultMaxClass: "system"}
		c.Fairness = mode
		c.Objectives = policy.Objectives{"chat": sched.PriorityInteractive, "batch": sched.PriorityBulk}
	})
}

func TestExchange_FairnessKeyAndObjective(t *testing.T) {
	tests := []struct {
		name     string
		mode     policy.FairnessMode
		headers  []string
		flow     string
		priority sched.Priority
	}{
		{"off: no key", policy.FairnessNone, []string{"x-smg-tenant-id", "blue", "x-llm-d-inference-fairness-id", "f1"}, "", sched.PriorityDefault},
		{"tenant", policy.FairnessTenant, []string{"x-smg-tenant-id", "blue", "x-llm-d-inference-fairness-id", "f1"}, "header:blue", sched.PriorityDefault},
		{"header", policy.FairnessHeader, []string{"x-smg-tenant-id", "blue", "x-llm-d-inference-fairness-id", "f1"}, "f1", sched.PriorityDefault},
		{"older header", policy.FairnessHeader, []string{"x-gateway-inference-fairness-id", "f2"}, "f2", sched.PriorityDefault},
		{"header absent: the tenant", policy.FairnessHeader, []string{"x-smg-tenant-id", "blue"}, "header:blue", sched.PriorityDefault},
		{"objective maps the class", policy.FairnessNone, []string{"x-smg-tenant-id", "blue", "x-llm-d-inference-objective", "chat"}, "", sched.PriorityInteractive},
		{"older objective header", policy.FairnessNone, []string{"x-gateway-inference-objective", "batch"}, "", sched.PriorityBulk},
		{"the tenant clamp applies", policy.FairnessNone, []string{"x-smg-tenant-id", "red", "x-llm-d-inference-objective", "chat"}, "", sched.PriorityDefault},
		{"x-smg-priority wins", policy.FairnessNone, []string{"x-smg-priority", "bulk", "x-llm-d-inference-objective", "chat"}, "", sched.PriorityBulk},
		{"unmapped objective", policy.FairnessNone, []string{"x-llm-d-inference-objective", "nope"}, "", sched.PriorityDefault},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, env, _ := newTestExchange(t, fairnessConfig(t, tt.mode))
			feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false, tt.headers...))
			feed(t, x, reqBody(chatBody, true))
			if len(env.submits) != 1 {
				t.Fatalf("%d submits", len(env.submits))
			}
			if r := env.submits[0]; r.FairnessKey != tt.flow || r.Priority != tt.priority {
				t.Fatalf("submitted key %q priority %v, want %q %v", r.FairnessKey, r.Priority, tt.flow, tt.priority)
			}
		})
	}
}

func TestExchange_MalformedFlowHeaderIs400(t *testing.T) {
	for _, h := range []string{"x-llm-d-inference-fairness-id", "x-llm-d-inference-objective"} {
		t.Run(h, func(t *testing.T) {
			x, env, _ := newTestExchange(t, fairnessConfig(t, policy.FairnessHeader))
			s := x.message(t0, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false, h, strings.Repeat("a", 300)))
			ir := immediateOf(t, s)
			if ir.GetStatus().GetCode() != 400 || len(env.submits) != 0 {
				t.Fatalf("status %d submits %d", ir.GetStatus().GetCode(), len(env.submits))
			}
			if !bytes.Contains(ir.GetBody(), []byte(`"param":"`+h+`"`)) {
				t.Errorf("body %s does not name the header", ir.GetBody())
			}
		})
	}
}

// The fairness series: queued requests per flow and Jain's index at scrape
// time, served uncached tokens per flow on dispatch.
func TestMetrics_FairnessSeries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tenants, err := policy.NewTenants(policy.TenantOptions{TrustHeader: true})
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{
			Sched:            sched.Config{Priority: testPriority()},
			Tenancy:          &intake.Tenancy{Tenants: tenants},
			Fairness:         policy.FairnessTenant,
			TenantMetricTopN: 2,
		}
		// The worker names the model, so it has its own queue and label.
		ts := startServer(t, cfg, []fleet.Worker{{ID: "w0", Address: "10.0.0.7:8000", MaxRunningRequests: 1, Model: "llama"}})
		p := proto{req: modeBuffered, resp: modeStreamed}
		a := ts.open()
		a.send(reqHeaders(p, "POST", "/v1/chat/completions", false, "x-smg-tenant-id", "red"), reqBody(chatBody, true))
		a.recvKinds(2) // dispatched: the only slot
		for _, tenant := range []string{"blue", "red", "green"} {
			s := ts.open()
			s.send(reqHeaders(p, "POST", "/v1/chat/completions", false, "x-smg-tenant-id", tenant), reqBody(chatBody, true))
			s.recvKinds(2) // queued: override
		}
		ts.waitStats("three queued", func(s sched.Stats) bool { return s.QueueDepth[sched.PriorityDefault] == 3 })
		reg := ts.srv.metrics.reg
		if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP tollgate_fairness_flow_queued_requests Queued requests by model, Dynamo policy class and fairness key (flow), with fairness on. Keys past the top-N, and the per-lane overflow flow, are "other".
# TYPE tollgate_fairness_flow_queued_requests gauge
tollgate_fairness_flow_queued_requests{flow="header:blue",model="llama",policy_class="default"} 1
tollgate_fairness_flow_queued_requests{flow="header:red",model="llama",policy_class="default"} 1
tollgate_fairness_flow_queued_requests{flow="other",model="llama",policy_class="default"} 1
# HELP tollgate_fairness_jain_index Jain's index over the weighted service rates (uncached tokens per DRR round since backlogged) of the class's backlogged flows: 1 is an exact weighted share, 1/n one flow of n served alone. 1 with fewer than two flows.
# TYPE tollgate_fairness_jain_index gauge
tollgate_fairness_jain_index{model="llama",policy_class="default"} 1
`), "tollgate_fairness_flow_queued_requests", "tollgate_fairness_jain_index"); err != nil {
			t.Error(err)
		}
		if n := testutil.CollectAndCount(ts.srv.metrics.servedFlows, "tollgate_fairness_served_tokens_total"); n != 1 {
			t.Fatalf("%d served-token series after one dispatch, want 1 (header:red)", n)
		}
		if v := testutil.ToFloat64(ts.srv.metrics.servedFlows.WithLabelValues("llama", "default", "header:red")); v <= 0 {
			t.Fatalf("served tokens of header:red = %v", v)
		}
	})
}
