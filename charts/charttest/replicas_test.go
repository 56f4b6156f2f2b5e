package charttest

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestReplicas: by default the chart runs two replicas in replica mode:
// each pod serves Envoy and reaches the elected scheduler's peer channel
// at its pod IP, on a container port of its own; a preStop sleep keeps a
// terminating pod serving before SIGTERM, inside the grace period; and a
// PodDisruptionBudget lets one pod go at a time.
func TestReplicas(t *testing.T) {
	r := mustRender(t, nil)
	d, c := r.deployment(t)
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %d; want 2", *d.Spec.Replicas)
	}
	for name, want := range map[string]string{
		"leader-elect":         "",
		"peer-addr":            "$(POD_IP):9003",
		"leader-elect-backend": "kube",
	} {
		if got, ok := flag(c.Args, name); !ok || got != want {
			t.Errorf("--%s = %q (present %v); want %q", name, got, ok, want)
		}
	}
	if _, ok := flag(c.Args, "etcd-endpoints"); ok {
		t.Error("--etcd-endpoints with the kube backend")
	}
	if got := argMap(t, expandEnv(t, c, "tollgate-5d4f8b7c9-x2x7q", namespace))["peer-addr"]; got != podIP+":9003" {
		t.Errorf("--peer-addr expands to %q; want the pod IP and the peer port, %s:9003", got, podIP)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		if p.Protocol != corev1.ProtocolTCP {
			t.Errorf("port %s protocol %s; want TCP", p.Name, p.Protocol)
		}
		ports[p.Name] = p.ContainerPort
	}
	if diff := cmp.Diff(map[string]int32{"grpc": 9002, "metrics": 9090, "peer": 9003}, ports); diff != "" {
		t.Errorf("container ports (-want +got):\n%s", diff)
	}
	// The fronts dial the scheduler's pod IP: the Service has no peer port.
	for _, p := range r.services[0].Spec.Ports {
		if p.Port == 9003 || p.Name == "peer" {
			t.Errorf("Service port %+v; the peer channel is reached by pod IP", p)
		}
	}

	// The image has no shell: the hook is a sleep action, and the grace
	// period covers it, the drain delay and the shutdown timeout.
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil ||
		c.Lifecycle.PreStop.Sleep.Seconds != 5 || c.Lifecycle.PreStop.Exec != nil {
		t.Errorf("lifecycle = %+v; want a preStop sleep of 5 s", c.Lifecycle)
	}
	if gp := d.Spec.Template.Spec.TerminationGracePeriodSeconds; gp == nil || *gp != 5+5+30+10 {
		t.Errorf("terminationGracePeriodSeconds = %v; want preStop 5 + drain delay 5 + shutdown timeout 30 + 10", gp)
	}

	if len(r.pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets; want 1", len(r.pdbs))
	}
	want := policyv1.PodDisruptionBudgetSpec{
		MaxUnavailable: new(intstr.FromInt32(1)),
		Selector:       &metav1.LabelSelector{MatchLabels: d.Spec.Selector.MatchLabels},
	}
	if diff := cmp.Diff(want, r.pdbs[0].Spec); diff != "" {
		t.Errorf("PodDisruptionBudget (-want +got):\n%s", diff)
	}

	t.Run("without a preStop sleep", func(t *testing.T) {
		d, c := mustRender(t, values(t, "shutdown: {preStopSeconds: 0}\n")).deployment(t)
		if c.Lifecycle != nil {
			t.Errorf("lifecycle = %+v; want none", c.Lifecycle)
		}
		if gp := d.Spec.Template.Spec.TerminationGracePeriodSeconds; gp == nil || *gp != 5+30+10 {
			t.Errorf("terminationGracePeriodSeconds = %v; want 45", gp)
		}
	})
	t.Run("one pod", func(t *testing.T) {
		_, c := mustRender(t, values(t, single)).deployment(t)
		for _, name := range []string{"leader-elect", "peer-addr", "leader-elect-backend"} {
			if _, ok := flag(c.Args, name); ok {
				t.Errorf("--%s with one pod", name)
			}
		}
		for _, p := range c.Ports {
			if p.Name == "peer" {
				t.Errorf("container port %+v with one pod", p)
			}
		}
	})
	t.Run("one pod forced into an election", func(t *testing.T) {
		_, c := mustRender(t, values(t, single+"leaderElection: {enabled: true}\n")).deployment(t)
		if got, _ := flag(c.Args, "peer-addr"); got != "$(POD_IP):9003" {
			t.Errorf("--peer-addr = %q; want $(POD_IP):9003: a rollout hands the scheduler role to the new pod", got)
		}
	})
	// The peer channel takes the ext_proc listener's TLS files: with a
	// client CA, mutual TLS between the replicas too.
	t.Run("TLS", func(t *testing.T) {
		_, c := mustRender(t, values(t, scenarios["everything"])).deployment(t)
		for _, name := range []string{"peer-addr", "grpc-tls-cert", "grpc-tls-key", "grpc-client-ca"} {
			if _, ok := flag(c.Args, name); !ok {
				t.Errorf("--%s is missing", name)
			}
		}
	})
}

