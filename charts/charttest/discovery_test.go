package charttest

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// discoveryFlags returns the worker discovery, leader election and peer
// channel flags in args by name.
func discoveryFlags(t *testing.T, args []string) map[string]string {
	t.Helper()
	got := argMap(t, args)
	for name := range got {
		switch {
		case name == "discovery", name == "workers", name == "pool", name == "kubeconfig",
			name == "peer-addr", name == "etcd-endpoints",
			strings.HasPrefix(name, "k8s-"), strings.HasPrefix(name, "leader-elect"):
		default:
			delete(got, name)
		}
	}
	return got
}

// leaderFlags are the replica flags of a release named tollgate in the
// test namespace: a Lease election with the given durations, and the peer
// channel on the pod IP's port 9003.
func leaderFlags(lease, renew, retry string) map[string]string {
	return map[string]string{
		"leader-elect":                "",
		"peer-addr":                   "$(POD_IP):9003",
		"leader-elect-backend":        "kube",
		"leader-elect-namespace":      namespace,
		"leader-elect-name":           "tollgate",
		"leader-elect-identity":       "$(POD_NAME)",
		"leader-elect-lease-duration": lease,
		"leader-elect-renew-deadline": renew,
		"leader-elect-retry-period":   retry,
	}
}

// etcdFlags are the replica flags of the etcd scenario: no Lease namespace
// and no renew deadline, which the etcd backend does not use.
var etcdFlags = map[string]string{
	"leader-elect":                "",
	"peer-addr":                   "$(POD_IP):9100",
	"leader-elect-backend":        "etcd",
	"etcd-endpoints":              "http://etcd-0.etcd:2379,http://etcd-1.etcd:2379",
	"leader-elect-name":           "tollgate",
	"leader-elect-identity":       "$(POD_NAME)",
	"leader-elect-lease-duration": "10s",
	"leader-elect-retry-period":   "2s",
}

// with returns the union of maps, later ones winning.
func with(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func TestDiscoveryArgs(t *testing.T) {
	static := map[string]string{"discovery": "static", "workers": "/etc/tollgate/config/workers.yaml"}
	for _, tc := range []struct {
		scenario string
		want     map[string]string
	}{
		{"default", with(static, leaderFlags("15s", "10s", "2s"))},
		{"istio", static},
		{"kubernetesService", map[string]string{
			"discovery":                          "kubernetes",
			"k8s-service":                        namespace + "/vllm",
			"k8s-port":                           "http",
			"k8s-default-max-running-requests":   "256",
			"k8s-default-max-num-batched-tokens": "8192",
			"k8s-default-dp-size":                "2",
			"k8s-model":                          "llama",
			"k8s-debounce":                       "500ms",
		}},
		{"kubernetesSelector", map[string]string{
			"discovery":     "kubernetes",
			"k8s-selector":  "app=vllm,tier in (gpu)",
			"k8s-namespace": "models",
			"k8s-port":      "8000",
			"k8s-debounce":  "200ms",
		}},
		{"inferencePool", with(map[string]string{
			"discovery":                        "inferencepool",
			"pool":                             namespace + "/vllm-llama",
			"k8s-default-max-running-requests": "64",
			"k8s-debounce":                     "200ms",
		}, leaderFlags("15s", "10s", "2s"))},
		{"leaderElection", with(static, leaderFlags("20s", "15s", "3s"))},
		{"etcd", with(static, etcdFlags)},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			r := mustRender(t, values(t, scenarios[tc.scenario]))
			_, c := r.deployment(t)
			if diff := cmp.Diff(tc.want, discoveryFlags(t, c.Args)); diff != "" {
				t.Errorf("discovery and leader election flags (-want +got):\n%s", diff)
			}
			_, hasWorkers := r.configMap(t, "-config").Data["workers.yaml"]
			if static := tc.want["discovery"] == "static"; hasWorkers != static {
				t.Errorf("ConfigMap has workers.yaml = %v; want %v with --discovery=%s", hasWorkers, static, tc.want["discovery"])
			}
		})
	}
	t.Run("unset defaults and debounce are left to tollgate", func(t *testing.T) {
		r := mustRender(t, values(t, single+"discovery: {mode: kubernetes, kubernetes: {service: vllm}, debounce: \"\"}\n"))
		_, c := r.deployment(t)
		want := map[string]string{"discovery": "kubernetes", "k8s-service": namespace + "/vllm"}
		if diff := cmp.Diff(want, discoveryFlags(t, c.Args)); diff != "" {
			t.Errorf("flags (-want +got):\n%s", diff)
		}
	})
}

// wantRules is the least-privilege Role for each purpose.
var (
	sliceRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
	}
	poolRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"inference.networking.k8s.io"}, Resources: []string{"inferencepools"}, ResourceNames: []string{"vllm-llama"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"inference.networking.x-k8s.io"}, Resources: []string{"inferenceobjectives", "inferencemodelrewrites"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
	}
)

