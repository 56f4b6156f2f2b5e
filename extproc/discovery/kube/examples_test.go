package kube

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

// manifest holds the decoded documents of an example, by kind and name.
type manifest struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	roles       map[string]*rbacv1.Role
	bindings    map[string]*rbacv1.RoleBinding
	accounts    map[string]*corev1.ServiceAccount
	pools       map[string]*unstructured.Unstructured
	routes      map[string]*gwapiv1.HTTPRoute
}

// loadManifest decodes every document of path strictly: unknown fields
// and unknown kinds fail the test.
func loadManifest(t *testing.T, path string) *manifest {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := &manifest{map[string]*appsv1.Deployment{}, map[string]*corev1.Service{}, map[string]*rbacv1.Role{},
		map[string]*rbacv1.RoleBinding{}, map[string]*corev1.ServiceAccount{}, map[string]*unstructured.Unstructured{},
		map[string]*gwapiv1.HTTPRoute{}}
	for i, doc := range strings.Split(string(data), "\n---\n") {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		strict := func(v any) {
			if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
				t.Fatalf("%s %s: %v", head.Kind, head.Metadata.Name, err)
			}
		}
		name := head.Metadata.Name
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 Deployment":
			m.deployments[name] = &appsv1.Deployment{}
			strict(m.deployments[name])
		case "v1 Service":
			m.services[name] = &corev1.Service{}
			strict(m.services[name])
		case "v1 ServiceAccount":
			m.accounts[name] = &corev1.ServiceAccount{}
			strict(m.accounts[name])
		case "rbac.authorization.k8s.io/v1 Role":
			m.roles[name] = &rbacv1.Role{}
			strict(m.roles[name])
		case "rbac.authorization.k8s.io/v1 RoleBinding":
			m.bindings[name] = &rbacv1.RoleBinding{}
			strict(m.bindings[name])
		case "gateway.networking.k8s.io/v1 HTTPRoute":
			m.routes[name] = &gwapiv1.HTTPRoute{}
			strict(m.routes[name])
		case "inference.networking.k8s.io/v1 InferencePool":
			u := &unstructured.Unstructured{}
			strict(&u.Object)
			m.pools[name] = u
		default:
			t.Fatalf("document %d: unexpected %s %s", i, head.APIVersion, head.Kind)
		}
	}
	return m
}

// allows reports whether role grants verb on group/resource, for name
// when the rule lists resource names.
func allows(role *rbacv1.Role, group, resource, verb, name string) bool {
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) &&
			(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name)) {
			return true
		}
	}
	return false
}

func TestExample_InferencePool(t *testing.T) {
	m := loadManifest(t, filepath.Join("..", "..", "..", "examples", "kubernetes", "inferencepool.yaml"))
	if len(m.pools) != 1 {
		t.Fatalf("%d InferencePools, want 1", len(m.pools))
	}
	var poolName string
	var p *pool
	for name, u := range m.pools {
		var err error
		if p, err = decodePool(u); err != nil {
			t.Fatalf("InferencePool %s: %v", name, err)
		}
		poolName = name
	}

	// The pool selects the model servers' pods on their serving port, and
	// their annotations are valid.
	models := m.deployments["vllm-llama"]
	if models == nil {
		t.Fatal("no model server Deployment vllm-llama")
	}
	tpl := models.Spec.Template
	if !p.selector.Matches(labels.Set(tpl.Labels)) {
		t.Errorf("pool selector %s does not match the model pods %v", p.selector, tpl.Labels)
	}
	if got := tpl.Spec.Containers[0].Ports[0].ContainerPort; len(p.ports) != 1 || int32(p.ports[0]) != got {
		t.Errorf("pool target ports %v, model server listens on %d", p.ports, got)
	}
	if _, err := podWorker(&corev1.Pod{ObjectMeta: tpl.ObjectMeta}, Defaults{}); err != nil {
		t.Errorf("model pod annotations: %v", err)
	}

	// The pool's picker is the tollgate Service, which fronts tollgate's
	// ext_proc port.
	if p.picker != "Service tollgate port 9002 FailClose" {
		t.Errorf("endpoint picker %q", p.picker)
	}
	svc, dep := m.services["tollgate"], m.deployments["tollgate"]
	if svc == nil || dep == nil {
		t.Fatal("no tollgate Service or Deployment")
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) ||
		svc.Spec.Ports[0].Port != 9002 || svc.Spec.Ports[0].TargetPort.IntValue() != 9002 {
		t.Errorf("the tollgate Service does not front port 9002 of the tollgate pods: %+v", svc.Spec)
	}

	// tollgate follows that pool with leader election, with the RBAC it
	// needs through its service account.
	args := dep.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--discovery=inferencepool", "--pool=$(POD_NAMESPACE)/" + poolName, "--leader-elect"} {
		if !slices.Contains(args, want) {
			t.Errorf("tollgate args %v lack %s", args, want)
		}
	}
	sa := dep.Spec.Template.Spec.ServiceAccountName
	b := m.bindings["tollgate"]
	if m.accounts[sa] == nil || b == nil || b.Subjects[0].Name != sa || b.RoleRef.Kind != "Role" {
		t.Fatalf("service account %q is not bound to a Role", sa)
	}
	role := m.roles[b.RoleRef.Name]
	if role == nil {
		t.Fatalf("no Role %s", b.RoleRef.Name)
	}
	for _, g := range []struct{ group, resource, verb, name string }{
		{"inference.networking.k8s.io", "inferencepools", "list", poolName},
		{"inference.networking.k8s.io", "inferencepools", "watch", poolName},
		{"", "pods", "list", ""},
		{"", "pods", "watch", ""},
		{"coordination.k8s.io", "leases", "get", "tollgate"},
		{"coordination.k8s.io", "leases", "create", "tollgate"},
		{"coordination.k8s.io", "leases", "update", "tollgate"},
	} {
		if !allows(role, g.group, g.resource, g.verb, g.name) {
			t.Errorf("Role %s does not allow %s on %s.%s", role.Name, g.verb, g.resource, g.group)
		}
	}

	// The route sends traffic to the pool.
	route := m.routes["llm"]
	if route == nil {
		t.Fatal("no HTTPRoute llm")
	}
	ref := route.Spec.Rules[0].BackendRefs[0]
	if ref.Group == nil || string(*ref.Group) != InferencePoolGVR.Group || ref.Kind == nil || *ref.Kind != "InferencePool" || string(ref.Name) != poolName {
		t.Errorf("route backend %+v is not the pool", ref.BackendObjectReference)
	}
}
