package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/discovery/kube"
	"github.com/tollgate/tollgate/test/poll"
)

// discoveryNS is the namespace of the fake clusters below.
const discoveryNS = "llm"

// syncLog is a log destination the test reads while sources write it.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// discoveryServer parses serve's flags, builds the server they describe
// and runs it until the test ends. Discovery is not started, and engine
// metrics are not scraped: the workers are not there.
func discoveryServer(t *testing.T, args ...string) (*options, *extproc.Server, *slog.Logger, *syncLog) {
	t.Helper()
	var o options
	if err := newFlagSet("serve", &o).Parse(append([]string{"--engine-metrics-interval=0"}, args...)); err != nil {
		t.Fatal(err)
	}
	logs := &syncLog{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	st, err := o.build(log)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := extproc.New(st.cfg, st.workers)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Wait()
	})
	return &o, srv, log, logs
}

// startWired starts o's discovery over clients until the test ends, and
// waits for every goroutine it started then.
func startWired(t *testing.T, o *options, clients kubeClients, srv *extproc.Server, log *slog.Logger) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	if _, err := o.discovery.start(ctx, clients, srv, log, &wg); err != nil {
		t.Fatal(err)
	}
}

// awaitDiscovered polls cond until it holds, failing the test after 10 seconds.
func awaitDiscovered(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 10*time.Second, 10*time.Millisecond, what, cond)
}

// serverGet returns the body of path on srv's metrics handler.
func serverGet(srv *extproc.Server, path string) string {
	rec := httptest.NewRecorder()
	srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Body.String()
}

// readyPod is a Running, Ready pod of the app=vllm workers with 4 slots.
func readyPod(name, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: discoveryNS, UID: types.UID("uid-" + name),
			Labels: map[string]string{"app": "vllm"}, Annotations: map[string]string{kube.AnnotationMaxRunningRequests: "4"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// poolObject returns an unstructured object of the pool's API group.
func poolObject(apiVersion, kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": discoveryNS, "creationTimestamp": "2026-01-01T00:00:00Z"},
		"spec":     spec,
	}}
}

func poolDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kube.InferencePoolGVR:         "InferencePoolList",
		kube.InferenceObjectiveGVR:    "InferenceObjectiveList",
		kube.InferenceModelRewriteGVR: "InferenceModelRewriteList",
	}, objs...)
}

// The inferencepool wiring, against fake clients: the pool's pod becomes
// the worker set, its InferenceObjectives and InferenceModelRewrites reach
// the server, which merges them under --objective-class and
// --model-rewrite (the flags win, and the sources log what they shadow),
// and leader election makes this replica the active leader.
func TestDiscoveryStart_InferencePool(t *testing.T) {
	o, srv, log, logs := discoveryServer(t,
		"--discovery=inferencepool", "--pool=llm/pool", "--k8s-debounce=10ms",
		"--objective-class=pinned=system", "--model-rewrite=alias=from-flag",
		"--leader-elect", "--leader-elect-namespace=llm", "--leader-elect-identity=replica-0")
	ref := map[string]any{"name": "pool"}
	dyn := poolDynamic(
		poolObject("inference.networking.k8s.io/v1", "InferencePool", "pool", map[string]any{
			"selector":    map[string]any{"matchLabels": map[string]any{"app": "vllm"}},
			"targetPorts": []any{map[string]any{"number": int64(8000)}},
		}),
		poolObject("inference.networking.x-k8s.io/v1alpha2", "InferenceObjective", "chat", map[string]any{"poolRef": ref, "priority": int64(5)}),
		poolObject("inference.networking.x-k8s.io/v1alpha2", "InferenceObjective", "pinned", map[string]any{"poolRef": ref, "priority": int64(-1)}),
		poolObject("inference.networking.x-k8s.io/v1alpha2", "InferenceModelRewrite", "rewrites", map[string]any{"poolRef": ref, "rules": []any{
			map[string]any{"matches": []any{map[string]any{"model": map[string]any{"value": "chat"}}}, "targets": []any{map[string]any{"modelRewrite": "chat-v2"}}},
			map[string]any{"matches": []any{map[string]any{"model": map[string]any{"value": "alias"}}}, "targets": []any{map[string]any{"modelRewrite": "from-object"}}},
		}}),
	)
	core := fake.NewClientset(readyPod("vllm-0", "192.0.2.1"))
	if !strings.Contains(serverGet(srv, "/readyz"), "no workers") {
		t.Fatalf("readyz before discovery: %q", serverGet(srv, "/readyz"))
	}
	startWired(t, o, kubeClients{core: core, dynamic: dyn}, srv, log)

	awaitDiscovered(t, "the server ready (the worker found, the lease held)", srv.Ready)
	if st, _ := srv.Stats(context.Background()); st.Capacity != 4 {
		t.Errorf("capacity %d, want the pod's 4 slots", st.Capacity)
	}
	lease, err := core.CoordinationV1().Leases("llm").Get(context.Background(), "tollgate", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "replica-0" {
		t.Errorf("lease %v (%v), want held by replica-0", lease, err)
	}
	for _, want := range []string{
		"tollgate_workers 1",
		// chat is the object's; pinned stays the flag's.
		`tollgate_objectives{class="interactive",source="inferenceobjective"} 1`,
		`tollgate_objectives{class="bulk",source="inferenceobjective"} 0`,
		`tollgate_objectives{class="system",source="flag"} 1`,
		// chat is the object's; alias stays the flag's.
		`tollgate_model_rewrites{match="exact",source="flag"} 1`,
		`tollgate_model_rewrites{match="exact",source="inferencemodelrewrite"} 1`,
	} {
		awaitDiscovered(t, "metrics with "+want, func() bool { return strings.Contains(serverGet(srv, "/metrics"), want) })
	}
	for _, want := range []string{
		`subject="InferenceObjective llm/pinned" problem="spec.priority -1 (class bulk) ignored: --objective-class maps pinned to system"`,
		`subject="InferenceModelRewrite llm/rewrites" problem="rule 1 for \"alias\" ignored: --model-rewrite rewrites alias to from-flag*1"`,
	} {
		awaitDiscovered(t, "a log with "+want, func() bool { return strings.Contains(logs.String(), want) })
	}
}

// The kubernetes wiring: EndpointSlices of a Service give the workers.
func TestDiscoveryStart_EndpointSlices(t *testing.T) {
	o, srv, log, _ := discoveryServer(t, "--discovery=kubernetes", "--k8s-service=llm/vllm", "--k8s-debounce=10ms")
	core := fake.NewClientset(readyPod("vllm-0", "192.0.2.1"), &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "vllm-abc", Namespace: discoveryNS, Labels: map[string]string{discoveryv1.LabelServiceName: "vllm"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8000))}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: discoveryNS, Name: "vllm-0", UID: "uid-vllm-0"}}},
	})
	startWired(t, o, kubeClients{core: core}, srv, log)
	awaitDiscovered(t, "the server ready", srv.Ready)
	if st, _ := srv.Stats(context.Background()); st.Capacity != 4 {
		t.Errorf("capacity %d, want the pod's 4 slots", st.Capacity)
	}
}

