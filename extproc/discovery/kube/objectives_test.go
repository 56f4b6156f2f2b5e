package kube

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
	"github.com/tollgate/tollgate/test/kubefixture"
)

func TestObjectiveSource_FollowsObjects(t *testing.T) {
	xgroup := kubefixture.InferenceObjective("legacy", "pool", ptr(int64(5)))
	xgroup.Object["spec"].(map[string]any)["poolRef"].(map[string]any)["group"] = "inference.networking.x-k8s.io"
	leaving := kubefixture.InferenceObjective("leaving", "pool", ptr(int64(4)))
	leaving.SetDeletionTimestamp(&now)
	dyn := kubefixture.NewDynamic(
		kubefixture.InferenceObjective("chat", "pool", ptr(int64(10))),
		kubefixture.InferenceObjective("batch", "pool", ptr(int64(-3))),
		kubefixture.InferenceObjective("plain", "pool", nil),
		kubefixture.InferenceObjective("zero", "pool", ptr(int64(0))),
		kubefixture.InferenceObjective("elsewhere", "other-pool", ptr(int64(-9))),
		kubefixture.InferenceObjective("pinned", "pool", ptr(int64(-1))),
		xgroup,
		leaving,
	)
	flags := policy.Objectives{"pinned": sched.PrioritySystem, "flag-only": sched.PriorityBulk}
	rec, logs := kubefixture.NewObjectiveRecorder(t, flags), &kubefixture.LogBuffer{}
	src, err := NewObjectiveSource(ObjectiveConfig{
		Namespace: ns, Pool: "pool", Apply: rec.Apply, Logger: logs.Logger(), Debounce: 10 * time.Millisecond,
	}, dyn)
	if err != nil {
		t.Fatal(err)
	}
	stop := kubefixture.Run(t, src.Run)

	// negative → bulk, 0 or unset → default, positive → interactive; the
	// other pool's object is left out. The source reports the flag's name
	// too, and the merge keeps the flag's class.
	withFlags := func(o policy.Objectives) policy.Objectives {
		maps.Copy(o, flags)
		return o
	}
	rec.Await(t, withFlags(policy.Objectives{"chat": sched.PriorityInteractive, "batch": sched.PriorityBulk,
		"plain": sched.PriorityDefault, "zero": sched.PriorityDefault}))
	rec.AwaitFound(t, policy.Objectives{"chat": sched.PriorityInteractive, "batch": sched.PriorityBulk,
		"plain": sched.PriorityDefault, "zero": sched.PriorityDefault, "pinned": sched.PriorityBulk})
	for _, want := range []string{
		`InferenceObjective llm/legacy" problem="ignored: spec.poolRef.group is \"inference.networking.x-k8s.io\"`,
		`InferenceObjective llm/pinned" problem="spec.priority -1 (class bulk) ignored: --objective-class maps pinned to system"`,
	} {
		logs.Await(t, want)
	}
	if strings.Contains(logs.String(), "elsewhere") {
		t.Errorf("another pool's objective was logged:\n%s", logs)
	}

	// Update, create and delete through the watch.
	api := dyn.Resource(InferenceObjectiveGVR).Namespace(ns)
	ctx := context.Background()
	if _, err := api.Update(ctx, kubefixture.InferenceObjective("chat", "pool", ptr(int64(-1))), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Create(ctx, kubefixture.InferenceObjective("assist", "pool", ptr(int64(1))), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := api.Delete(ctx, "batch", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.Await(t, withFlags(policy.Objectives{"chat": sched.PriorityBulk, "assist": sched.PriorityInteractive,
		"plain": sched.PriorityDefault, "zero": sched.PriorityDefault}))

	// An object moved to another pool leaves the mapping.
	if _, err := api.Update(ctx, kubefixture.InferenceObjective("assist", "other-pool", ptr(int64(1))), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.Await(t, withFlags(policy.Objectives{"chat": sched.PriorityBulk, "plain": sched.PriorityDefault, "zero": sched.PriorityDefault}))
	stop() // the update is logged after it is applied
	if n := logs.Count("objective classes updated"); n < 3 {
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
				objs = append(objs, kubefixture.InferenceObjective(fmt.Sprintf("o-%04d", i), "pool", ptr(int64(1))))
			}
			flags := policy.Objectives{}
			for _, f := range tt.flags {
				flags[f] = sched.PriorityBulk
			}
			rec, logs := kubefixture.NewObjectiveRecorder(t, flags), &kubefixture.LogBuffer{}
			src, err := NewObjectiveSource(ObjectiveConfig{
				Namespace: ns, Pool: "pool", Apply: rec.Apply, Logger: logs.Logger(), Debounce: 10 * time.Millisecond,
			}, kubefixture.NewDynamic(objs...))
			if err != nil {
				t.Fatal(err)
			}
			stop := kubefixture.Run(t, src.Run)
			want := maps.Clone(flags)
			for i := range tt.held {
				want[fmt.Sprintf("o-%04d", i)] = sched.PriorityInteractive
			}
			rec.Await(t, want)
			stop() // the note is logged after the apply returns
			if n := logs.Count(tt.note); n != 1 {
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
		dyn := kubefixture.NewDynamic(
			kubefixture.InferenceObjective("pinned", "pool", ptr(int64(5))),
			kubefixture.InferenceObjective("same", "pool", ptr(int64(0))),
			kubefixture.InferenceObjective("chat", "pool", ptr(int64(1))))
		rec, logs := kubefixture.NewObjectiveRecorder(t, policy.Objectives{"pinned": sched.PrioritySystem, "same": sched.PriorityDefault}), &kubefixture.LogBuffer{}
		src, err := NewObjectiveSource(ObjectiveConfig{Namespace: ns, Pool: "pool", Apply: rec.Apply,
			Logger: logs.Logger(), Debounce: 10 * time.Millisecond}, dyn)
		if err != nil {
			t.Fatal(err)
		}
		kubefixture.Run(t, src.Run)
		kubefixture.Settle()
		const subject = `subject="InferenceObjective llm/pinned"`
		note := func(priority, class string) string {
			return subject + ` problem="spec.priority ` + priority + ` (class ` + class + `) ignored: --objective-class maps pinned to system"`
		}
		if n := logs.Count(note("5", "interactive")); n != 1 {
			t.Fatalf("the shadowed object is logged %d times, want once:\n%s", n, logs)
		}
		if strings.Contains(logs.String(), "llm/same") {
			t.Errorf("an object the flag agrees with is logged:\n%s", logs)
		}
		m, calls := rec.LastAnswer()
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
			kubefixture.Settle()
		}
		// Events that change nothing applied: the note stays as it is.
		relabeled := kubefixture.InferenceObjective("chat", "pool", ptr(int64(1)))
		relabeled.SetLabels(map[string]string{"team": "a"})
		update(relabeled)
		if _, err := api.Create(ctx, kubefixture.InferenceObjective("elsewhere", "other-pool", ptr(int64(1))), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		kubefixture.Settle()
		if _, calls := rec.LastAnswer(); calls != 1 {
			t.Errorf("%d applies after events that change nothing, want 1", calls)
		}
		if n := logs.Count(subject); n != 1 || logs.Count("problem resolved") != 0 {
			t.Errorf("the note flapped:\n%s", logs)
		}
		// A new priority of the same class: the same answer, told anew.
		update(kubefixture.InferenceObjective("pinned", "pool", ptr(int64(7))))
		if n := logs.Count(note("7", "interactive")); n != 1 {
			t.Errorf("the changed object is logged %d times, want once:\n%s", n, logs)
		}
		// Another class: a new apply, a new answer.
		update(kubefixture.InferenceObjective("pinned", "pool", ptr(int64(-1))))
		if n := logs.Count(note("-1", "bulk")); n != 1 {
			t.Errorf("the changed class is logged %d times, want once:\n%s", n, logs)
		}
		if n := logs.Count("problem resolved"); n != 0 {
			t.Errorf("a note was resolved while it holds:\n%s", logs)
		}
		if err := api.Delete(ctx, "pinned", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		kubefixture.Settle()
		if n := logs.Count(`problem resolved" ` + subject); n != 1 {
			t.Errorf("the note is resolved %d times, want once:\n%s", n, logs)
		}
	})
}

// A cluster without the InferenceObjective API: worker discovery goes on,
// the missing API is logged once however often the list is retried, and
// once the API appears its objects are read.
func TestObjectiveSource_MissingAPI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dyn := kubefixture.NewDynamic(kubefixture.InferencePool("pool", 8000), kubefixture.InferenceObjective("chat", "pool", ptr(int64(3))))
		var installed atomic.Bool
		var lists atomic.Int32
		dyn.PrependReactor("list", "inferenceobjectives", func(k8stesting.Action) (bool, runtime.Object, error) {
			if installed.Load() {
				return false, nil, nil
			}
			lists.Add(1)
			return true, nil, apierrors.NewNotFound(InferenceObjectiveGVR.GroupResource(), "")
		})
		logs := &kubefixture.LogBuffer{}
		workers := kubefixture.NewRecorder(nil)
		pools, err := NewPoolSource(SourceConfig{Client: fake.NewClientset(kubefixture.Pod("a", "10.0.0.1")), Namespace: ns, Apply: workers.Apply,
			Logger: logs.Logger(), Debounce: 10 * time.Millisecond}, dyn, "pool")
		if err != nil {
			t.Fatal(err)
		}
		rec := kubefixture.NewObjectiveRecorder(t, nil)
		objectives, err := NewObjectiveSource(ObjectiveConfig{Namespace: ns, Pool: "pool", Apply: rec.Apply,
			Logger: logs.Logger(), Debounce: 10 * time.Millisecond}, dyn)
		if err != nil {
			t.Fatal(err)
		}
		kubefixture.Run(t, pools.Run)
		kubefixture.Run(t, objectives.Run)
		workers.Await(t, "llm/a@10.0.0.1:8000")
		kubefixture.Eventually(t, 10*time.Second, "a retried list", func() bool { return lists.Load() >= 2 })
		if n := logs.Count("the InferenceObjective API is not installed"); n != 1 {
			t.Errorf("missing API logged %d times after %d lists, want once:\n%s", n, lists.Load(), logs)
		}
		if _, calls := rec.LastAnswer(); calls != 0 {
			t.Errorf("a mapping was applied without the API")
		}
		installed.Store(true)
		rec.Await(t, policy.Objectives{"chat": sched.PriorityInteractive})
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