func leaseRules(name string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{name}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
	}
}

// rolesByRef returns the rendered Roles' rules by NAMESPACE/NAME, and checks
// that each has exactly one RoleBinding, of the same name and namespace,
// granting it to the chart's ServiceAccount, and that nothing else is bound.
func rolesByRef(t *testing.T, r *rendered) map[string][]rbacv1.PolicyRule {
	t.Helper()
	sa := "tollgate"
	if len(r.serviceAccounts) == 1 {
		sa = r.serviceAccounts[0].Name
	}
	roles := map[string][]rbacv1.PolicyRule{}
	for _, role := range r.roles {
		roles[role.Namespace+"/"+role.Name] = role.Rules
	}
	bound := map[string]bool{}
	for _, b := range r.roleBindings {
		ref := b.Namespace + "/" + b.Name
		if _, ok := roles[ref]; !ok || bound[ref] {
			t.Errorf("RoleBinding %s binds no Role of its own name and namespace, or binds one twice", ref)
		}
		bound[ref] = true
		wantRef := rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: b.Name}
		wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: namespace}}
		if diff := cmp.Diff(wantRef, b.RoleRef); diff != "" {
			t.Errorf("RoleBinding %s roleRef (-want +got):\n%s", ref, diff)
		}
		if diff := cmp.Diff(wantSubjects, b.Subjects); diff != "" {
			t.Errorf("RoleBinding %s subjects (-want +got):\n%s", ref, diff)
		}
	}
	for ref := range roles {
		if !bound[ref] {
			t.Errorf("Role %s has no RoleBinding", ref)
		}
	}
	return roles
}

func TestRBAC(t *testing.T) {
	for _, tc := range []struct {
		scenario string
		want     map[string][]rbacv1.PolicyRule
	}{
		{"default", map[string][]rbacv1.PolicyRule{namespace + "/tollgate-leader-election": leaseRules("tollgate")}},
		{"istio", map[string][]rbacv1.PolicyRule{}},
		{"everything", map[string][]rbacv1.PolicyRule{namespace + "/tollgate-leader-election": leaseRules("tollgate")}},
		{"kubernetesService", map[string][]rbacv1.PolicyRule{namespace + "/tollgate-discovery": sliceRules}},
		// The workers' namespace holds the Role; the subject stays in the
		// release namespace.
		{"kubernetesSelector", map[string][]rbacv1.PolicyRule{"models/tollgate-discovery": sliceRules}},
		{"inferencePool", map[string][]rbacv1.PolicyRule{
			namespace + "/tollgate-discovery":       poolRules,
			namespace + "/tollgate-leader-election": leaseRules("tollgate"),
		}},
		{"leaderElection", map[string][]rbacv1.PolicyRule{namespace + "/tollgate-leader-election": leaseRules("tollgate")}},
		// The etcd backend holds no Lease.
		{"etcd", map[string][]rbacv1.PolicyRule{}},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			r := mustRender(t, values(t, scenarios[tc.scenario]))
			got := rolesByRef(t, r)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Roles (-want +got):\n%s", diff)
			}
			for ref, rules := range got {
				for _, rule := range rules {
					for _, v := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs, rule.ResourceNames} {
						for _, s := range v {
							if s == "*" {
								t.Errorf("Role %s has a wildcard: %+v", ref, rule)
							}
						}
					}
				}
			}
		})
	}
	t.Run("names follow the values", func(t *testing.T) {
		r := mustRender(t, values(t, scenarios["leaderElection"]+
			"leaderElection: {leaseName: tollgate-lock}\nserviceAccount: {name: gate}\nfullnameOverride: gw\n"))
		want := map[string][]rbacv1.PolicyRule{namespace + "/gw-leader-election": leaseRules("tollgate-lock")}
		if diff := cmp.Diff(want, rolesByRef(t, r)); diff != "" {
			t.Errorf("Roles (-want +got):\n%s", diff)
		}
		if r.roleBindings[0].Subjects[0].Name != "gate" {
			t.Errorf("RoleBinding subject = %+v; want the ServiceAccount gate", r.roleBindings[0].Subjects)
		}
		_, c := r.deployment(t)
		if v, _ := flag(c.Args, "leader-elect-name"); v != "tollgate-lock" {
			t.Errorf("--leader-elect-name=%s; want tollgate-lock", v)
		}
	})
	t.Run("rbac.create false renders no RBAC", func(t *testing.T) {
		r := mustRender(t, values(t, scenarios["inferencePool"]+"rbac: {create: false}\n"))
		if len(r.roles)+len(r.roleBindings) != 0 {
			t.Errorf("rendered %d Roles and %d RoleBindings; want none", len(r.roles), len(r.roleBindings))
		}
		_, c := r.deployment(t)
		if _, ok := flag(c.Args, "leader-elect"); !ok {
			t.Error("--leader-elect is missing; rbac.create must not change what tollgate runs")
		}
	})
}

