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
	"github.com/tollgate/tollgate/extproc/intake"
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

// objRecorder is an ObjectiveConfig.Apply that merges what the source
// found as the server does, through a real intake.ObjectiveTable over the
// flags (or the server's own SetObjectives), and keeps what it was given,
// what it answered and what is in force.
type objRecorder struct {
	set   func(policy.Objectives) (intake.Merge, error)
	table *intake.ObjectiveTable // nil when set is the server's

	mu      sync.Mutex
	found   policy.Objectives
	inForce policy.Objectives
	answer  intake.Merge
	calls   int
	changed chan struct{}
}

// newObjRecorder merges into a table over the --objective-class flags.
func newObjRecorder(t *testing.T, flags policy.Objectives) *objRecorder {
	t.Helper()
	table, err := intake.NewObjectiveTable(flags)
	if err != nil {
		t.Fatal(err)
	}
	return &objRecorder{set: table.Set, table: table, changed: make(chan struct{})}
}

// passObjRecorder hands what the source found to set, normally a server's
// SetObjectives.
func passObjRecorder(set func(policy.Objectives) (intake.Merge, error)) *objRecorder {
	return &objRecorder{set: set, changed: make(chan struct{})}
}

func (r *objRecorder) apply(o policy.Objectives) (intake.Merge, error) {
	m, err := r.set(o)
	if err != nil {
		return m, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.found, r.answer, r.calls = maps.Clone(o), m, r.calls+1
	if r.table != nil {
		r.inForce = r.table.Current()
	}
	close(r.changed)
	r.changed = make(chan struct{})
	return m, nil
}

// await waits until the mapping in force (flags and objects merged)
// equals want.
func (r *objRecorder) await(t *testing.T, want policy.Objectives) {
	t.Helper()
	r.awaitMapping(t, "in force", func() policy.Objectives { return r.inForce }, want)
}

// awaitFound waits until the mapping the source last applied equals want.
func (r *objRecorder) awaitFound(t *testing.T, want policy.Objectives) {
	t.Helper()
	r.awaitMapping(t, "found", func() policy.Objectives { return r.found }, want)
}

// awaitMapping waits until get, read under r.mu, equals want.
func (r *objRecorder) awaitMapping(t *testing.T, what string, get func() policy.Objectives, want policy.Objectives) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ch, got, calls := r.changed, get(), r.calls
		r.mu.Unlock()
		if calls > 0 && maps.Equal(got, want) {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("objective mapping %s is %v (%d applies), want %v", what, got, calls, want)
		}
	}
}

