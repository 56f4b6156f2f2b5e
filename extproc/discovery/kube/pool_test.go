package kube

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tollgate/tollgate/test/kubefixture"
)

func TestDecodePool(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(spec map[string]any)
		wantErr []string
	}{
		{name: "valid", mod: func(map[string]any) {}},
		{name: "no endpoint picker", mod: func(s map[string]any) { delete(s, "endpointPickerRef") }},
		{name: "empty selector", mod: func(s map[string]any) { s["selector"] = map[string]any{"matchLabels": map[string]any{}} },
			wantErr: []string{"matchLabels is empty"}},
		{name: "bad label", mod: func(s map[string]any) {
			s["selector"] = map[string]any{"matchLabels": map[string]any{"a b": "c", "ok": "bad value!"}}
		}, wantErr: []string{`key "a b"`, `value "bad value!"`}},
		{name: "no ports", mod: func(s map[string]any) { delete(s, "targetPorts") }, wantErr: []string{"targetPorts is empty"}},
		{name: "port out of range", mod: func(s map[string]any) {
			s["targetPorts"] = []any{map[string]any{"number": int64(0)}, map[string]any{"number": int64(70000)}}
		}, wantErr: []string{"targetPorts[0].number 0", "targetPorts[1].number 70000"}},
		{name: "duplicate port", mod: func(s map[string]any) {
			s["targetPorts"] = []any{map[string]any{"number": int64(8000)}, map[string]any{"number": int64(8000)}}
		}, wantErr: []string{"listed twice"}},
		{name: "too many ports", mod: func(s map[string]any) {
			var ps []any
			for i := range 9 {
				ps = append(ps, map[string]any{"number": int64(8000 + i)})
			}
			s["targetPorts"] = ps
		}, wantErr: []string{"more than 8"}},
		{name: "wrong type", mod: func(s map[string]any) { s["targetPorts"] = "8000" }, wantErr: []string{"decode"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := kubefixture.InferencePool("p", 8000)
			tt.mod(u.Object["spec"].(map[string]any))
			p, err := decodePool(u)
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if len(p.ports) != 1 || p.ports[0] != 8000 || p.selector.String() != "app=vllm" {
					t.Errorf("decoded %+v", p)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// poolEnv is an InferencePool source over fake clients.
type poolEnv struct {
	t      *testing.T
	client *fake.Clientset
	dyn    *dynamicfake.FakeDynamicClient
	rec    *kubefixture.Recorder
	logs   *kubefixture.LogBuffer
}

func startPoolSource(t *testing.T, pools []runtime.Object, pods ...runtime.Object) *poolEnv {
	t.Helper()
	e := &poolEnv{t: t, client: fake.NewClientset(pods...), dyn: kubefixture.NewDynamic(pools...), rec: kubefixture.NewRecorder(nil), logs: &kubefixture.LogBuffer{}}
	src, err := NewPoolSource(SourceConfig{
		Client: e.client, Namespace: ns, Apply: e.rec.Apply, Logger: e.logs.Logger(), Debounce: 10 * time.Millisecond,
	}, e.dyn, "pool")
	if err != nil {
		t.Fatal(err)
	}
	kubefixture.Run(t, src.Run)
	return e
}

func (e *poolEnv) putPool(u *unstructured.Unstructured) {
	e.t.Helper()
	c := e.dyn.Resource(InferencePoolGVR).Namespace(ns)
	if _, err := c.Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		if _, err = c.Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *poolEnv) putPod(p *corev1.Pod) {
	e.t.Helper()
	c := e.client.CoreV1().Pods(ns)
	if _, err := c.Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		if _, err = c.Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func TestPoolSource_FollowsPoolAndPods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		other := kubefixture.Pod("web", "10.0.0.9")
		other.Labels = map[string]string{"app": "web"}
		e := startPoolSource(t, nil, kubefixture.Pod("a", "10.0.0.1"), kubefixture.Pod("b", "10.0.0.2"), other)

		// No pool yet: no workers, and the operator is told why.
		e.rec.Await(t, "")
		if !strings.Contains(e.logs.String(), "not found") {
			t.Errorf("missing pool not logged:\n%s", e.logs)
		}
		e.putPool(kubefixture.InferencePool("pool", 8000))
		e.rec.Await(t, "llm/a@10.0.0.1:8000 llm/b@10.0.0.2:8000")

		// Not ready, then terminating, then ready again.
		nr := kubefixture.Pod("b", "10.0.0.2")
		nr.Status.Conditions[0].Status = corev1.ConditionFalse
		e.putPod(nr)
		e.rec.Await(t, "llm/a@10.0.0.1:8000")
		e.putPod(kubefixture.Pod("b", "10.0.0.2"))
		e.rec.Await(t, "llm/a@10.0.0.1:8000 llm/b@10.0.0.2:8000")
		term := kubefixture.Pod("a", "10.0.0.1")
		term.DeletionTimestamp = &now
		e.putPod(term)
		e.rec.Await(t, "llm/b@10.0.0.2:8000")
		if err := e.client.CoreV1().Pods(ns).Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}

		// Two target ports: one worker per pod and port.
		e.putPool(kubefixture.InferencePool("pool", 8000, 8001))
		e.rec.Await(t, "llm/b:8000@10.0.0.2:8000 llm/b:8001@10.0.0.2:8001")

		// Annotations apply to every port of the pod.
		e.putPod(kubefixture.Pod("b", "10.0.0.2", AnnotationMaxRunningRequests, "7", AnnotationWorkerID, "gpu-b"))
		ws := e.rec.Await(t, "gpu-b:8000@10.0.0.2:8000 gpu-b:8001@10.0.0.2:8001")
		if ws[0].MaxRunningRequests != 7 || ws[1].MaxRunningRequests != 7 {
			t.Errorf("annotations not applied to every port: %+v", ws)
		}

		// The selector moves to the web pod.
		moved := kubefixture.InferencePool("pool", 8000)
		moved.Object["spec"].(map[string]any)["selector"] = map[string]any{"matchLabels": map[string]any{"app": "web"}}
		e.putPool(moved)
		e.rec.Await(t, "llm/web@10.0.0.9:8000")

		// An unusable spec keeps the current set.
		broken := kubefixture.InferencePool("pool")
		e.putPool(broken)
		kubefixture.Settle()
		if !strings.Contains(e.logs.String(), "spec.targetPorts is empty") {
			t.Fatalf("broken pool not reported:\n%s", e.logs)
		}
		if ws, _ := e.rec.Last(); kubefixture.Summary(ws) != "llm/web@10.0.0.9:8000" {
			t.Errorf("a broken pool changed the set to %q", kubefixture.Summary(ws))
		}

		// The pool is deleted: no workers.
		if err := e.dyn.Resource(InferencePoolGVR).Namespace(ns).Delete(context.Background(), "pool", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.rec.Await(t, "")
	})
}

func TestPoolSource_WarnsOnFailOpen(t *testing.T) {
	p := kubefixture.InferencePool("pool", 8000)
	p.Object["spec"].(map[string]any)["endpointPickerRef"].(map[string]any)["failureMode"] = "FailOpen"
	e := startPoolSource(t, []runtime.Object{p}, kubefixture.Pod("a", "10.0.0.1"))
	e.rec.Await(t, "llm/a@10.0.0.1:8000")
	if !strings.Contains(e.logs.String(), "routes around admission") {
		t.Errorf("FailOpen not warned about:\n%s", e.logs)
	}
}

func TestNewPoolSource_ReportsEveryProblem(t *testing.T) {
	_, err := NewPoolSource(SourceConfig{Client: fake.NewClientset(), Namespace: ns, Apply: kubefixture.NewRecorder(nil).Apply}, nil, "Bad_Name")
	if err == nil || !strings.Contains(err.Error(), "dynamic client") || !strings.Contains(err.Error(), "inference pool name") {
		t.Errorf("error %v", err)
	}
}
