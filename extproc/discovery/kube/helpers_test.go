package kube

import (
	"log/slog"
	"testing"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/tollgate/tollgate/test/kubefixture"
)

// The fixtures (pods, EndpointSlices, Inference Extension objects, fake
// clients, recorders, log buffers and waits) are in test/kubefixture,
// shared with the end-to-end tests of test/discovery.

func TestMain(m *testing.M) {
	klog.SetSlogLogger(slog.New(slog.DiscardHandler)) // client-go's own logs
	goleak.VerifyTestMain(m)
}

// ns is the namespace of every fixture object.
const ns = kubefixture.Namespace

func ptr[T any](v T) *T { return &v }

var now = metav1.Now()

func podCondition(typ corev1.PodConditionType) corev1.PodCondition {
	return corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue}
}

// The fixtures name the resources kube serves.
func TestFixtureGVRs(t *testing.T) {
	for _, c := range []struct{ fixture, kube any }{
		{kubefixture.InferencePoolGVR, InferencePoolGVR},
		{kubefixture.InferenceObjectiveGVR, InferenceObjectiveGVR},
		{kubefixture.InferenceModelRewriteGVR, InferenceModelRewriteGVR},
	} {
		if c.fixture != c.kube {
			t.Errorf("kubefixture serves %v, kube reads %v", c.fixture, c.kube)
		}
	}
}
