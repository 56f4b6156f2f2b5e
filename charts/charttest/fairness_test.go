package charttest

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fairnessArgs returns the fairness and objective flags in args, in order.
func fairnessArgs(args []string) []string {
	var out []string
	for _, a := range args {
		if strings.HasPrefix(a, "--fairness") || strings.HasPrefix(a, "--objective-class") {
			out = append(out, a)
		}
	}
	return out
}

func TestFairnessValuesRender(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"default: tollgate's defaults", "", nil},
		{"mode only", "fairness: {mode: header}\n", []string{"--fairness=header"}},
		{"everything, keys sorted", `
fairness:
  mode: tenant
  maxFlows: 64
  weights: {"header:team-b": 1, "header:team-a": 1000}
objectiveClasses: {chat: interactive, batch: bulk, ops: system, plain: default}
`, []string{
			"--fairness=tenant", "--fairness-max-flows=64",
			"--fairness-weight=header:team-a=1000", "--fairness-weight=header:team-b=1",
			"--objective-class=batch=bulk", "--objective-class=chat=interactive",
			"--objective-class=ops=system", "--objective-class=plain=default",
		}},
		{"objective classes without fairness", "objectiveClasses: {chat: interactive}\n", []string{"--objective-class=chat=interactive"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := mustRender(t, values(t, tc.doc)).deployment(t)
			if diff := cmp.Diff(tc.want, fairnessArgs(c.Args)); diff != "" {
				t.Errorf("fairness flags (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFairnessSchemaRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"mode", "fairness: {mode: drr}\n", "/fairness/mode"},
		{"max flows zero", "fairness: {maxFlows: 0}\n", "/fairness/maxFlows"},
		{"max flows above the limit", "fairness: {maxFlows: 65537}\n", "/fairness/maxFlows"},
		{"weight zero", "fairness: {weights: {a: 0}}\n", "/fairness/weights"},
		{"weight above 1000", "fairness: {weights: {a: 1001}}\n", "/fairness/weights"},
		{"weight key with =", "fairness: {weights: {\"a=b\": 2}}\n", "/fairness/weights"},
		{"fairness unknown key", "fairness: {enabled: true}\n", "enabled"},
		{"objective class", "objectiveClasses: {chat: gold}\n", "/objectiveClasses"},
		{"objective name with a space", "objectiveClasses: {\"my chat\": bulk}\n", "/objectiveClasses"},
		{"objective name too long", "objectiveClasses: {" + strings.Repeat("a", 257) + ": bulk}\n", "/objectiveClasses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(t, values(t, tc.doc))
			if err == nil {
				t.Fatal("rendered; want a schema error")
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v; want a schema error naming %q", err, tc.want)
			}
		})
	}
}

// The inferencepool scenario carries fairness values; check-config runs on
// them in TestRenderedConfigPassesCheckConfig and the real API test runs
// tollgate with them.
func TestFairnessValuesInInferencePoolScenario(t *testing.T) {
	_, c := mustRender(t, values(t, scenarios["inferencePool"])).deployment(t)
	got := fairnessArgs(c.Args)
	for _, want := range []string{"--fairness=tenant", "--objective-class=pinned=system"} {
		if !slices.Contains(got, want) {
			t.Errorf("flags %v lack %s", got, want)
		}
	}
}
