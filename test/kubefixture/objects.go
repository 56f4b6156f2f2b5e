package kubefixture

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Namespace is the namespace of every fixture object.
const Namespace = "llm"

// The Gateway API Inference Extension resources the fixtures serve. They
// equal kube's InferencePoolGVR, InferenceObjectiveGVR and
// InferenceModelRewriteGVR (kube's tests check it); this package does not
// import kube.
var (
	InferencePoolGVR         = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}
	InferenceObjectiveGVR    = schema.GroupVersionResource{Group: "inference.networking.x-k8s.io", Version: "v1alpha2", Resource: "inferenceobjectives"}
	InferenceModelRewriteGVR = schema.GroupVersionResource{Group: "inference.networking.x-k8s.io", Version: "v1alpha2", Resource: "inferencemodelrewrites"}
)

// Pod returns a Running, Ready pod labeled app=vllm with ip and
// annotations as key, value pairs.
func Pod(name, ip string, kv ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, UID: types.UID("uid-" + name),
			Labels: map[string]string{"app": "vllm"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if len(kv) > 0 {
		p.Annotations = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
	return p
}

// Endpoint is one endpoint for Slice. Pod "" leaves out the targetRef;
// nil conditions are unset.
type Endpoint struct {
	Pod         string
	IP          string
	Ready       *bool
	Terminating *bool
}

// Slice returns an EndpointSlice of service with one port named "http";
// it is IPv6 when an endpoint's IP is.
func Slice(name, service string, port int32, eps ...Endpoint) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{discoveryv1.LabelServiceName: service, "app": "vllm"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(port)}},
	}
	for _, e := range eps {
		d := discoveryv1.Endpoint{Addresses: []string{e.IP}, Conditions: discoveryv1.EndpointConditions{Ready: e.Ready, Terminating: e.Terminating}}
		if e.Pod != "" {
			d.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: Namespace, Name: e.Pod, UID: types.UID("uid-" + e.Pod)}
		}
		if strings.Contains(e.IP, ":") {
			es.AddressType = discoveryv1.AddressTypeIPv6
		}
		es.Endpoints = append(es.Endpoints, d)
	}
	return es
}

// InferencePool returns an InferencePool selecting app=vllm on ports,
// with tollgate as its endpoint picker and a field no decoder knows.
func InferencePool(name string, ports ...int64) *unstructured.Unstructured {
	tps := make([]any, len(ports))
	for i, p := range ports {
		tps[i] = map[string]any{"number": p}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1",
		"kind":       "InferencePool",
		"metadata":   map[string]any{"name": name, "namespace": Namespace},
		"spec": map[string]any{
			"selector":    map[string]any{"matchLabels": map[string]any{"app": "vllm"}},
			"targetPorts": tps,
			"endpointPickerRef": map[string]any{
				"name": "tollgate", "port": map[string]any{"number": int64(9002)}, "failureMode": "FailClose",
			},
			"someFutureField": "ignored",
		},
	}}
}

// InferenceObjective returns an InferenceObjective of pool; priority nil
// leaves spec.priority unset.
func InferenceObjective(name, pool string, priority *int64) *unstructured.Unstructured {
	spec := map[string]any{"poolRef": map[string]any{"name": pool}, "someFutureField": "ignored"}
	if priority != nil {
		spec["priority"] = *priority
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.x-k8s.io/v1alpha2",
		"kind":       "InferenceObjective",
		"metadata":   map[string]any{"name": name, "namespace": Namespace},
		"spec":       spec,
	}}
}
