package charttest

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const (
	// rateLimitValues is the chart's example of SMG's rate limits and
	// Dynamo's flat SLO classes.
	rateLimitValues = chartDir + "/examples/values-rate-limits.yaml"
	// sloPolicy is Dynamo's SLO-rejection policy file, flat classes.
	sloPolicy = "../../examples/slo_rejection.yaml"
	// tenantFilePath is where the pod reads the tenant rate-limit file.
	tenantFilePath = "/etc/tollgate/config/tenant-rate-limits.yaml"
)

// sampleTenantLimits is a tenant rate-limit file, under
// config.rateLimits.tenantRateLimits.
const sampleTenantLimits = `
config:
  rateLimits:
    tenantRateLimits:
      enabled: true
      config:
        default_policy: {tokens_per_minute: 120000, requests_per_minute: 600}
        tenants:
        - tenant_key: "auth:team-a"
          tokens_per_minute: 600000
          requests_per_minute: 3000
          model_rules:
          - {rule_id: team-a-llama, matcher: {type: prefix, value: "llama-"}, tokens_per_minute: 400000, requests_per_minute: 2000}
        - {tenant_key: anonymous, tokens_per_minute: 10000, requests_per_minute: 60}
`

// readFile returns the content of path.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rateLimitArgs returns the SMG rate-limit flags in args, in order.
func rateLimitArgs(args []string) []string {
	var out []string
	for _, a := range args {
		for _, p := range []string{"--max-concurrent-requests", "--rate-limit-tokens-per-second", "--queue-size", "--queue-timeout-secs", "--tenant-rate-limit-"} {
			if strings.HasPrefix(a, p) {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

func TestRateLimitValuesRender(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"default: tollgate's defaults", "", nil},
		{"explicit defaults pass nothing", "config: {rateLimits: {maxConcurrentRequests: -1, tokensPerSecond: 0, queueSize: null, queueTimeoutSecs: null}}\n", nil},
		{"no bucket, said explicitly", "config: {rateLimits: {maxConcurrentRequests: 0}}\n", []string{"--max-concurrent-requests=0"}},
		{"legacy admission", "config: {rateLimits: {maxConcurrentRequests: 64, tokensPerSecond: 20, queueSize: 256, queueTimeoutSecs: 30}}\n", []string{
			"--max-concurrent-requests=64", "--rate-limit-tokens-per-second=20", "--queue-size=256", "--queue-timeout-secs=30",
		}},
		{"queue disabled", "config: {rateLimits: {maxConcurrentRequests: 65535, queueSize: 0}}\n", []string{"--max-concurrent-requests=65535", "--queue-size=0"}},
		{"tenant budgets", sampleTenantLimits, []string{"--tenant-rate-limit-enabled", "--tenant-rate-limit-config=" + tenantFilePath}},
		{"tenant budgets off, config ignored", strings.Replace(sampleTenantLimits, "enabled: true", "enabled: false", 1), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := mustRender(t, values(t, tc.doc)).deployment(t)
			if diff := cmp.Diff(tc.want, rateLimitArgs(c.Args)); diff != "" {
				t.Errorf("rate-limit flags (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTenantRateLimitFile(t *testing.T) {
	r := mustRender(t, values(t, sampleTenantLimits))
	got, ok := r.configMap(t, "-config").Data["tenant-rate-limits.yaml"]
	if !ok {
		t.Fatal("ConfigMap has no tenant-rate-limits.yaml")
	}
	var file map[string]any
	if err := yaml.UnmarshalStrict([]byte(got), &file); err != nil {
		t.Fatalf("tenant-rate-limits.yaml: %v\n%s", err, got)
	}
	want := values(t, sampleTenantLimits)["config"].(map[string]any)["rateLimits"].(map[string]any)["tenantRateLimits"].(map[string]any)["config"].(map[string]any)
	if diff := cmp.Diff(want, file); diff != "" {
		t.Errorf("tenant-rate-limits.yaml (-values +file):\n%s", diff)
	}
	// The file is mounted where the flag points.
	_, c := r.deployment(t)
	if p, _ := flag(c.Args, "tenant-rate-limit-config"); !strings.HasPrefix(p, configMount(t, c.VolumeMounts)+"/") {
		t.Errorf("--tenant-rate-limit-config=%s is not in the config volume", p)
	}

	// A file given as a string is written as given.
	r = mustRender(t, values(t, "config: {rateLimits: {tenantRateLimits: {enabled: true, config: \"default_policy: {tokens_per_minute: 60, requests_per_minute: 6}\\n\"}}}\n"))
	if got := r.configMap(t, "-config").Data["tenant-rate-limits.yaml"]; got != "default_policy: {tokens_per_minute: 60, requests_per_minute: 6}\n" {
		t.Errorf("tenant-rate-limits.yaml = %q; want the string as given", got)
	}
	// A budget change rolls the pods.
	checksum := func(doc string) string {
		d, _ := mustRender(t, values(t, doc)).deployment(t)
		return d.Spec.Template.Annotations["checksum/config"]
	}
	if checksum(sampleTenantLimits) == checksum(strings.Replace(sampleTenantLimits, "requests_per_minute: 60}", "requests_per_minute: 120}", 1)) {
		t.Error("checksum/config unchanged by a tenant budget change")
	}
	// Turned off, the file is left out with the flags.
	r = mustRender(t, values(t, strings.Replace(sampleTenantLimits, "enabled: true", "enabled: false", 1)))
	if _, ok := r.configMap(t, "-config").Data["tenant-rate-limits.yaml"]; ok {
		t.Error("tenant-rate-limits.yaml rendered with the tenant budgets off")
	}
}

// configMount returns the mount path of the config volume.
func configMount(t *testing.T, mounts []corev1.VolumeMount) string {
	t.Helper()
	for _, m := range mounts {
		if m.Name == "config" {
			return m.MountPath
		}
	}
	t.Fatal("no config volume mount")
	return ""
}

// TestFlatSLOPolicyRenders: Dynamo's flat SLO policy file (classes with
// slo_ms, no families or buckets) passes the schema as YAML and as a
// string, and reaches tollgate as written.
func TestFlatSLOPolicyRenders(t *testing.T) {
	policy := readFile(t, sloPolicy)
	var want map[string]any
	if err := yaml.UnmarshalStrict([]byte(policy), &want); err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string]string{
		"as YAML":     "config:\n  routerPolicy:\n" + indent(policy, "    "),
		"as a string": "config:\n  routerPolicy: |\n" + indent(policy, "    "),
	} {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, values(t, doc))
			got := r.configMap(t, "-config").Data["router-policy.yaml"]
			if name == "as a string" && got != policy {
				t.Errorf("router-policy.yaml = %q; want the file as given", got)
			}
			var file map[string]any
			if err := yaml.UnmarshalStrict([]byte(got), &file); err != nil {
				t.Fatalf("router-policy.yaml: %v\n%s", err, got)
			}
			if diff := cmp.Diff(want, file); diff != "" {
				t.Errorf("router-policy.yaml (-%s +rendered):\n%s", sloPolicy, diff)
			}
			_, c := r.deployment(t)
			if p, ok := flag(c.Args, "router-policy-config"); !ok || p != "/etc/tollgate/config/router-policy.yaml" {
				t.Errorf("--router-policy-config = %q (present %v); want /etc/tollgate/config/router-policy.yaml", p, ok)
			}
		})
	}
}

// TestRateLimitExample: the chart's rate-limit example lints clean, renders
// every rate-limit flag, and its policy is examples/slo_rejection.yaml. (It
// passes `tollgate check-config` in TestRenderedConfigPassesCheckConfig.)
func TestRateLimitExample(t *testing.T) {
	doc := readFile(t, rateLimitValues)
	for _, m := range lint.All(chartDir, values(t, doc), namespace, false).Messages {
		if m.Severity > support.InfoSev {
			t.Errorf("lint: %s", m)
		}
	}
	r := mustRender(t, values(t, doc))
	_, c := r.deployment(t)
	want := []string{
		"--max-concurrent-requests=64", "--rate-limit-tokens-per-second=20", "--queue-size=256", "--queue-timeout-secs=30",
		"--tenant-rate-limit-enabled", "--tenant-rate-limit-config=" + tenantFilePath,
	}
	if diff := cmp.Diff(want, rateLimitArgs(c.Args)); diff != "" {
		t.Errorf("rate-limit flags (-want +got):\n%s", diff)
	}
	var example, upstream map[string]any
	if err := yaml.Unmarshal([]byte(doc), &example); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(readFile(t, sloPolicy)), &upstream); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(upstream, example["config"].(map[string]any)["routerPolicy"]); diff != "" {
		t.Errorf("%s's routerPolicy differs from %s (-upstream +example):\n%s", rateLimitValues, sloPolicy, diff)
	}
	if _, ok := r.configMap(t, "-config").Data["tenant-rate-limits.yaml"]; !ok {
		t.Error("the example renders no tenant-rate-limits.yaml")
	}
}

func TestRateLimitSchemaRejectsBadValues(t *testing.T) {
	tenantFile := func(file string) string {
		return "config: {rateLimits: {tenantRateLimits: {enabled: true, config: " + file + "}}}\n"
	}
	const dp = "default_policy: {tokens_per_minute: 60, requests_per_minute: 6}"
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"bucket above 65535", "config: {rateLimits: {maxConcurrentRequests: 65536}}\n", "/config/rateLimits/maxConcurrentRequests"},
		{"bucket below -1", "config: {rateLimits: {maxConcurrentRequests: -2}}\n", "/config/rateLimits/maxConcurrentRequests"},
		{"bucket not an integer", "config: {rateLimits: {maxConcurrentRequests: 1.5}}\n", "/config/rateLimits/maxConcurrentRequests"},
		{"negative refill", "config: {rateLimits: {tokensPerSecond: -1}}\n", "/config/rateLimits/tokensPerSecond"},
		{"negative queue", "config: {rateLimits: {queueSize: -1}}\n", "/config/rateLimits/queueSize"},
		{"queue above the limit", "config: {rateLimits: {queueSize: 1048577}}\n", "/config/rateLimits/queueSize"},
		{"queue timeout zero", "config: {rateLimits: {queueTimeoutSecs: 0}}\n", "/config/rateLimits/queueTimeoutSecs"},
		{"queue timeout above a day", "config: {rateLimits: {queueTimeoutSecs: 86401}}\n", "/config/rateLimits/queueTimeoutSecs"},
		{"rate limits unknown key", "config: {rateLimits: {burst: 10}}\n", "burst"},
		{"tenant switch", "config: {rateLimits: {tenantRateLimits: {enabled: \"yes\"}}}\n", "/config/rateLimits/tenantRateLimits/enabled"},
		{"tenant file list", tenantFile("[]"), "/config/rateLimits/tenantRateLimits/config"},
		{"tenant file without default_policy", tenantFile("{tenants: []}"), "/config/rateLimits/tenantRateLimits/config"},
		{"tenant file unknown key", tenantFile("{" + dp + ", limits: []}"), "limits"},
		{"zero budget", tenantFile("{default_policy: {tokens_per_minute: 0, requests_per_minute: 6}}"), "/config/rateLimits/tenantRateLimits/config/default_policy/tokens_per_minute"},
		{"budget above u32", tenantFile("{default_policy: {tokens_per_minute: 4294967296, requests_per_minute: 6}}"), "/config/rateLimits/tenantRateLimits/config/default_policy/tokens_per_minute"},
		{"budget missing", tenantFile("{default_policy: {tokens_per_minute: 60}}"), "requests_per_minute"},
		{"default policy with a tenant", tenantFile("{default_policy: {tenant_key: anonymous, tokens_per_minute: 60, requests_per_minute: 6}}"), "/config/rateLimits/tenantRateLimits/config/default_policy"},
		{"tenant without a key", tenantFile("{" + dp + ", tenants: [{tokens_per_minute: 60, requests_per_minute: 6}]}"), "tenant_key"},
		{"matcher type", tenantFile("{" + dp + ", tenants: [{tenant_key: anonymous, tokens_per_minute: 60, requests_per_minute: 6, model_rules: [{rule_id: r, matcher: {type: regex, value: x}, tokens_per_minute: 6, requests_per_minute: 6}]}]}"), "/config/rateLimits/tenantRateLimits/config/tenants/0/model_rules/0/matcher/type"},
		{"rule id", tenantFile("{" + dp + ", tenants: [{tenant_key: anonymous, tokens_per_minute: 60, requests_per_minute: 6, model_rules: [{rule_id: \"a b\", matcher: {type: exact, value: x}, tokens_per_minute: 6, requests_per_minute: 6}]}]}"), "/config/rateLimits/tenantRateLimits/config/tenants/0/model_rules/0/rule_id"},
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

func TestRateLimitTemplatesRejectBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"tenant budgets without a file", "config: {rateLimits: {tenantRateLimits: {enabled: true}}}\n", "config.rateLimits.tenantRateLimits.enabled needs config.rateLimits.tenantRateLimits.config"},
		{"tenant budgets with an empty string", "config: {rateLimits: {tenantRateLimits: {enabled: true, config: \"\"}}}\n", "config.rateLimits.tenantRateLimits.enabled needs config.rateLimits.tenantRateLimits.config"},
		{"bucket in extraArgs too", "config: {rateLimits: {maxConcurrentRequests: 64}}\nextraArgs: [--max-concurrent-requests=32]\n", `extraArgs has "--max-concurrent-requests=32" but config.rateLimits already sets --max-concurrent-requests`},
		{"single-dash flag in extraArgs too", "config: {rateLimits: {queueSize: 0}}\nextraArgs: [-queue-size, \"10\"]\n", `extraArgs has "-queue-size" but config.rateLimits already sets --queue-size`},
		{"tenant switch in extraArgs too", sampleTenantLimits + "extraArgs: [--tenant-rate-limit-enabled=true]\n", "config.rateLimits already sets --tenant-rate-limit-enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(t, values(t, tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v; want one containing %q", err, tc.want)
			}
		})
	}
	// A flag the values leave out may still come from extraArgs, as before
	// the chart had these values.
	_, c := mustRender(t, values(t, "extraArgs: [--max-concurrent-requests=32, --queue-size=0]\n")).deployment(t)
	if diff := cmp.Diff([]string{"--max-concurrent-requests=32", "--queue-size=0"}, rateLimitArgs(c.Args)); diff != "" {
		t.Errorf("rate-limit flags from extraArgs (-want +got):\n%s", diff)
	}
}