// TestKubeAPIAccess: the pods that talk to the API get a token; those and
// the replicas get their name and namespace, and a startup probe a pod
// without workers or a scheduler yet passes; the replicas also get their
// pod IP, for the peer channel. The others keep none of it. No scenario
// changes the Deployment's rollout strategy: every replica that reaches
// the scheduler is ready, so the default rolling update works.
func TestKubeAPIAccess(t *testing.T) {
	downward := []corev1.EnvVar{
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	}
	podIP := corev1.EnvVar{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}
	for _, tc := range []struct {
		scenario   string
		api, elect bool
	}{
		{"default", true, true},
		{"istio", false, false},
		{"kubernetesService", true, false},
		{"kubernetesSelector", true, false},
		{"inferencePool", true, true},
		{"leaderElection", true, true},
		{"etcd", false, true},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			r := mustRender(t, values(t, scenarios[tc.scenario]))
			d, c := r.deployment(t)
			spec := d.Spec.Template.Spec
			if got := spec.AutomountServiceAccountToken; got == nil || *got != tc.api {
				t.Errorf("automountServiceAccountToken = %v; want %v", got, tc.api)
			}
			var wantEnv []corev1.EnvVar
			if tc.api || tc.elect {
				wantEnv = downward
			}
			if tc.elect {
				wantEnv = append(slices.Clone(wantEnv), podIP)
			}
			if diff := cmp.Diff(wantEnv, c.Env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
			// gRPC health is SERVING only on a ready pod: workers known
			// and, with replicas, a scheduler reached. A pod waiting for
			// either must still pass its startup probe.
			sp := c.StartupProbe
			if slow := tc.api || tc.elect; slow && (sp.HTTPGet == nil || sp.HTTPGet.Path != "/healthz") {
				t.Errorf("startup probe = %+v; want GET /healthz", sp.ProbeHandler)
			} else if !slow && sp.GRPC == nil {
				t.Errorf("startup probe = %+v; want gRPC health", sp.ProbeHandler)
			}
			rp := c.ReadinessProbe
			if rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" || rp.PeriodSeconds != 2 {
				t.Errorf("readiness probe = %+v every %ds; want GET /readyz every 2s", rp.ProbeHandler, rp.PeriodSeconds)
			}
			if diff := cmp.Diff(appsv1.DeploymentStrategy{}, d.Spec.Strategy); diff != "" {
				t.Errorf("strategy (-want +got):\n%s", diff)
			}
			for _, sa := range r.serviceAccounts {
				if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
					t.Errorf("ServiceAccount automountServiceAccountToken = %v; want false (the pod decides)", sa.AutomountServiceAccountToken)
				}
			}
		})
	}
}

// TestLeaderElectionFollowsReplicas: leader election is on exactly when
// asked for or, left unset, with more than one replica (two by default);
// several replicas with it switched off are refused.
func TestLeaderElectionFollowsReplicas(t *testing.T) {
	for _, tc := range []struct {
		doc     string
		want    bool
		wantErr string
	}{
		{doc: "", want: true},
		{doc: "replicaCount: 0\n", want: false},
		{doc: "replicaCount: 1\n", want: false},
		{doc: "replicaCount: 2\n", want: true},
		{doc: "replicaCount: 3\nleaderElection: {enabled: null}\n", want: true},
		{doc: "replicaCount: 3\nleaderElection: {enabled: true}\n", want: true},
		{doc: "replicaCount: 1\nleaderElection: {enabled: true}\n", want: true},
		{doc: "replicaCount: 1\nleaderElection: {enabled: false}\n", want: false},
		{doc: "leaderElection: {enabled: false}\n", wantErr: "replicaCount is 2 but leaderElection.enabled is false: tollgate replicas cannot each schedule on their own"},
		{doc: "replicaCount: 3\nleaderElection: {enabled: false}\n", wantErr: "replicaCount is 3 but leaderElection.enabled is false: tollgate replicas cannot each schedule on their own"},
	} {
		t.Run(strings.ReplaceAll(tc.doc, "\n", " "), func(t *testing.T) {
			if tc.wantErr != "" {
				_, err := renderChart(t, values(t, tc.doc))
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v; want one containing %q", err, tc.wantErr)
				}
				return
			}
			r := mustRender(t, values(t, tc.doc))
			_, c := r.deployment(t)
			_, elect := flag(c.Args, "leader-elect")
			_, peer := flag(c.Args, "peer-addr")
			if elect != tc.want || peer != tc.want || (len(r.roles) == 1) != tc.want {
				t.Errorf("--leader-elect present %v, --peer-addr present %v, %d Roles; want leader election %v", elect, peer, len(r.roles), tc.want)
			}
		})
	}
}
