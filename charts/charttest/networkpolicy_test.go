package charttest

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestNetworkPolicy: the ext_proc port used to be open to anyone who could
// reach the pod. The chart admits only the gateway's Envoy pods to it by
// default, only the release's own pods to the peer port of the replicas,
// and leaves the metrics port open for scraping and probes.
func TestNetworkPolicy(t *testing.T) {
	selector := func(labels map[string]string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: labels}
	}
	tests := []struct {
		name     string
		override map[string]any
		want     []networkingv1.NetworkPolicyPeer
	}{
		{"no integration: labelled gateway pods", nil, []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{},
			PodSelector:       selector(map[string]string{"tollgate.io/gateway": "true"}),
		}}},
		{"istio: the ingress gateway", map[string]any{"integration": "istio"}, []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: selector(map[string]string{"kubernetes.io/metadata.name": "istio-system"}),
			PodSelector:       selector(map[string]string{"istio": "ingressgateway"}),
		}}},
		{"envoy gateway: its proxies", map[string]any{"integration": "envoyGateway"}, []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: selector(map[string]string{"kubernetes.io/metadata.name": "envoy-gateway-system"}),
			PodSelector:       selector(map[string]string{"app.kubernetes.io/managed-by": "envoy-gateway", "app.kubernetes.io/component": "proxy"}),
		}}},
		{"explicit peers", map[string]any{"networkPolicy": map[string]any{"gatewayFrom": []any{
			map[string]any{"ipBlock": map[string]any{"cidr": "10.1.0.0/16"}}}}},
			[]networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.1.0.0/16"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRender(t, tt.override)
			if len(r.networkPolicies) != 1 {
				t.Fatalf("%d NetworkPolicies", len(r.networkPolicies))
			}
			np := r.networkPolicies[0]
			if np.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] == "" || len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
				t.Fatalf("spec %+v", np.Spec)
			}
			if len(np.Spec.Ingress) != 3 {
				t.Fatalf("%d ingress rules; want ext_proc, metrics and peer", len(np.Spec.Ingress))
			}
			grpc, metrics := np.Spec.Ingress[0], np.Spec.Ingress[1]
			if len(grpc.Ports) != 1 || *grpc.Ports[0].Port != intstr.FromInt32(9002) {
				t.Errorf("grpc rule ports %+v", grpc.Ports)
			}
			if diff := cmp.Diff(tt.want, grpc.From); diff != "" {
				t.Errorf("ext_proc port sources (-want +got):\n%s", diff)
			}
			if len(metrics.Ports) != 1 || *metrics.Ports[0].Port != intstr.FromInt32(9090) || len(metrics.From) != 0 {
				t.Errorf("metrics rule %+v", metrics)
			}
			checkPeerRule(t, np.Spec.Ingress[2], 9003)
		})
	}
	t.Run("one pod: no peer port", func(t *testing.T) {
		r := mustRender(t, values(t, single))
		if n := len(r.networkPolicies[0].Spec.Ingress); n != 2 {
			t.Errorf("%d ingress rules with one pod; want ext_proc and metrics", n)
		}
	})
	t.Run("the peer port follows the values", func(t *testing.T) {
		r := mustRender(t, values(t, scenarios["etcd"]))
		checkPeerRule(t, r.networkPolicies[0].Spec.Ingress[2], 9100)
	})
	if r := mustRender(t, map[string]any{"networkPolicy": map[string]any{"enabled": false}}); len(r.networkPolicies) != 0 {
		t.Error("rendered with networkPolicy.enabled false")
	}
}

// checkPeerRule checks that rule admits only the release's own pods, in
// its own namespace, to the peer port.
func checkPeerRule(t *testing.T, rule networkingv1.NetworkPolicyIngressRule, port int32) {
	t.Helper()
	tcp := corev1.ProtocolTCP
	want := networkingv1.NetworkPolicyIngressRule{
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: new(intstr.FromInt32(port))}},
		From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
			"app.kubernetes.io/name": "tollgate", "app.kubernetes.io/instance": releaseName,
		}}}},
	}
	if diff := cmp.Diff(want, rule); diff != "" {
		t.Errorf("peer port rule (-want +got):\n%s", diff)
	}
}

func TestNetworkPolicy_NotesSayWhichPodsToLabel(t *testing.T) {
	notes := func(override map[string]any) string {
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
	if s := notes(nil); !strings.Contains(s, "tollgate.io/gateway=true") {
		t.Errorf("default NOTES do not say which pods to label:\n%s", s)
	}
	if s := notes(map[string]any{"integration": "istio"}); strings.Contains(s, "tollgate.io/gateway") {
		t.Errorf("istio NOTES mention the label:\n%s", s)
	}
}
