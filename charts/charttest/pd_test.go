package charttest

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// pdScenario is a disaggregated fleet: a decode worker, a worker of both
// roles and a prefill worker of two DP ranks, with the split threshold set.
// The prefill worker's slots are no SMG slots: the 256 of the other two
// carry the priority reservations (check-config runs it in
// TestRenderedConfigPassesCheckConfig).
const pdScenario = `
integration: istio
config:
  workers:
  - {id: d0, address: "10.0.0.5:8000", max_running_requests: 128, role: decode}
  - {id: d1, address: "10.0.0.6:8000", max_running_requests: 128}
  - {id: p0, address: "10.0.0.7:8000", max_running_requests: 128, dp_size: 2, role: prefill}
  pd: {uncachedThreshold: 1024}
` + samplePolicies

// pdArgs returns the prefill/decode flags in args, in order.
func pdArgs(args []string) []string {
	var out []string
	for _, a := range args {
		if strings.HasPrefix(a, "--pd-") || strings.HasPrefix(a, "-pd-") {
			out = append(out, a)
		}
	}
	return out
}

func TestPDValuesRender(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"default: tollgate's default", "", nil},
		{"null passes nothing", "config: {pd: {uncachedThreshold: null}}\n", nil},
		{"threshold", "config: {pd: {uncachedThreshold: 2048}}\n", []string{"--pd-uncached-threshold=2048"}},
		{"lowest threshold", "config: {pd: {uncachedThreshold: 1}}\n", []string{"--pd-uncached-threshold=1"}},
		{"large threshold", "config: {pd: {uncachedThreshold: 10000000}}\n", []string{"--pd-uncached-threshold=10000000"}},
		{"scenario", pdScenario, []string{"--pd-uncached-threshold=1024"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := mustRender(t, values(t, tc.doc)).deployment(t)
			if diff := cmp.Diff(tc.want, pdArgs(c.Args)); diff != "" {
				t.Errorf("prefill/decode flags (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPDWorkerRoles: config.workers' role reaches the workers file as
// written, and a role change rolls the pods.
func TestPDWorkerRoles(t *testing.T) {
	r := mustRender(t, values(t, pdScenario))
	var file struct {
		Workers []map[string]any `json:"workers"`
	}
	if err := yaml.UnmarshalStrict([]byte(r.configMap(t, "-config").Data["workers.yaml"]), &file); err != nil {
		t.Fatal(err)
	}
	roles := map[string]any{}
	for _, w := range file.Workers {
		roles[w["id"].(string)] = w["role"]
	}
	if diff := cmp.Diff(map[string]any{"d0": "decode", "d1": nil, "p0": "prefill"}, roles); diff != "" {
		t.Errorf("workers.yaml roles (-want +got):\n%s", diff)
	}
	checksum := func(doc string) string {
		d, _ := mustRender(t, values(t, doc)).deployment(t)
		return d.Spec.Template.Annotations["checksum/config"]
	}
	if checksum(pdScenario) == checksum(strings.Replace(pdScenario, "role: decode", "role: both", 1)) {
		t.Error("checksum/config unchanged by a worker role change")
	}
}

func TestPDSchemaRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"threshold zero", "config: {pd: {uncachedThreshold: 0}}\n", "/config/pd/uncachedThreshold"},
		{"threshold negative", "config: {pd: {uncachedThreshold: -1}}\n", "/config/pd/uncachedThreshold"},
		{"threshold not an integer", "config: {pd: {uncachedThreshold: 1.5}}\n", "/config/pd/uncachedThreshold"},
		{"threshold a string", "config: {pd: {uncachedThreshold: \"512\"}}\n", "/config/pd/uncachedThreshold"},
		{"pd unknown key", "config: {pd: {enabled: true}}\n", "enabled"},
		{"worker role", "config: {workers: [{id: w0, address: \"10.0.0.5:8000\", role: prefill-decode}]}\n", "/config/workers/0/role"},
		{"worker role case", "config: {workers: [{id: w0, address: \"10.0.0.5:8000\", role: Prefill}]}\n", "/config/workers/0/role"},
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

func TestPDTemplatesRejectBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"threshold in extraArgs too", "config: {pd: {uncachedThreshold: 1024}}\nextraArgs: [--pd-uncached-threshold=256]\n", `extraArgs has "--pd-uncached-threshold=256" but config.pd already sets --pd-uncached-threshold; set it in one place (config.pd)`},
		{"single-dash flag in extraArgs too", "config: {pd: {uncachedThreshold: 1024}}\nextraArgs: [-pd-uncached-threshold, \"256\"]\n", `extraArgs has "-pd-uncached-threshold" but config.pd already sets --pd-uncached-threshold`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(t, values(t, tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v; want one containing %q", err, tc.want)
			}
		})
	}
	// Left null, the flag may come from extraArgs, as before the chart had
	// the value; a flag that only shares the prefix is no duplicate.
	_, c := mustRender(t, values(t, "extraArgs: [--pd-uncached-threshold=256]\n")).deployment(t)
	if diff := cmp.Diff([]string{"--pd-uncached-threshold=256"}, pdArgs(c.Args)); diff != "" {
		t.Errorf("prefill/decode flags from extraArgs (-want +got):\n%s", diff)
	}
	if _, err := renderChart(t, values(t, "config: {pd: {uncachedThreshold: 1024}}\nextraArgs: [--pd-uncached-threshold-x=1]\n")); err != nil {
		t.Errorf("a flag that only shares the prefix: %v", err)
	}
}
