package charttest

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/tollgate/tollgate/envoy"
)

const (
	// exampleValues is the chart's InferencePool example.
	exampleValues = chartDir + "/examples/values-inferencepool.yaml"
	// exampleManifest is the plain-manifest example it renders.
	exampleManifest = "../../examples/kubernetes/inferencepool.yaml"
)

// poolExample is what the test reads from exampleManifest.
type poolExample struct {
	tollgate *appsv1.Deployment
	role     *rbacv1.Role
	pool     struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			EndpointPickerRef struct {
				Name string `json:"name"`
				Port struct {
					Number int32 `json:"number"`
				} `json:"port"`
			} `json:"endpointPickerRef"`
		} `json:"spec"`
	}
}

// loadPoolExample decodes the tollgate Deployment, its Role and the
// InferencePool of exampleManifest.
func loadPoolExample(t *testing.T) *poolExample {
	t.Helper()
	data, err := os.ReadFile(exampleManifest)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := envoy.SplitYAML(data)
	if err != nil {
		t.Fatal(err)
	}
	ex := new(poolExample)
	for _, doc := range docs {
		apiVersion, kind, err := envoy.PeekKind(doc)
		if err != nil {
			t.Fatal(err)
		}
		var into any
		switch apiVersion + " " + kind {
		case "apps/v1 Deployment":
			d := new(appsv1.Deployment)
			if err := yaml.UnmarshalStrict(doc, d); err != nil {
				t.Fatal(err)
			}
			if d.Name == "tollgate" {
				ex.tollgate = d
			}
			continue
		case "rbac.authorization.k8s.io/v1 Role":
			ex.role = new(rbacv1.Role)
			into = ex.role
		case "inference.networking.k8s.io/v1 InferencePool":
			into = &ex.pool
		default:
			continue
		}
		if err := yaml.Unmarshal(doc, into); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
	}
	if ex.tollgate == nil || ex.role == nil || ex.pool.Metadata.Name == "" {
		t.Fatalf("%s lacks the tollgate Deployment, its Role or the InferencePool", exampleManifest)
	}
	return ex
}

