package kube

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/tollgate/tollgate/test/kubefixture"
)

func TestParsePort(t *testing.T) {
	tests := []struct {
		give    string
		want    portRef
		wantErr string
	}{
		{give: "", want: portRef{}},
		{give: "http", want: portRef{name: "http"}},
		{give: "8000", want: portRef{number: 8000}},
		{give: "65535", want: portRef{number: 65535}},
		{give: "0", wantErr: "not in [1, 65535]"},
		{give: "65536", wantErr: "not in [1, 65535]"},
		{give: "Not_A_Name", wantErr: "port name"},
		{give: "way-too-long-port-name", wantErr: "port name"},
	}
	for _, tt := range tests {
		got, err := ParsePort(tt.give)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParsePort(%q) error %v, want %q", tt.give, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParsePort(%q) = %+v, %v; want %+v", tt.give, got, err, tt.want)
		}
	}
}

func TestPortRef_Pick(t *testing.T) {
	two := []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8000)}, {Name: ptr("metrics"), Port: ptr[int32](9000)}}
	one := []discoveryv1.EndpointPort{{Port: ptr[int32](8080)}}
	tests := []struct {
		name    string
		ref     portRef
		ports   []discoveryv1.EndpointPort
		want    int32
		wantErr string
	}{
		{"by name", portRef{name: "metrics"}, two, 9000, ""},
		{"by number", portRef{number: 8000}, two, 8000, ""},
		{"the only port", portRef{}, one, 8080, ""},
		{"several ports and none chosen", portRef{}, two, 0, `several ports ("http"=8000, "metrics"=9000)`},
		{"missing name", portRef{name: "grpc"}, two, 0, `has no port "grpc"`},
		{"missing number", portRef{number: 1}, one, 0, `has no port 1 (ports: ""=8080)`},
		{"no ports", portRef{}, nil, 0, "lists no port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.ref.pick(tt.ports)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("pick = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestSliceSelection_Validate(t *testing.T) {
	tests := []struct {
		give    SliceSelection
		wantErr string
	}{
		{SliceSelection{Service: "vllm"}, ""},
		{SliceSelection{Selector: "app=vllm,tier in (gpu)", Port: "http"}, ""},
		{SliceSelection{}, "a service or a label selector is required"},
		{SliceSelection{Service: "vllm", Selector: "app=vllm"}, "not both"},
		{SliceSelection{Service: "Bad_Name"}, "service name"},
		{SliceSelection{Selector: "app in ("}, "label selector"},
		{SliceSelection{Service: "vllm", Port: "0"}, "port"},
	}
	for _, tt := range tests {
		err := tt.give.Validate()
		if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.give, err, tt.wantErr)
		}
	}
}