// lastAnswer returns the last answer to an apply and how many there were.
func (r *objRecorder) lastAnswer() (intake.Merge, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.answer, r.calls
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
	flags := policy.Objectives{"pinned": sched.PrioritySystem, "flag-only": sched.PriorityBulk}
	rec, logs := newObjRecorder(t, flags), &logBuffer{}
	src, err := NewObjectiveSource(ObjectiveConfig{
		Namespace: ns, Pool: "pool", Apply: rec.apply, Logger: logs.logger(), Debounce: 10 * time.Millisecond,
	}, dyn)
	if err != nil {
		t.Fatal(err)
	}
	stop := runObjectiveSource(t, src)

	// negative → bulk, 0 or unset → default, positive → interactive; the
	// other pool's object is left out. The source reports the flag's name
	// too, and the merge keeps the flag's class.
	withFlags := func(o policy.Objectives) policy.Objectives {
		maps.Copy(o, flags)
		return o
	}
	rec.await(t, withFlags(policy.Objectives{"chat": sched.PriorityInteractive, "batch": sched.PriorityBulk,
		"plain": sched.PriorityDefault, "zero": sched.PriorityDefault}))
	rec.awaitFound(t, policy.Objectives{"chat": sched.PriorityInteractive, "batch": sched.PriorityBulk,
		"plain": sched.PriorityDefault, "zero": sched.PriorityDefault, "pinned": sched.PriorityBulk})
	for _, want := range []string{
		`InferenceObjective llm/legacy" problem="ignored: spec.poolRef.group is \"inference.networking.x-k8s.io\"`,
		`InferenceObjective llm/pinned" problem="spec.priority -1 (class bulk) ignored: --objective-class maps pinned to system"`,
	} {
		logs.await(t, want)
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
	rec.await(t, withFlags(policy.Objectives{"chat": sched.PriorityBulk, "assist": sched.PriorityInteractive,
		"plain": sched.PriorityDefault, "zero": sched.PriorityDefault}))

	// An object moved to another pool leaves the mapping.
	if _, err := api.Update(ctx, inferenceObjective("assist", "other-pool", ptr(int64(1))), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.await(t, withFlags(policy.Objectives{"chat": sched.PriorityBulk, "plain": sched.PriorityDefault, "zero": sched.PriorityDefault}))
	stop() // the update is logged after it is applied
	if n := logs.count("objective classes updated"); n < 3 {
		t.Errorf("%d updates logged, want at least 3:\n%s", n, logs)
	}
}

// The names past the budget are left out by name order and logged in one
// note on the pool, whether the source's own bound or the server's merge,
// which counts the flags' names in the budget, left them out.
func TestObjectiveSource_BoundsTheObjects(t *testing.T) {
	tests := []struct {
		name    string
		objects int
		flags   []string
		// held is how many objects the merge keeps; note is the pool's.
		held int
		note string
	}{
		{name: "the source's bound", objects: policy.MaxObjectives + 3, held: policy.MaxObjectives,
			note: "3 objects past the limit of 1024 objective names ignored (by name order; first: o-1024, o-1025, o-1026)"},
		{name: "the merge's budget", objects: policy.MaxObjectives, flags: []string{"flag-a", "flag-b"}, held: policy.MaxObjectives - 2,
			note: "2 objects past the limit of 1024 objective names ignored (by name order; first: o-1022, o-1023)"},
		{name: "both", objects: policy.MaxObjectives + 3, flags: []string{"flag"}, held: policy.MaxObjectives - 1,
			note: "4 objects past the limit of 1024 objective names ignored (by name order; first: o-1023, o-1024, o-1025, o-1026)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []runtime.Object
			for i := range tt.objects {
				objs = append(objs, inferenceObjective(fmt.Sprintf("o-%04d", i), "pool", ptr(int64(1))))
			}
			flags := policy.Objectives{}
			for _, f := range tt.flags {
				flags[f] = sched.PriorityBulk
			}
			rec, logs := newObjRecorder(t, flags), &logBuffer{}
			src, err := NewObjectiveSource(ObjectiveConfig{
				Namespace: ns, Pool: "pool", Apply: rec.apply, Logger: logs.logger(), Debounce: 10 * time.Millisecond,
			}, newPoolDynamic(objs...))
			if err != nil {
				t.Fatal(err)
			}
			stop := runObjectiveSource(t, src)
			want := maps.Clone(flags)
			for i := range tt.held {
				want[fmt.Sprintf("o-%04d", i)] = sched.PriorityInteractive
			}
			rec.await(t, want)
			stop() // the note is logged after the apply returns
			if n := logs.count(tt.note); n != 1 {
				t.Errorf("the bound is logged %d times, want once (%q):\n%s", n, tt.note, logs)
			}
		})
	}
}

// The server's answer is logged on the objects it concerns, once, and
// stays while nothing changes: rebuilds on unrelated events neither repeat
// it nor report it resolved. It changes with the object and is resolved
// when the object goes.
func TestObjectiveSource_AnswerNotes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dyn := newPoolDynamic(
			inferenceObjective("pinned", "pool", ptr(int64(5))),
			inferenceObjective("same", "pool", ptr(int64(0))),
			inferenceObjective("chat", "pool", ptr(int64(1))))
		rec, logs := newObjRecorder(t, policy.Objectives{"pinned": sched.PrioritySystem, "same": sched.PriorityDefault}), &logBuffer{}
		src, err := NewObjectiveSource(ObjectiveConfig{Namespace: ns, Pool: "pool", Apply: rec.apply,
			Logger: logs.logger(), Debounce: 10 * time.Millisecond}, dyn)
		if err != nil {
			t.Fatal(err)
		}
		runObjectiveSource(t, src)
		settle()
		const subject = `subject="InferenceObjective llm/pinned"`
		note := func(priority, class string) string {
			return subject + ` problem="spec.priority ` + priority + ` (class ` + class + `) ignored: --objective-class maps pinned to system"`
		}
		if n := logs.count(note("5", "interactive")); n != 1 {
			t.Fatalf("the shadowed object is logged %d times, want once:\n%s", n, logs)
		}
		if strings.Contains(logs.String(), "llm/same") {
			t.Errorf("an object the flag agrees with is logged:\n%s", logs)
		}
		m, calls := rec.lastAnswer()
		if calls != 1 || !maps.Equal(m.Shadowed, map[string]string{"pinned": "--objective-class maps pinned to system"}) {
			t.Errorf("%d applies, last answer shadows %v", calls, m.Shadowed)
		}

		api := dyn.Resource(InferenceObjectiveGVR).Namespace(ns)
		ctx := context.Background()
		update := func(u *unstructured.Unstructured) {
			t.Helper()
			if _, err := api.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			settle()
		}
		// Events that change nothing applied: the note stays as it is.
		relabeled := inferenceObjective("chat", "pool", ptr(int64(1)))
		relabeled.SetLabels(map[string]string{"team": "a"})
		update(relabeled)
		if _, err := api.Create(ctx, inferenceObjective("elsewhere", "other-pool", ptr(int64(1))), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		settle()
		if _, calls := rec.lastAnswer(); calls != 1 {
			t.Errorf("%d applies after events that change nothing, want 1", calls)
		}
		if n := logs.count(subject); n != 1 || logs.count("problem resolved") != 0 {
			t.Errorf("the note flapped:\n%s", logs)
		}
		// A new priority of the same class: the same answer, told anew.
		update(inferenceObjective("pinned", "pool", ptr(int64(7))))
		if n := logs.count(note("7", "interactive")); n != 1 {
			t.Errorf("the changed object is logged %d times, want once:\n%s", n, logs)
		}
		// Another class: a new apply, a new answer.
		update(inferenceObjective("pinned", "pool", ptr(int64(-1))))
		if n := logs.count(note("-1", "bulk")); n != 1 {
			t.Errorf("the changed class is logged %d times, want once:\n%s", n, logs)
		}
		if n := logs.count("problem resolved"); n != 0 {
			t.Errorf("a note was resolved while it holds:\n%s", logs)
		}
		if err := api.Delete(ctx, "pinned", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		settle()
		if n := logs.count(`problem resolved" ` + subject); n != 1 {
			t.Errorf("the note is resolved %d times, want once:\n%s", n, logs)
		}
	})
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
		rec := newObjRecorder(t, nil)
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
		if _, calls := rec.lastAnswer(); calls != 0 {
			t.Errorf("a mapping was applied without the API")
		}
		installed.Store(true)
		rec.await(t, policy.Objectives{"chat": sched.PriorityInteractive})
	})
}

