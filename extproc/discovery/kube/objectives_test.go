package kube

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

// inferenceObjective returns an InferenceObjective of pool; priority nil
// leaves spec.priority unset.
func inferenceObjective(name, pool string, priority *int64) *unstructured.Unstructured {
	spec := map[string]any{"poolRef": map[string]any{"name": pool}, "someFutureField": "ignored"}
	if priority != nil {
		spec["priority"] = *priority
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.x-k8s.io/v1alpha2",
		"kind":       "InferenceObjective",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec":       spec,
	}}
}

func newPoolDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{InferencePoolGVR: "InferencePoolList", InferenceObjectiveGVR: "InferenceObjectiveList",
			InferenceModelRewriteGVR: "InferenceModelRewriteList"}, objs...)
}

// objRecorder is an ObjectiveConfig.Apply that keeps the last mapping.
type objRecorder struct {
	mu      sync.Mutex
	last    policy.Objectives
	calls   int
	changed chan struct{}
}

func newObjRecorder() *objRecorder { return &objRecorder{changed: make(chan struct{})} }

func (r *objRecorder) apply(o policy.Objectives) error {
	if err := o.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last, r.calls = maps.Clone(o), r.calls+1
	close(r.changed)
	r.changed = make(chan struct{})
	return nil
}

// await waits until the last mapping equals want.
func (r *objRecorder) await(t *testing.T, want policy.Objectives) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ch, last, calls := r.changed, r.last, r.calls
		r.mu.Unlock()
		if calls > 0 && maps.Equal(last, want) {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("objective mapping is %v (%d applies), want %v", last, calls, want)
		}
	}
}

func runObjectiveSource(t *testing.T, src *ObjectiveSource) (stop func()) {
	t.Helper()
	return runRun(t, src.Run)
}