// TestReplicas_Etcd: with the etcd backend the pods elect in etcd and need
// no Kubernetes API: no token, no Role, and no Lease flags.
func TestReplicas_Etcd(t *testing.T) {
	r := mustRender(t, values(t, scenarios["etcd"]))
	d, c := r.deployment(t)
	args := argMap(t, c.Args)
	if args["leader-elect-backend"] != "etcd" || args["etcd-endpoints"] != "http://etcd-0.etcd:2379,http://etcd-1.etcd:2379" ||
		args["peer-addr"] != "$(POD_IP):9100" {
		t.Errorf("args %q; want the etcd backend, its endpoints and the peer port 9100", c.Args)
	}
	for _, name := range []string{"leader-elect-namespace", "leader-elect-renew-deadline"} {
		if _, ok := args[name]; ok {
			t.Errorf("--%s with the etcd backend, which does not use it", name)
		}
	}
	if got := d.Spec.Template.Spec.AutomountServiceAccountToken; got == nil || *got {
		t.Errorf("automountServiceAccountToken = %v; want false", got)
	}
	if len(r.roles)+len(r.roleBindings) != 0 {
		t.Errorf("%d Roles, %d RoleBindings; want none", len(r.roles), len(r.roleBindings))
	}
	notes := strings.Join(strings.Fields(renderNotes(t, values(t, scenarios["etcd"]))), " ")
	if !strings.Contains(notes, "elected in etcd (http://etcd-0.etcd:2379,http://etcd-1.etcd:2379, election tollgate), schedules") {
		t.Errorf("NOTES do not name the etcd election:\n%s", notes)
	}
}

// TestReplicas_Notes: the install notes describe replica mode, and the
// Lease grant only when the chart does not create it.
func TestReplicas_Notes(t *testing.T) {
	notes := strings.Join(strings.Fields(renderNotes(t, nil)), " ")
	for _, want := range []string{"Replicas: each of the 2 pod(s) serves Envoy", "elected by the Lease inference/tollgate,", "peer port 9003", "no waiting request is lost"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}
	for _, stale := range []string{"standby", "stand by", "Retry-After"} {
		if strings.Contains(notes, stale) {
			t.Errorf("NOTES still say %q:\n%s", stale, notes)
		}
	}
	if notes := renderNotes(t, values(t, "rbac: {create: false}\n")); !strings.Contains(notes, "get, create and update on that Lease") {
		t.Errorf("NOTES with rbac.create false do not say what to grant:\n%s", notes)
	}
	if notes := renderNotes(t, values(t, single)); strings.Contains(notes, "Replicas:") {
		t.Errorf("NOTES of one pod describe replicas:\n%s", notes)
	}
}

// renderNotes returns the rendered NOTES.txt.
func renderNotes(t *testing.T, override map[string]any) string {
	t.Helper()
	files, err := renderChart(t, override)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			return s
		}
	}
	t.Fatal("no NOTES.txt")
	return ""
}
