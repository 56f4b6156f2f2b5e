package charttest

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// exportedMetrics lists every metric tollgate exports, the upstream SMG and
// Dynamo names included. It is the one place the dashboard test knows
// them; replace it with the names read from tollgate's metric registry
// once that exists.
var exportedMetrics = []string{
	"dynamo_frontend_router_queue_backpressure_total",
	"dynamo_frontend_router_queue_deadline_expired_total",
	"dynamo_frontend_router_queue_pending_requests",
	"smg_admission_inflight",
	"smg_admission_queue_depth",
	"smg_admission_queue_rejected_total",
	"smg_http_rate_limit_total",
	"smg_scheduler_admit_total",
	"smg_scheduler_class_capacity_pressure",
	"smg_scheduler_inflight",
	"smg_scheduler_preemption_total",
	"smg_scheduler_queue_depth",
	"smg_scheduler_queue_wait_seconds",
	"smg_scheduler_utilization",
	"tollgate_cost_estimate_error_ratio",
	"tollgate_decision_latency_seconds",
	"tollgate_pd_split_requests_total",
	"tollgate_queue_wait_seconds",
	"tollgate_tenant_rate_limit_decisions_total",
	"tollgate_tenant_rate_limit_scope_evictions_total",
	"tollgate_tenant_rate_limit_scopes",
	"tollgate_tenant_rate_limited_total",
	"tollgate_worker_active_prefill_tokens",
	"tollgate_worker_active_requests",
}

// metricName finds metric names in PromQL; histogram series suffixes are
// folded onto the histogram's name.
// dashboardFile is the dashboard the chart ships.
const dashboardFile = chartDir + "/dashboards/tollgate.json"

var metricName = regexp.MustCompile(`\b(?:smg|dynamo|tollgate)_[a-z0-9_]+`)

func TestDashboard(t *testing.T) {
	r := mustRender(t, values(t, "grafanaDashboard: {enabled: true}\n"))
	cm := r.configMap(t, "-dashboard")
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels = %v; want grafana_dashboard: \"1\"", cm.Labels)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(cm.Data["tollgate.json"]), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				if strings.Contains(tg.Expr, "histogram_quantile") {
					m = strings.TrimSuffix(m, "_bucket")
				}
				used[m] = true
			}
		}
	}
	if diff := cmp.Diff(exportedMetrics, slices.Sorted(maps.Keys(used))); diff != "" {
		t.Errorf("metrics on the dashboard (-exported +used): every exported metric needs a panel and every panel a real metric:\n%s", diff)
	}
}

// TestDashboard_DocsShowEveryQuery: the dashboard table of
// docs/observability.md shows each panel's query as the dashboard has it.
func TestDashboard_DocsShowEveryQuery(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(observabilityDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if !strings.Contains(string(doc), "| `"+tg.Expr+"` |") {
				t.Errorf("docs/observability.md's dashboard table lacks the query `%s`", tg.Expr)
			}
		}
	}
}