func TestNewObjectiveSource_ReportsEveryProblem(t *testing.T) {
	_, err := NewObjectiveSource(ObjectiveConfig{Namespace: "Bad", Pool: "Bad_Pool", Debounce: -1}, nil)
	for _, want := range []string{"dynamic client", "apply function", "namespace", "inference pool name", "debounce"} {
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
			Tenancy:    &intake.Tenancy{Tenants: tenants, PriorityFile: file, DefaultMaxClass: "system"},
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
		rec, logs := passObjRecorder(s.srv.SetObjectives), &logBuffer{}
		objectives, err := NewObjectiveSource(ObjectiveConfig{Namespace: ns, Pool: "pool", Debounce: 10 * time.Millisecond,
			Apply: rec.apply, Logger: logs.logger()}, dyn)
		if err != nil {
			t.Fatal(err)
		}
		runWorkerSource(t, workers)
		runObjectiveSource(t, objectives)
		eventually(t, 5*time.Second, "the server ready", s.srv.Ready)
		rec.awaitFound(t, policy.Objectives{"chat": sched.PriorityInteractive, "batch": sched.PriorityBulk, "pinned": sched.PriorityBulk})
		// The server's answer: the flag shadows pinned.
		eventually(t, 5*time.Second, "the shadowed object logged", func() bool {
			return logs.count(`subject="InferenceObjective llm/pinned" problem="spec.priority -5 (class bulk) ignored: --objective-class maps pinned to system"`) == 1
		})

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
		rec.awaitFound(t, policy.Objectives{"chat": sched.PriorityBulk, "batch": sched.PriorityBulk, "pinned": sched.PriorityBulk})
		queuedIn("chat → bulk after the update", sched.PriorityBulk, "x-smg-tenant-id", "blue", "x-llm-d-inference-objective", "chat")

		s.gate.Open()
		for range 6 {
			if st := <-results; st != 200 {
				t.Errorf("status %d, want 200", st)
			}
		}
	})
}
