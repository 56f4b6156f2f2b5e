package charttest

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"

	"github.com/tollgate/tollgate/test/promserver"
)

const (
	rulesFile     = chartDir + "/rules/tollgate.rules.yaml"
	rulesUnitTest = "testdata/rules_test.yaml"
	// observabilityDoc explains each dashboard panel and holds a runbook
	// for each alert.
	observabilityDoc = "../../docs/observability.md"
)

// loadRules reads the plain rules file the way Prometheus does.
func loadRules(t *testing.T) []monitoringv1.RuleGroup {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return f.Groups
}

func alertNames(groups []monitoringv1.RuleGroup) []string {
	var names []string
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				names = append(names, r.Alert)
			}
		}
	}
	return names
}

func TestRules_PromtoolCheck(t *testing.T) {
	out, err := exec.Command(promserver.Promtool(t), "check", "rules", rulesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// TestRules_UnitTests runs the alert unit tests: each alert fires where it
// should and stays quiet just the other side of its threshold.
func TestRules_UnitTests(t *testing.T) {
	out, err := exec.Command(promserver.Promtool(t), "test", "rules", rulesUnitTest).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestRules_EveryAlertTestedAndDocumented: every alert has a unit test in
// which it fires, and a runbook in docs/observability.md: a "### Alert"
// heading whose text, before the next heading, says what to do.
func TestRules_EveryAlertTestedAndDocumented(t *testing.T) {
	b, err := os.ReadFile(rulesUnitTest)
	if err != nil {
		t.Fatal(err)
	}
	var ut struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &ut); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, tc := range ut.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	doc, err := os.ReadFile(observabilityDoc)
	if err != nil {
		t.Fatal(err)
	}
	alerts := alertNames(loadRules(t))
	if len(alerts) == 0 {
		t.Fatal("no alerts in the rules file")
	}
	for _, a := range alerts {
		if !fires[a] {
			t.Errorf("alert %s has no unit test in which it fires", a)
		}
		if !regexp.MustCompile(`(?m)^### ` + a + `\n(?:\n|[^#\n].*\n)*\*\*What to do:\*\*`).Match(doc) {
			t.Errorf("docs/observability.md has no \"### %s\" runbook with a **What to do:** paragraph", a)
		}
	}
}

// TestPrometheusRule: the chart's PrometheusRule carries exactly the
// groups of the plain rules file.
func TestPrometheusRule(t *testing.T) {
	r := mustRender(t, values(t, scenarios["everything"]))
	if len(r.prometheusRules) != 1 {
		t.Fatalf("%d PrometheusRules rendered; want 1", len(r.prometheusRules))
	}
	pr := r.prometheusRules[0]
	if pr.Labels["release"] != "prom" || pr.Namespace != namespace {
		t.Errorf("PrometheusRule labels %v in %q; want the extra label release: prom in %q", pr.Labels, pr.Namespace, namespace)
	}
	if diff := cmp.Diff(loadRules(t), pr.Spec.Groups); diff != "" {
		t.Errorf("PrometheusRule groups differ from %s (-file +chart):\n%s", rulesFile, diff)
	}
	if names := alertNames(pr.Spec.Groups); !slices.Contains(names, "TollgateNoReadyWorker") {
		t.Errorf("PrometheusRule alerts %v lack TollgateNoReadyWorker", names)
	}
	if r := mustRender(t, values(t, scenarios["default"])); len(r.prometheusRules) != 0 {
		t.Error("a PrometheusRule is rendered by default; want it only with prometheusRule.enabled")
	}
}