// buildSlices runs the EndpointSlice builder over objs directly.
func buildSlices(t *testing.T, port string, d Defaults, objs ...runtime.Object) snapshot {
	t.Helper()
	slices, pods := cache.NewStore(cache.MetaNamespaceKeyFunc), cache.NewStore(cache.MetaNamespaceKeyFunc)
	for _, o := range objs {
		var err error
		switch o.(type) {
		case *discoveryv1.EndpointSlice:
			err = slices.Add(o)
		case *corev1.Pod:
			err = pods.Add(o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	p, err := ParsePort(port)
	if err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: "vllm"})
	b := &sliceBuilder{ns: ns, sel: sel, port: p, defaults: d, slices: slices, pods: pods}
	return b.build()
}

func TestSliceBuilder_Eligibility(t *testing.T) {
	f, tr := ptr(false), ptr(true)
	gone := kubefixture.Pod("gone", "10.0.0.6")
	gone.DeletionTimestamp = &now
	replaced := kubefixture.Pod("replaced", "10.0.0.7")
	replaced.UID = "uid-new"
	unready := kubefixture.Pod("unready", "10.0.0.5")
	unready.Status.Conditions[0].Status = corev1.ConditionFalse
	snap := buildSlices(t, "http", Defaults{},
		kubefixture.Pod("a", "10.0.0.1"), kubefixture.Pod("b", "10.0.0.2"), kubefixture.Pod("c", "10.0.0.3"), kubefixture.Pod("d", "10.0.0.4"), unready, gone, replaced,
		kubefixture.Slice("vllm-1", "vllm", 8000,
			kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1"},                             // ready unset counts as ready
			kubefixture.Endpoint{Pod: "b", IP: "10.0.0.2", Ready: f},                   // not ready
			kubefixture.Endpoint{Pod: "c", IP: "10.0.0.3", Ready: f, Terminating: tr},  // terminating
			kubefixture.Endpoint{Pod: "d", IP: "10.0.0.4", Ready: tr, Terminating: tr}, // terminating, publishNotReadyAddresses
			kubefixture.Endpoint{Pod: "unready", IP: "10.0.0.5", Ready: tr},            // pod not Ready, publishNotReadyAddresses
			kubefixture.Endpoint{Pod: "gone", IP: "10.0.0.6", Ready: tr},               // pod being deleted
			kubefixture.Endpoint{Pod: "replaced", IP: "10.0.0.7", Ready: tr},           // the slice names the old pod
			kubefixture.Endpoint{Pod: "unknown", IP: "10.0.0.8", Ready: tr},            // pod not cached yet
			kubefixture.Endpoint{IP: "10.0.0.9", Ready: tr},                            // no targetRef
		),
		kubefixture.Slice("other-1", "other", 8000, kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1"}), // another service
	)
	if got, want := kubefixture.Summary(snap.workers), "llm/a@10.0.0.1:8000"; got != want {
		t.Errorf("workers %q, want %q", got, want)
	}
	if msg := snap.notes["EndpointSlice llm/vllm-1 address 10.0.0.9"]; !strings.Contains(msg, "no Pod") {
		t.Errorf("endpoint without a pod not noted: %v", snap.notes)
	}
}

func TestSliceBuilder_OnePodOneWorker(t *testing.T) {
	v6 := kubefixture.Slice("vllm-v6", "vllm", 8000, kubefixture.Endpoint{Pod: "a", IP: "fd00::1"})
	moving := kubefixture.Slice("vllm-2", "vllm", 8000, kubefixture.Endpoint{Pod: "b", IP: "10.0.0.2", Ready: ptr(false)})
	snap := buildSlices(t, "", Defaults{},
		kubefixture.Pod("a", "10.0.0.1"), kubefixture.Pod("b", "10.0.0.2"),
		v6, kubefixture.Slice("vllm-v4", "vllm", 8000, kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1"}, kubefixture.Endpoint{Pod: "b", IP: "10.0.0.2"}), moving)
	if got, want := kubefixture.Summary(snap.workers), "llm/a@10.0.0.1:8000 llm/b@10.0.0.2:8000"; got != want {
		t.Errorf("workers %q, want %q (IPv4 preferred, a serving copy wins)", got, want)
	}
	only6 := buildSlices(t, "", Defaults{}, kubefixture.Pod("a", "fd00::1"), v6)
	if got, want := kubefixture.Summary(only6.workers), "llm/a@[fd00::1]:8000"; got != want {
		t.Errorf("IPv6 workers %q, want %q", got, want)
	}
}

func TestSliceBuilder_SliceProblemsAreNoted(t *testing.T) {
	multi := kubefixture.Slice("vllm-1", "vllm", 8000, kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1"})
	multi.Ports = append(multi.Ports, discoveryv1.EndpointPort{Name: ptr("metrics"), Port: ptr[int32](9090)})
	fqdn := kubefixture.Slice("vllm-2", "vllm", 8000, kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1"})
	fqdn.AddressType = discoveryv1.AddressTypeFQDN
	snap := buildSlices(t, "", Defaults{}, kubefixture.Pod("a", "10.0.0.1"), multi, fqdn)
	if len(snap.workers) != 0 {
		t.Errorf("workers %q, want none", kubefixture.Summary(snap.workers))
	}
	if !strings.Contains(snap.notes["EndpointSlice llm/vllm-1"], "several ports") ||
		!strings.Contains(snap.notes["EndpointSlice llm/vllm-2"], "FQDN is not supported") {
		t.Errorf("notes %v", snap.notes)
	}
	byName := buildSlices(t, "metrics", Defaults{}, kubefixture.Pod("a", "10.0.0.1"), multi)
	if got, want := kubefixture.Summary(byName.workers), "llm/a@10.0.0.1:9090"; got != want {
		t.Errorf("workers %q, want %q", got, want)
	}
}

func TestSliceBuilder_CapacityFromAnnotations(t *testing.T) {
	d := Defaults{MaxRunningRequests: 8, Model: "llama"}
	snap := buildSlices(t, "http", d,
		kubefixture.Pod("a", "10.0.0.1", AnnotationMaxRunningRequests, "256", AnnotationWorkerID, "gpu-a"),
		kubefixture.Pod("b", "10.0.0.2"),
		kubefixture.Pod("c", "10.0.0.3", AnnotationDPSize, "two", "tollgate.io/dp-sise", "2"),
		kubefixture.Slice("vllm-1", "vllm", 8000, kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1"}, kubefixture.Endpoint{Pod: "b", IP: "10.0.0.2"}, kubefixture.Endpoint{Pod: "c", IP: "10.0.0.3"}))
	if got, want := kubefixture.Summary(snap.workers), "gpu-a@10.0.0.1:8000 llm/b@10.0.0.2:8000"; got != want {
		t.Fatalf("workers %q, want %q", got, want)
	}
	if a, b := snap.workers[0], snap.workers[1]; a.MaxRunningRequests != 256 || a.Model != "llama" || b.MaxRunningRequests != 8 {
		t.Errorf("capacity a=%+v b=%+v", a, b)
	}
	if !strings.Contains(snap.notes["pod llm/c"], "tollgate.io/dp-size") ||
		!strings.Contains(snap.notes["pod llm/c annotations"], "tollgate.io/dp-sise") {
		t.Errorf("notes %v", snap.notes)
	}
}

// sliceEnv is an EndpointSlice source over a fake clientset.
type sliceEnv struct {
	t      *testing.T
	client *fake.Clientset
	rec    *kubefixture.Recorder
	logs   *kubefixture.LogBuffer
}

func startSliceSource(t *testing.T, sel SliceSelection, objs ...runtime.Object) *sliceEnv {
	t.Helper()
	e := &sliceEnv{t: t, client: fake.NewClientset(objs...), rec: kubefixture.NewRecorder(nil), logs: &kubefixture.LogBuffer{}}
	src, err := NewEndpointSliceSource(SourceConfig{
		Client: e.client, Namespace: ns, Apply: e.rec.Apply, Logger: e.logs.Logger(), Debounce: 10 * time.Millisecond,
		Defaults: Defaults{MaxRunningRequests: 4},
	}, sel)
	if err != nil {
		t.Fatal(err)
	}
	kubefixture.Run(t, src.Run)
	return e
}

func (e *sliceEnv) putSlice(s *discoveryv1.EndpointSlice) {
	e.t.Helper()
	c := e.client.DiscoveryV1().EndpointSlices(ns)
	if _, err := c.Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		if _, err = c.Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *sliceEnv) putPod(p *corev1.Pod) {
	e.t.Helper()
	c := e.client.CoreV1().Pods(ns)
	if _, err := c.Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		if _, err = c.Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *sliceEnv) deletePod(name string) {
	e.t.Helper()
	if err := e.client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func TestEndpointSliceSource_FollowsEndpoints(t *testing.T) {
	f, tr := ptr(false), ptr(true)
	e := startSliceSource(t, SliceSelection{Service: "vllm", Port: "http"},
		kubefixture.Pod("a", "10.0.0.1"), kubefixture.Pod("b", "10.0.0.2"),
		kubefixture.Slice("vllm-1", "vllm", 8000, kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1", Ready: tr}, kubefixture.Endpoint{Pod: "b", IP: "10.0.0.2", Ready: tr}))
	both := "llm/a@10.0.0.1:8000 llm/b@10.0.0.2:8000"
	ws := e.rec.Await(t, both)
	if ws[0].MaxRunningRequests != 4 {
		t.Errorf("default slots not applied: %+v", ws[0])
	}

	// Not ready: out. Ready again: back.
	e.putSlice(kubefixture.Slice("vllm-1", "vllm", 8000, kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1", Ready: tr}, kubefixture.Endpoint{Pod: "b", IP: "10.0.0.2", Ready: f}))
	e.rec.Await(t, "llm/a@10.0.0.1:8000")
	e.putSlice(kubefixture.Slice("vllm-1", "vllm", 8000, kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1", Ready: tr}, kubefixture.Endpoint{Pod: "b", IP: "10.0.0.2", Ready: tr}))
	e.rec.Await(t, both)

	// Terminating: out at once, before the endpoint controller catches up.
	gone := kubefixture.Pod("b", "10.0.0.2")
	gone.DeletionTimestamp = &now
	e.putPod(gone)
	e.rec.Await(t, "llm/a@10.0.0.1:8000")
	e.putSlice(kubefixture.Slice("vllm-1", "vllm", 8000, kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1", Ready: tr}, kubefixture.Endpoint{Pod: "b", IP: "10.0.0.2", Ready: f, Terminating: tr}))

	// Removed, and a new pod whose endpoint appears before the pod is cached.
	e.deletePod("b")
	e.putSlice(kubefixture.Slice("vllm-1", "vllm", 8000, kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1", Ready: tr}, kubefixture.Endpoint{Pod: "c", IP: "10.0.0.3", Ready: tr}))
	e.putPod(kubefixture.Pod("c", "10.0.0.3"))
	e.rec.Await(t, "llm/a@10.0.0.1:8000 llm/c@10.0.0.3:8000")

	// A second slice of the same service.
	e.putSlice(kubefixture.Slice("vllm-2", "vllm", 8001, kubefixture.Endpoint{Pod: "d", IP: "10.0.0.4", Ready: tr}))
	e.putPod(kubefixture.Pod("d", "10.0.0.4"))
	e.rec.Await(t, "llm/a@10.0.0.1:8000 llm/c@10.0.0.3:8000 llm/d@10.0.0.4:8001")

	// Every slice gone: no workers.
	for _, name := range []string{"vllm-1", "vllm-2"} {
		if err := e.client.DiscoveryV1().EndpointSlices(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.rec.Await(t, "")
}

func TestEndpointSliceSource_SelectorAcrossServices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := ptr(true)
		e := startSliceSource(t, SliceSelection{Selector: "app=vllm"},
			kubefixture.Pod("a", "10.0.0.1"), kubefixture.Pod("b", "10.0.0.2"),
			kubefixture.Slice("s1-1", "s1", 8000, kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1", Ready: tr}),
			kubefixture.Slice("s2-1", "s2", 9000, kubefixture.Endpoint{Pod: "b", IP: "10.0.0.2", Ready: tr}))
		e.rec.Await(t, "llm/a@10.0.0.1:8000 llm/b@10.0.0.2:9000")
		other := kubefixture.Slice("s3-1", "s3", 7000, kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1", Ready: tr})
		other.Labels["app"] = "web"
		e.putSlice(other)
		e.putPod(kubefixture.Pod("z", "10.0.0.9"))
		kubefixture.Settle()
		if ws, _ := e.rec.Last(); kubefixture.Summary(ws) != "llm/a@10.0.0.1:8000 llm/b@10.0.0.2:9000" {
			t.Errorf("a slice outside the selector changed the set to %q", kubefixture.Summary(ws))
		}
	})
}

func TestEndpointSliceSource_AnnotationChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := ptr(true)
		e := startSliceSource(t, SliceSelection{Service: "vllm"},
			kubefixture.Pod("a", "10.0.0.1"), kubefixture.Pod("b", "10.0.0.2"),
			kubefixture.Slice("vllm-1", "vllm", 8000, kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1", Ready: tr}, kubefixture.Endpoint{Pod: "b", IP: "10.0.0.2", Ready: tr}))
		e.rec.Await(t, "llm/a@10.0.0.1:8000 llm/b@10.0.0.2:8000")

		// New capacity and a new id.
		e.putPod(kubefixture.Pod("a", "10.0.0.1", AnnotationMaxRunningRequests, "16", AnnotationWorkerID, "gpu-a", AnnotationModel, "qwen"))
		ws := e.rec.Await(t, "gpu-a@10.0.0.1:8000 llm/b@10.0.0.2:8000")
		if ws[0].MaxRunningRequests != 16 || ws[0].Model != "qwen" {
			t.Errorf("annotations not applied: %+v", ws[0])
		}

		// A bad value leaves the pod out, logged once however often it is rebuilt.
		e.putPod(kubefixture.Pod("a", "10.0.0.1", AnnotationMaxRunningRequests, "sixteen"))
		e.rec.Await(t, "llm/b@10.0.0.2:8000")
		for i := range 3 {
			e.putPod(kubefixture.Pod("b", "10.0.0.2", AnnotationMaxRunningRequests, "8", "touch", string(rune('a'+i))))
			kubefixture.Settle() // one rebuild per change
		}
		if n := e.logs.Count(`max-running-requests=\"sixteen\"`); n != 1 {
			t.Errorf("bad annotation logged %d times, want 1:\n%s", n, e.logs)
		}
		e.putPod(kubefixture.Pod("a", "10.0.0.1"))
		e.rec.Await(t, "llm/a@10.0.0.1:8000 llm/b@10.0.0.2:8000")
		if !strings.Contains(e.logs.String(), "problem resolved") {
			t.Errorf("resolution not logged:\n%s", e.logs)
		}

		// Two pods claiming one id: the set is invalid, the old one stays.
		e.putPod(kubefixture.Pod("a", "10.0.0.1", AnnotationWorkerID, "same"))
		e.rec.Await(t, "llm/b@10.0.0.2:8000 same@10.0.0.1:8000")
		before := e.rec.Calls()
		e.putPod(kubefixture.Pod("b", "10.0.0.2", AnnotationWorkerID, "same"))
		kubefixture.Settle()
		if !strings.Contains(e.logs.String(), "worker set rejected") {
			t.Fatalf("duplicate ids not rejected:\n%s", e.logs)
		}
		if ws, _ := e.rec.Last(); e.rec.Calls() != before || kubefixture.Summary(ws) != "llm/b@10.0.0.2:8000 same@10.0.0.1:8000" {
			t.Errorf("a rejected set replaced the old one: %q", kubefixture.Summary(ws))
		}
		if !strings.Contains(e.logs.String(), `duplicate id`) {
			t.Errorf("rejection reason not logged:\n%s", e.logs)
		}
		e.putPod(kubefixture.Pod("b", "10.0.0.2", AnnotationWorkerID, "other"))
		e.rec.Await(t, "other@10.0.0.2:8000 same@10.0.0.1:8000")
	})
}

func TestEndpointSliceSource_UnchangedSetIsNotReapplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := ptr(true)
		e := startSliceSource(t, SliceSelection{Service: "vllm"},
			kubefixture.Pod("a", "10.0.0.1"), kubefixture.Slice("vllm-1", "vllm", 8000, kubefixture.Endpoint{Pod: "a", IP: "10.0.0.1", Ready: tr}))
		e.rec.Await(t, "llm/a@10.0.0.1:8000")
		p := kubefixture.Pod("a", "10.0.0.1")
		p.Labels["touched"] = "yes"
		e.putPod(p)
		e.putPod(kubefixture.Pod("unrelated", "10.0.0.99"))
		kubefixture.Settle()
		if n := e.rec.Calls(); n != 1 {
			t.Errorf("applied %d times, want 1", n)
		}
	})
}

func TestNewEndpointSliceSource_ReportsEveryProblem(t *testing.T) {
	_, err := NewEndpointSliceSource(SourceConfig{Namespace: "Bad NS", Debounce: -1, Defaults: Defaults{DPSize: 5000}}, SliceSelection{})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"client is required", "apply function", "namespace", "debounce", "dp size", "service or a label selector"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestSource_ReportsListFailuresAndStopsPromptly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset()
		client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("RBAC: access denied"))
		})
		logs := &kubefixture.LogBuffer{}
		rec := kubefixture.NewRecorder(nil)
		src, err := NewEndpointSliceSource(SourceConfig{Client: client, Namespace: ns, Apply: rec.Apply, Logger: logs.Logger()},
			SliceSelection{Service: "vllm"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- src.Run(ctx) }()
		kubefixture.Settle()
		if !strings.Contains(logs.String(), "forbidden") {
			cancel()
			t.Fatalf("list failure not logged (Run: %v):\n%s", <-done, logs)
		}
		if !strings.Contains(logs.String(), `resource=pods`) {
			t.Errorf("failure does not name the resource:\n%s", logs)
		}
		cancel()
		cancelled := time.Now()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if took := time.Since(cancelled); took > time.Second {
			t.Fatalf("Run returned %v after cancel, want within 1s", took)
		}
		if rec.Calls() != 0 {
			t.Errorf("a worker set was applied before the caches were complete")
		}
	})
}
