package kube

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/test/kubefixture"
)

func TestPodWorker_AnnotationsOverrideDefaults(t *testing.T) {
	d := Defaults{MaxRunningRequests: 32, MaxNumBatchedTokens: 8192, DPSize: 2, Model: "llama"}
	tests := []struct {
		name string
		give []string
		want fleet.Worker
	}{
		{
			name: "no annotations take every default and the namespaced pod name",
			want: fleet.Worker{ID: "llm/p0", MaxRunningRequests: 32, MaxNumBatchedTokens: 8192, DPSize: 2, Model: "llama"},
		},
		{
			name: "every annotation",
			give: []string{
				AnnotationWorkerID, "gpu-node-7",
				AnnotationMaxRunningRequests, "128",
				AnnotationMaxNumBatchedTokens, "16384",
				AnnotationDPSize, "4",
				AnnotationDPStartRank, "8",
				AnnotationTaints, " h100 , long-context,h100",
				AnnotationModel, "qwen",
				AnnotationMetricsURL, ":9400/metrics",
			},
			want: fleet.Worker{ID: "gpu-node-7", MaxRunningRequests: 128, MaxNumBatchedTokens: 16384, DPSize: 4,
				DPStartRank: 8, Taints: []string{"h100", "long-context"}, Model: "qwen", MetricsURL: ":9400/metrics"},
		},
		{
			name: "kv events on a port of the pod's IP, replay as a full endpoint",
			give: []string{AnnotationKVEventsEndpoint, "5557", AnnotationKVEventsReplayEndpoint, "tcp://10.0.0.9:5558"},
			want: fleet.Worker{ID: "llm/p0", MaxRunningRequests: 32, MaxNumBatchedTokens: 8192, DPSize: 2, Model: "llama",
				KVEventsEndpoint: "tcp://10.0.0.1:5557", KVEventsReplayEndpoint: "tcp://10.0.0.9:5558"},
		},
		{
			name: "empty model serves every model and empty taints are none",
			give: []string{AnnotationModel, "", AnnotationTaints, ""},
			want: fleet.Worker{ID: "llm/p0", MaxRunningRequests: 32, MaxNumBatchedTokens: 8192, DPSize: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := podWorker(kubefixture.Pod("p0", "10.0.0.1", tt.give...), d)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("worker (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPodWorker_BadAnnotationExcludesThePod(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want []string // substrings of the error
	}{
		{"slots not a number", []string{AnnotationMaxRunningRequests, "lots"}, []string{`tollgate.io/max-running-requests="lots"`, "[1, 4294967295]"}},
		{"zero slots", []string{AnnotationMaxRunningRequests, "0"}, []string{"max-running-requests"}},
		{"slots overflow", []string{AnnotationMaxRunningRequests, "4294967296"}, []string{"max-running-requests"}},
		{"negative tokens", []string{AnnotationMaxNumBatchedTokens, "-5"}, []string{"max-num-batched-tokens"}},
		{"dp size above the bound", []string{AnnotationDPSize, "1025"}, []string{"dp-size", "[1, 1024]"}},
		{"dp ranks overflow", []string{AnnotationDPSize, "4", AnnotationDPStartRank, "4294967294"}, []string{"overflows a 32-bit rank"}},
		{"empty worker id", []string{AnnotationWorkerID, ""}, []string{"worker-id", "empty"}},
		{"worker id with a space", []string{AnnotationWorkerID, "gpu 7"}, []string{"printable ASCII"}},
		{"worker id too long", []string{AnnotationWorkerID, strings.Repeat("w", 254)}, []string{"longer than 253"}},
		{"empty taint", []string{AnnotationTaints, "a,,b"}, []string{"empty taint"}},
		{"model with spaces", []string{AnnotationModel, " llama"}, []string{"surrounding whitespace"}},
		{"metrics url not http", []string{AnnotationMetricsURL, "tcp://x:1"}, []string{"tollgate.io/metrics-url", "http or https"}},
		{"kv events endpoint without a scheme", []string{AnnotationKVEventsEndpoint, "10.0.0.1:5557"}, []string{"kv-events-endpoint", "tcp://"}},
		{"kv events port 0", []string{AnnotationKVEventsReplayEndpoint, "0"}, []string{"kv-events-replay-endpoint"}},
		{"every problem is reported", []string{AnnotationMaxRunningRequests, "x", AnnotationDPSize, "0"}, []string{"max-running-requests", "dp-size"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := podWorker(kubefixture.Pod("p0", "10.0.0.1", tt.give...), Defaults{})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestUnknownAnnotations(t *testing.T) {
	p := kubefixture.Pod("p0", "10.0.0.1", "tollgate.io/max-running-request", "8", AnnotationModel, "m", "example.com/other", "x", "tollgate.io/zzz", "1")
	got := unknownAnnotations(p)
	if diff := cmp.Diff([]string{"tollgate.io/max-running-request", "tollgate.io/zzz"}, got); diff != "" {
		t.Errorf("unknown (-want +got):\n%s", diff)
	}
}

func TestSlimPod_KeepsWhatDiscoveryReads(t *testing.T) {
	p := kubefixture.Pod("p0", "10.0.0.1", AnnotationModel, "m", "kubectl.kubernetes.io/last-applied-configuration", "{...}")
	p.Spec.NodeName = "node-1"
	p.Status.Conditions = append(p.Status.Conditions, podCondition("ContainersReady"))
	obj, err := slimPod(p)
	if err != nil {
		t.Fatal(err)
	}
	s := obj.(*corev1.Pod)
	if s.Spec.NodeName != "" || len(s.Annotations) != 1 || s.Annotations[AnnotationModel] != "m" {
		t.Errorf("slim pod kept %+v", s)
	}
	if !podServing(s) || s.UID != p.UID || s.Labels["app"] != "vllm" || len(s.Status.Conditions) != 1 {
		t.Errorf("slim pod lost what discovery reads: %+v", s)
	}
	if got, _ := slimPod("tombstone"); got != "tombstone" {
		t.Errorf("non-pod object changed to %v", got)
	}
}

func TestPodServing(t *testing.T) {
	tests := []struct {
		name string
		mod  func(p *corev1.Pod)
		want bool
	}{
		{"running and ready", func(*corev1.Pod) {}, true},
		{"no IP", func(p *corev1.Pod) { p.Status.PodIP = "" }, false},
		{"pending", func(p *corev1.Pod) { p.Status.Phase = "Pending" }, false},
		{"not ready", func(p *corev1.Pod) { p.Status.Conditions[0].Status = "False" }, false},
		{"no ready condition", func(p *corev1.Pod) { p.Status.Conditions = nil }, false},
		{"being deleted", func(p *corev1.Pod) { p.DeletionTimestamp = &now }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := kubefixture.Pod("p0", "10.0.0.1")
			tt.mod(p)
			if got := podServing(p); got != tt.want {
				t.Errorf("podServing = %v, want %v", got, tt.want)
			}
		})
	}
}