// Static discovery without leader election needs no cluster: nothing is
// built or started, and the server is left as it is.
func TestDiscoveryStart_StaticNeedsNoCluster(t *testing.T) {
	o, srv, log, _ := discoveryServer(t, "--workers", writeFile(t, "workers.yaml", twoWorkers))
	var wg sync.WaitGroup
	if _, err := startDiscovery(context.Background(), o, srv, log, &wg); err != nil {
		t.Fatal(err)
	}
	if _, err := o.discovery.start(context.Background(), kubeClients{}, srv, log, &wg); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	awaitDiscovered(t, "the server ready", srv.Ready)
}

// A part that cannot be built starts nothing.
func TestDiscoveryStart_ReportsMissingClients(t *testing.T) {
	o, srv, log, _ := discoveryServer(t, "--discovery=inferencepool", "--pool=llm/pool")
	var wg sync.WaitGroup
	_, err := o.discovery.start(context.Background(), kubeClients{core: fake.NewClientset()}, srv, log, &wg)
	if err == nil || !strings.Contains(err.Error(), "a dynamic client is required") {
		t.Errorf("error %v, want a missing dynamic client", err)
	}
	wg.Wait()
}

// The outer wiring builds its clients from --kubeconfig: a dynamic client
// only for inferencepool discovery. Building them contacts nobody.
func TestDiscoveryClients_FromKubeconfig(t *testing.T) {
	kubeconfig := writeFile(t, "kubeconfig", `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
users:
- name: u
  user: {token: t}
`)
	for _, tt := range []struct {
		mode    string
		dynamic bool
	}{{discoveryKubernetes, false}, {discoveryInferencePool, true}} {
		d := discoveryOptions{mode: tt.mode, kubeconfig: kubeconfig}
		c, err := d.clients()
		if err != nil {
			t.Fatalf("%s: %v", tt.mode, err)
		}
		if c.core == nil || (c.dynamic != nil) != tt.dynamic {
			t.Errorf("%s: core %v, dynamic %v; want a core client and a dynamic one %v", tt.mode, c.core != nil, c.dynamic != nil, tt.dynamic)
		}
	}
	d := discoveryOptions{mode: discoveryKubernetes, kubeconfig: kubeconfig + ".missing"}
	if _, err := d.clients(); err == nil || !strings.Contains(err.Error(), "kubernetes client") {
		t.Errorf("a missing kubeconfig: error %v", err)
	}
}
