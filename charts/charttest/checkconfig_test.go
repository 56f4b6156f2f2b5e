package charttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// checkConfigScenario is the richest value set whose files a test can
// materialise: every config file, tenant keys and an integration. (TLS
// needs certificates from a Secret, which a render does not contain.)
const checkConfigScenario = sampleConfig + "integration: istio\n" + checkConfigTenants

// checkConfigTenants are tenant keys the scenarios add.
const checkConfigTenants = `
tenants:
  apiKeys:
  - {id: team-a, key: s3cret-a}
  - {id: team-b, key: s3cret-b}
`

// TestRenderedConfigPassesCheckConfig runs the real `tollgate check-config`
// on the files and arguments the chart renders, for every worker source and
// with replicas (leader election over a Lease or etcd, and the peer
// channel), and on broken variants that it must reject. It runs outside any
// cluster, with no kubeconfig and no in-cluster environment: check-config
// validates the discovery and leader election flags without contacting the
// API or etcd.
func TestRenderedConfigPassesCheckConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tollgate binary")
	}
	bin := tollgateBinary(t)

	checkConfig := func(t *testing.T, doc string) (string, error) {
		t.Helper()
		args := asCheckConfig(t, materialise(t, mustRender(t, values(t, doc))))
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Env = outsideCluster()
		out, err := cmd.CombinedOutput()
		return fmt.Sprintf("tollgate %s\n%s", strings.Join(args, " "), out), err
	}
	// The rate-limit example: SMG's legacy admission, tenant budgets and
	// Dynamo's flat SLO classes.
	rateLimits := readFile(t, rateLimitValues) + checkConfigTenants
	for _, name := range []string{"static", "kubernetesService", "kubernetesSelector", "inferencePool", "leaderElection", "etcd", "rateLimits", "pd"} {
		t.Run(name+" passes", func(t *testing.T) {
			doc := checkConfigScenario
			switch name {
			case "static":
			case "rateLimits":
				doc = rateLimits
			case "pd":
				doc = pdScenario + checkConfigTenants
			default:
				doc = scenarios[name] + checkConfigTenants
			}
			out, err := checkConfig(t, doc)
			if err != nil || !strings.Contains(out, "configuration ok") {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
	// Each broken value passes the chart's schema; only tollgate's own
	// checks catch it.
	for name, tc := range map[string]struct{ doc, old, new, want string }{
		"zero quantum":               {checkConfigScenario, "quantum: 512", "quantum: 0", `policy class "premium" quantum must be greater than zero`},
		"too little capacity":        {checkConfigScenario, "max_running_requests: 128", "max_running_requests: 50", "sum of class reservations (142) exceeds capacity (100)"},
		"bad selector":               {scenarios["kubernetesSelector"], "app=vllm,tier in (gpu)", "app in ((", `--k8s-selector: kube: label selector "app in ((": unable to parse requirement`},
		"lease not above renew":      {scenarios["leaderElection"], "leaseDuration: 20s", "leaseDuration: 15s", "lease duration 15s must exceed the renew deadline 15s"},
		"etcd endpoint scheme":       {scenarios["etcd"], "http://etcd-1.etcd:2379", "ftp://etcd-1.etcd:2379", `endpoint "ftp://etcd-1.etcd:2379": scheme must be http or https`},
		"untrusted header tenant":    {rateLimits, `tenant_key: "auth:team-a"`, `tenant_key: "header:team-a"`, "tenant_key 'header:team-a' needs --trust-tenant-header"},
		"tenant key not canonical":   {rateLimits, `tenant_key: "auth:team-a"`, `tenant_key: "team-a"`, "is not a canonical serving-path tenant key"},
		"flat and family keys mixed": {rateLimits, "default_policy_class: standard", "default_policy_class: standard\n    default_policy_family: regular", "mixes two policy file generations"},
		"prefill adds no SMG slots":  {pdScenario, "max_running_requests: 128, role: decode", "max_running_requests: 32, role: decode", "exceeds capacity (160)"},
	} {
		t.Run(name, func(t *testing.T) {
			broken := strings.ReplaceAll(tc.doc, tc.old, tc.new)
			if broken == tc.doc {
				t.Fatalf("%q is not in the scenario", tc.old)
			}
			out, err := checkConfig(t, broken)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("check-config output lacks %q (err %v):\n%s", tc.want, err, out)
			}
		})
	}
}

// outsideCluster is the test's environment without anything that would
// let a Kubernetes client find a cluster or tollgate its namespace.
func outsideCluster() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "KUBECONFIG" || name == "POD_NAMESPACE" || name == "POD_NAME" || strings.HasPrefix(name, "KUBERNETES_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// asCheckConfig turns the container's arguments, the serve command and its
// flags, into the check-config command that validates the same flags.
func asCheckConfig(t *testing.T, args []string) []string {
	t.Helper()
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("container args %q do not start with the serve command", args)
	}
	return append([]string{"check-config"}, args[1:]...)
}

// materialise writes the rendered configuration files and tenant keys to a
// temporary directory and returns the container's arguments rewritten to
// read them there.
func materialise(t *testing.T, r *rendered) []string {
	t.Helper()
	return materialiseAs(t, r, "tollgate-5d4f8b7c9-x2x7q", namespace)
}

// materialiseAs is materialise for the pod named pod in namespace ns.
func materialiseAs(t *testing.T, r *rendered, pod, ns string) []string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range r.configMap(t, "-config").Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range r.secrets {
		for name, data := range s.Data {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		for name, data := range s.StringData {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, c := r.deployment(t)
	out := make([]string, 0, len(c.Args))
	for _, a := range expandEnv(t, c, pod, ns) {
		a = strings.ReplaceAll(a, "/etc/tollgate/config", dir)
		a = strings.ReplaceAll(a, "/etc/tollgate/tenants", dir)
		out = append(out, a)
	}
	return out
}

// podIP is the address expandEnv gives every pod.
const podIP = "10.244.1.7"

// expandEnv returns c's arguments with $(VAR) references to its
// downward-API variables expanded as the kubelet would, for a pod named pod
// in namespace ns with the address podIP. A reference to any other
// variable fails the test.
func expandEnv(t *testing.T, c *corev1.Container, pod, ns string) []string {
	t.Helper()
	var pairs []string
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			pairs = append(pairs, "$("+e.Name+")", e.Value)
			continue
		}
		switch e.ValueFrom.FieldRef.FieldPath {
		case "metadata.name":
			pairs = append(pairs, "$("+e.Name+")", pod)
		case "metadata.namespace":
			pairs = append(pairs, "$("+e.Name+")", ns)
		case "status.podIP":
			pairs = append(pairs, "$("+e.Name+")", podIP)
		default:
			t.Fatalf("env %s: unexpected field %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
		}
	}
	r := strings.NewReplacer(pairs...)
	out := make([]string, 0, len(c.Args))
	for _, a := range c.Args {
		a = r.Replace(a)
		if strings.Contains(a, "$(") {
			t.Fatalf("argument %q refers to a variable the container does not define", a)
		}
		out = append(out, a)
	}
	return out
}