// TestRateLimitNotes: NOTES.txt warns about rate-limit values that cannot
// take effect, as tollgate does at startup.
func TestRateLimitNotes(t *testing.T) {
	const noBucket = "have no effect\nwithout config.rateLimits.maxConcurrentRequests > 0"
	const priority = "are ignored with the priority\nscheduler"
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"defaults", "", ""},
		{"refill without a bucket", "config: {rateLimits: {tokensPerSecond: 10}}\n", noBucket},
		{"queue with bucket 0", "config: {rateLimits: {maxConcurrentRequests: 0, queueSize: 10}}\n", noBucket},
		{"legacy admission", "config: {rateLimits: {maxConcurrentRequests: 8, queueSize: 10, queueTimeoutSecs: 5}}\n", ""},
		{"rate check with the priority scheduler", "config: {priorityScheduler: {enabled: true}, rateLimits: {maxConcurrentRequests: 8, tokensPerSecond: 4}}\n", ""},
		{"queue with the priority scheduler", "config: {priorityScheduler: {enabled: true}, rateLimits: {maxConcurrentRequests: 8, queueTimeoutSecs: 5}}\n", priority},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := renderChart(t, values(t, tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			notes := files["tollgate/templates/NOTES.txt"]
			for _, w := range []string{noBucket, priority} {
				if has := strings.Contains(notes, w); has != (w == tc.want) {
					t.Errorf("NOTES.txt contains %q: %v; want %v\n%s", w, has, w == tc.want, notes)
				}
			}
		})
	}
}

// indent prefixes every non-empty line of s with prefix.
func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}