// TestInferencePoolExample: the chart's example values render what the
// plain-manifest example deploys: the same flags, replicas, probes and
// grace period, a Service the pool's endpointPickerRef reaches, and the
// same permissions or narrower ones.
func TestInferencePoolExample(t *testing.T) {
	ex := loadPoolExample(t)
	ns := ex.tollgate.Namespace
	vals, err := chartutil.ReadValuesFile(exampleValues)
	if err != nil {
		t.Fatal(err)
	}
	r := mustRenderIn(t, ns, vals.AsMap())
	d, c := r.deployment(t)
	exc := &ex.tollgate.Spec.Template.Spec.Containers[0]

	const pod = "tollgate-6b9c7d5f4-abcde"
	got := argMap(t, expandEnv(t, c, pod, ns))
	for name, want := range argMap(t, expandEnv(t, exc, pod, ns)) {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("--%s = %q (present %v); the example passes %q", name, v, ok, want)
		}
	}
	if want := fmt.Sprintf("%s/%s", ex.pool.Metadata.Namespace, ex.pool.Metadata.Name); got["pool"] != want {
		t.Errorf("--pool=%s; want the example's InferencePool %s", got["pool"], want)
	}

	if *d.Spec.Replicas != *ex.tollgate.Spec.Replicas {
		t.Errorf("replicas = %d; the example runs %d", *d.Spec.Replicas, *ex.tollgate.Spec.Replicas)
	}
	if *d.Spec.Template.Spec.TerminationGracePeriodSeconds != *ex.tollgate.Spec.Template.Spec.TerminationGracePeriodSeconds {
		t.Errorf("terminationGracePeriodSeconds = %d; the example uses %d",
			*d.Spec.Template.Spec.TerminationGracePeriodSeconds, *ex.tollgate.Spec.Template.Spec.TerminationGracePeriodSeconds)
	}
	probe := func(p *corev1.Probe) string {
		return fmt.Sprintf("GET %s every %ds, %d failure(s)", p.HTTPGet.Path, p.PeriodSeconds, p.FailureThreshold)
	}
	if g, w := probe(c.ReadinessProbe), probe(exc.ReadinessProbe); g != w {
		t.Errorf("readiness probe %s; the example's is %s", g, w)
	}
	if !c.Resources.Requests.Memory().Equal(*exc.Resources.Requests.Memory()) || !c.Resources.Requests.Cpu().Equal(*exc.Resources.Requests.Cpu()) {
		t.Errorf("resource requests = %v; the example requests %v", c.Resources.Requests, exc.Resources.Requests)
	}

	// The pool's endpoint picker is this release's Service and grpc port.
	ref := ex.pool.Spec.EndpointPickerRef
	svc := r.services[0]
	if svc.Name != ref.Name || svc.Namespace != ns {
		t.Errorf("Service %s/%s; the pool's endpointPickerRef names %s/%s", svc.Namespace, svc.Name, ns, ref.Name)
	}
	if i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == ref.Port.Number }); i < 0 || svc.Spec.Ports[i].Name != "grpc" {
		t.Errorf("Service ports %+v; want grpc on the endpointPickerRef's port %d", svc.Spec.Ports, ref.Port.Number)
	}

	// The chart grants the verbs of the example on the same resources,
	// never more, and never without a name the example restricts to.
	var chartRules []rbacv1.PolicyRule
	for _, role := range r.roles {
		if role.Namespace != ns {
			t.Errorf("Role %s is in %s; want %s", role.Name, role.Namespace, ns)
		}
		chartRules = append(chartRules, role.Rules...)
	}
	if diff := cmp.Diff(verbsByResource(ex.role.Rules), verbsByResource(chartRules)); diff != "" {
		t.Errorf("verbs by resource (-example +chart):\n%s", diff)
	}
	for _, rule := range chartRules {
		if !slices.ContainsFunc(ex.role.Rules, func(e rbacv1.PolicyRule) bool { return covers(e, rule) }) {
			t.Errorf("chart rule %+v is broader than every rule of the example's Role", rule)
		}
	}
}

// argMap returns --name=value arguments by name, skipping the serve
// subcommand; anything else, or a repeated flag, fails the test.
func argMap(t *testing.T, args []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, a := range args {
		if a == "serve" {
			continue
		}
		flag, ok := strings.CutPrefix(a, "--")
		if !ok {
			t.Fatalf("argument %q is not a flag", a)
		}
		name, v, _ := strings.Cut(flag, "=")
		if _, dup := m[name]; dup {
			t.Fatalf("--%s is given twice", name)
		}
		m[name] = v
	}
	return m
}

// verbsByResource returns the sorted verbs rules grant on each
// "group/resource".
func verbsByResource(rules []rbacv1.PolicyRule) map[string][]string {
	set := map[string]map[string]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				k := g + "/" + res
				if set[k] == nil {
					set[k] = map[string]bool{}
				}
				for _, v := range r.Verbs {
					set[k][v] = true
				}
			}
		}
	}
	out := map[string][]string{}
	for k, verbs := range set {
		out[k] = slices.Sorted(maps.Keys(verbs))
	}
	return out
}

// covers reports whether rule e grants everything rule r grants.
func covers(e, r rbacv1.PolicyRule) bool {
	sub := func(small, big []string) bool {
		for _, s := range small {
			if !slices.Contains(big, s) {
				return false
			}
		}
		return true
	}
	names := len(e.ResourceNames) == 0 || (len(r.ResourceNames) > 0 && sub(r.ResourceNames, e.ResourceNames))
	return sub(r.APIGroups, e.APIGroups) && sub(r.Resources, e.Resources) && sub(r.Verbs, e.Verbs) && names
}