func TestObjectiveSource_FollowsObjects(t *testing.T) {
	xgroup := inferenceObjective("legacy", "pool", ptr(int64(5)))
	xgroup.Object["spec"].(map[string]any)["poolRef"].(map[string]any)["group"] = "inference.networking.x-k8s.io"
	leaving := inferenceObjective("leaving", "pool", ptr(int64(4)))
	leaving.SetDeletionTimestamp(&now)
	dyn := newPoolDynamic(
		inferenceObjective("chat", "pool", ptr(int64(10))),
		inferenceObjective("batch", "pool", ptr(int64(-3))),
		inferenceObjective("plain", "pool", nil),
		inferenceObjective("zero", "pool", ptr(int64(0))),
		inferenceObjective("elsewhere", "other-pool", ptr(int64(-9))),
		inferenceObjective("pinned", "pool", ptr(int64(-1))),
		xgroup,
		leaving,
	)
	rec, logs := newObjRecorder(), &logBuffer{}
	src, err := NewObjectiveSource(ObjectiveConfig{
		Namespace: ns, Pool: "pool", Explicit: policy.Objectives{"pinned": sched.PrioritySystem, "flag-only": sched.PriorityBulk},
		Apply: rec.apply, Logger: logs.logger(), Debounce: 10 * time.Millisecond,
	}, dyn)
	if err != nil {
		t.Fatal(err)
	}
	stop := runObjectiveSource(t, src)

	// negative → bulk, 0 or unset → default, positive → interactive; the
	// other pool's object and the flag's name are left out.
	rec.await(t, policy.Objectives{"chat": sched.PriorityInteractive, "batch": sched.PriorityBulk,
		"plain": sched.PriorityDefault, "zero": sched.PriorityDefault})
	for _, want := range []string{
		`InferenceObjective llm/legacy" problem="ignored: spec.poolRef.group is \"inference.networking.x-k8s.io\"`,
		`InferenceObjective llm/pinned" problem="spec.priority -1 (class bulk) ignored: --objective-class maps pinned to system"`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs.String(), "elsewhere") {
		t.Errorf("another pool's objective was logged:\n%s", logs)
	}

	// Update, create and delete through the watch.
	api := dyn.Resource(InferenceObjectiveGVR).Namespace(ns)
	ctx := context.Background()
	if _, err := api.Update(ctx, inferenceObjective("chat", "pool", ptr(int64(-1))), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Create(ctx, inferenceObjective("assist", "pool", ptr(int64(1))), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := api.Delete(ctx, "batch", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.await(t, policy.Objectives{"chat": sched.PriorityBulk, "assist": sched.PriorityInteractive,
		"plain": sched.PriorityDefault, "zero": sched.PriorityDefault})

	// An object moved to another pool leaves the mapping.
	if _, err := api.Update(ctx, inferenceObjective("assist", "other-pool", ptr(int64(1))), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.await(t, policy.Objectives{"chat": sched.PriorityBulk, "plain": sched.PriorityDefault, "zero": sched.PriorityDefault})
	stop() // the update is logged after it is applied
	if n := logs.count("objective classes updated"); n < 3 {
		t.Errorf("%d updates logged, want at least 3:\n%s", n, logs)
	}
}

func TestObjectiveSource_BoundsTheObjects(t *testing.T) {
	var objs []runtime.Object
	for i := range policy.MaxObjectives + 3 {
		objs = append(objs, inferenceObjective(fmt.Sprintf("o-%04d", i), "pool", ptr(int64(1))))
	}
	rec, logs := newObjRecorder(), &logBuffer{}
	src, err := NewObjectiveSource(ObjectiveConfig{
		Namespace: ns, Pool: "pool", Explicit: policy.Objectives{"flag": sched.PriorityBulk},
		Apply: rec.apply, Logger: logs.logger(), Debounce: 10 * time.Millisecond,
	}, newPoolDynamic(objs...))
	if err != nil {
		t.Fatal(err)
	}
	runObjectiveSource(t, src)
	want := policy.Objectives{}
	for i := range policy.MaxObjectives - 1 { // one name is the flag's
		want[fmt.Sprintf("o-%04d", i)] = sched.PriorityInteractive
	}
	rec.await(t, want)
	if !strings.Contains(logs.String(), "4 objects past the limit of 1024 objective names ignored (by name order; first: o-1023, o-1024, o-1025, o-1026)") {
		t.Errorf("the bound is not logged:\n%s", logs)
	}
}

// A cluster without the InferenceObjective API: worker discovery goes on,
// the missing API is logged once however often the list is retried, and
// once the API appears its objects are read.
func TestObjectiveSource_MissingAPI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dyn := newPoolDynamic(inferencePool("pool", 8000), inferenceObjective("chat", "pool", ptr(int64(3))))
		var installed atomic.Bool
		var lists atomic.Int32
		dyn.PrependReactor("list", "inferenceobjectives", func(k8stesting.Action) (bool, runtime.Object, error) {
			if installed.Load() {
				return false, nil, nil
			}
			lists.Add(1)
			return true, nil, apierrors.NewNotFound(InferenceObjectiveGVR.GroupResource(), "")
		})
		logs := &logBuffer{}
		workers := newRecorder(nil)
		pools, err := NewPoolSource(SourceConfig{Client: fake.NewClientset(pod("a", "10.0.0.1")), Namespace: ns, Apply: workers.apply,
			Logger: logs.logger(), Debounce: 10 * time.Millisecond}, dyn, "pool")
		if err != nil {
			t.Fatal(err)
		}
		rec := newObjRecorder()
		objectives, err := NewObjectiveSource(ObjectiveConfig{Namespace: ns, Pool: "pool", Apply: rec.apply,
			Logger: logs.logger(), Debounce: 10 * time.Millisecond}, dyn)
		if err != nil {
			t.Fatal(err)
		}
		runWorkerSource(t, pools)
		runObjectiveSource(t, objectives)
		workers.await(t, "llm/a@10.0.0.1:8000")
		eventually(t, 10*time.Second, "a retried list", func() bool { return lists.Load() >= 2 })
		if n := logs.count("the InferenceObjective API is not installed"); n != 1 {
			t.Errorf("missing API logged %d times after %d lists, want once:\n%s", n, lists.Load(), logs)
		}
		rec.mu.Lock()
		calls := rec.calls
		rec.mu.Unlock()
		if calls != 0 {
			t.Errorf("a mapping was applied without the API")
		}
		installed.Store(true)
		rec.await(t, policy.Objectives{"chat": sched.PriorityInteractive})
	})
}

func TestNewObjectiveSource_ReportsEveryProblem(t *testing.T) {
	_, err := NewObjectiveSource(ObjectiveConfig{Namespace: "Bad", Pool: "Bad_Pool", Debounce: -1,
		Explicit: policy.Objectives{"": sched.PriorityBulk}}, nil)
	for _, want := range []string{"dynamic client", "apply function", "namespace", "inference pool name", "debounce", "empty"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}

// End to end: InferenceObjectives of the pool set the class of requests
// that name them in the objective header, the flags win, the tenant clamp
// still applies, and a changed priority takes effect without a restart.
func TestEndToEnd_ObjectiveClasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tenants, err := policy.NewTenants(policy.TenantOptions{TrustHeader: true})
		if err != nil {
			t.Fatal(err)
		}
		file := policy.DefaultPriorityFile()
		file.Tenants["header:red"] = sched.PriorityDefault // red may ask for default at most
		explicit := policy.Objectives{"pinned": sched.PrioritySystem}
		s := startStackWith(t, extproc.Config{
			Sched:      sched.Config{Priority: priorityConfig()},
			Tenancy:    &extproc.Tenancy{Tenants: tenants, PriorityFile: file, DefaultMaxClass: "system"},
			Objectives: explicit,
		})
		port := s.worker("w0")
		client := fake.NewClientset(pod("vllm-0", workerIP, AnnotationMaxRunningRequests, "1"))
		dyn := newPoolDynamic(inferencePool("pool", int64(port)),
			inferenceObjective("chat", "pool", ptr(int64(7))),
			inferenceObjective("batch", "pool", ptr(int64(-2))),
			inferenceObjective("pinned", "pool", ptr(int64(-5))))
		workers, err := NewPoolSource(SourceConfig{Client: client, Namespace: ns, Apply: s.srv.SetWorkers, Debounce: 10 * time.Millisecond}, dyn, "pool")
		if err != nil {
			t.Fatal(err)
		}
		rec := newObjRecorder()
		objectives, err := NewObjectiveSource(ObjectiveConfig{Namespace: ns, Pool: "pool", Explicit: explicit, Debounce: 10 * time.Millisecond,
			Apply: func(o policy.Objectives) error {
				if err := s.srv.SetObjectives(o); err != nil {
					return err
				}
				return rec.apply(o)
			}}, dyn)
		if err != nil {
			t.Fatal(err)
		}
		runWorkerSource(t, workers)
		runObjectiveSource(t, objectives)
		eventually(t, 5*time.Second, "the server ready", s.srv.Ready)
		rec.await(t, policy.Objectives{"chat": sched.PriorityInteractive, "batch": sched.PriorityBulk})

		// Hold the only slot; each request after it queues in its class.
		results := make(chan int, 8)
		var wg sync.WaitGroup
		defer wg.Wait()
		defer s.gate.Open()
		wg.Go(func() { results <- s.do("X-Hold", "1").Status })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.gate.WaitParked(ctx, 1); err != nil {
			t.Fatal(err)
		}
		queuedIn := func(what string, want sched.Priority, headers ...string) {
			t.Helper()
			before, _ := s.srv.Stats(context.Background())
			wg.Go(func() { results <- s.do(headers...).Status })
			s.awaitStats(what, func(st sched.Stats) bool { return st.QueueDepth[want] == before.QueueDepth[want]+1 })
		}
		queuedIn("chat → interactive", sched.PriorityInteractive, "x-smg-tenant-id", "blue", "x-llm-d-inference-objective", "chat")
		queuedIn("batch → bulk", sched.PriorityBulk, "x-smg-tenant-id", "blue", "x-gateway-inference-objective", "batch")
		queuedIn("the flag wins: pinned → system", sched.PrioritySystem, "x-smg-tenant-id", "blue", "x-llm-d-inference-objective", "pinned")
		queuedIn("red is clamped: chat → default", sched.PriorityDefault, "x-smg-tenant-id", "red", "x-llm-d-inference-objective", "chat")

		// chat's priority drops below zero: new requests naming it are bulk.
		if _, err := dyn.Resource(InferenceObjectiveGVR).Namespace(ns).Update(context.Background(),
			inferenceObjective("chat", "pool", ptr(int64(-1))), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.await(t, policy.Objectives{"chat": sched.PriorityBulk, "batch": sched.PriorityBulk})
		queuedIn("chat → bulk after the update", sched.PriorityBulk, "x-smg-tenant-id", "blue", "x-llm-d-inference-objective", "chat")

		s.gate.Open()
		for range 6 {
			if st := <-results; st != 200 {
				t.Errorf("status %d, want 200", st)
			}
		}
	})
}
