package charttest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	istioclient "istio.io/client-go/pkg/apis/networking/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/tollgate/tollgate/envoy"
)

const (
	chartDir    = "../tollgate"
	releaseName = "tollgate"
	namespace   = "inference"
)

var (
	loadOnce  sync.Once
	loaded    *chart.Chart
	loadError error
)

// loadChart loads the chart once per test binary.
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	loadOnce.Do(func() { loaded, loadError = loader.Load(chartDir) })
	if loadError != nil {
		t.Fatal(loadError)
	}
	return loaded
}

// values parses a YAML values override.
func values(t *testing.T, doc string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(doc))
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	return v.AsMap()
}

// renderChart renders the chart as an install into namespace would, schema
// validation included, and returns the manifests by template path.
func renderChart(t *testing.T, override map[string]any) (map[string]string, error) {
	t.Helper()
	return renderChartIn(t, namespace, override)
}

// renderChartIn is renderChart with the release in namespace ns.
func renderChartIn(t *testing.T, ns string, override map[string]any) (map[string]string, error) {
	t.Helper()
	c := loadChart(t)
	vals, err := chartutil.ToRenderValues(c, override,
		chartutil.ReleaseOptions{Name: releaseName, Namespace: ns, IsInstall: true, Revision: 1},
		chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Engine{Strict: true}.Render(c, vals)
}

// rendered is the decoded output of one render.
type rendered struct {
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	configMaps      []*corev1.ConfigMap
	secrets         []*corev1.Secret
	serviceAccounts []*corev1.ServiceAccount
	pdbs            []*policyv1.PodDisruptionBudget
	roles           []*rbacv1.Role
	roleBindings    []*rbacv1.RoleBinding
	serviceMonitors []*monitoringv1.ServiceMonitor
	networkPolicies []*networkingv1.NetworkPolicy
	prometheusRules []*monitoringv1.PrometheusRule
	envoyFilters    []*istioclient.EnvoyFilter
	gateway         envoy.GatewayPolicies
	kinds           []string
}

// mustRender renders override and decodes every object strictly.
func mustRender(t *testing.T, override map[string]any) *rendered {
	t.Helper()
	return mustRenderIn(t, namespace, override)
}

// mustRenderIn is mustRender with the release in namespace ns.
func mustRenderIn(t *testing.T, ns string, override map[string]any) *rendered {
	t.Helper()
	files, err := renderChartIn(t, ns, override)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	r, err := decodeAll(files)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// decodeAll decodes every manifest strictly into its Go type.
func decodeAll(files map[string]string) (*rendered, error) {
	r := new(rendered)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if !strings.HasSuffix(name, ".yaml") {
			continue // NOTES.txt and helpers
		}
		docs, err := envoy.SplitYAML([]byte(files[name]))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, doc := range docs {
			if err := r.decode(doc); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	slices.Sort(r.kinds)
	return r, nil
}

func (r *rendered) decode(doc []byte) error {
	apiVersion, kind, err := envoy.PeekKind(doc)
	if err != nil {
		return err
	}
	r.kinds = append(r.kinds, kind)
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return strict(doc, &r.deployments)
	case "v1 Service":
		return strict(doc, &r.services)
	case "v1 ConfigMap":
		return strict(doc, &r.configMaps)
	case "v1 Secret":
		return strict(doc, &r.secrets)
	case "v1 ServiceAccount":
		return strict(doc, &r.serviceAccounts)
	case "policy/v1 PodDisruptionBudget":
		return strict(doc, &r.pdbs)
	case "rbac.authorization.k8s.io/v1 Role":
		return strict(doc, &r.roles)
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		return strict(doc, &r.roleBindings)
	case "networking.k8s.io/v1 NetworkPolicy":
		return strict(doc, &r.networkPolicies)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return strict(doc, &r.serviceMonitors)
	case "monitoring.coreos.com/v1 PrometheusRule":
		return strict(doc, &r.prometheusRules)
	case "networking.istio.io/v1alpha3 EnvoyFilter":
		ef, err := envoy.DecodeEnvoyFilter(doc)
		if err != nil {
			return err
		}
		r.envoyFilters = append(r.envoyFilters, ef)
		return nil
	default:
		if strings.HasPrefix(apiVersion, "gateway.envoyproxy.io/") {
			return r.gateway.Decode(doc)
		}
		return fmt.Errorf("unexpected object %s %s", apiVersion, kind)
	}
}

// strict decodes doc into a new T, rejecting unknown and duplicate fields.
func strict[T any](doc []byte, list *[]*T) error {
	v := new(T)
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		return fmt.Errorf("decode %T: %w", v, err)
	}
	*list = append(*list, v)
	return nil
}

// configMap returns the rendered ConfigMap with the given name suffix.
func (r *rendered) configMap(t *testing.T, suffix string) *corev1.ConfigMap {
	t.Helper()
	for _, cm := range r.configMaps {
		if strings.HasSuffix(cm.Name, suffix) {
			return cm
		}
	}
	t.Fatalf("no ConfigMap named *%s", suffix)
	return nil
}

// deployment returns the single rendered Deployment and its container.
func (r *rendered) deployment(t *testing.T) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	if len(r.deployments) != 1 {
		t.Fatalf("rendered %d Deployments; want 1", len(r.deployments))
	}
	d := r.deployments[0]
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("Deployment has %d containers; want 1", len(d.Spec.Template.Spec.Containers))
	}
	return d, &d.Spec.Template.Spec.Containers[0]
}

// flag returns the value of --name=value in args, and whether it is there.
func flag(args []string, name string) (string, bool) {
	for _, a := range args {
		if a == "--"+name {
			return "", true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}
