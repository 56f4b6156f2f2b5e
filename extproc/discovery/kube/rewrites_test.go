package kube

import (
	"context"
	"fmt"
	"maps"
	"slices"
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
	k8stesting "k8s.io/client-go/testing"

	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/test/kubefixture"
)

// rule is one spec.rules entry: the exact model names it matches (none:
// every model) and its targets as "name" or "name*weight".
type rule struct {
	matches []string
	targets []string
}

// inferenceModelRewrite returns an InferenceModelRewrite of pool created
// at created (seconds after a fixed time).
func inferenceModelRewrite(name, pool string, created int, rules ...rule) *unstructured.Unstructured {
	var rs []any
	for _, r := range rules {
		var ms, ts []any
		for _, m := range r.matches {
			ms = append(ms, map[string]any{"model": map[string]any{"type": "Exact", "value": m}})
		}
		for _, t := range r.targets {
			n, w, ok := strings.Cut(t, "*")
			target := map[string]any{"modelRewrite": n}
			if ok {
				var weight int64
				_, _ = fmt.Sscan(w, &weight)
				target["weight"] = weight
			}
			ts = append(ts, target)
		}
		entry := map[string]any{"targets": ts}
		if ms != nil {
			entry["matches"] = ms
		}
		rs = append(rs, entry)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.x-k8s.io/v1alpha2",
		"kind":       "InferenceModelRewrite",
		"metadata": map[string]any{"name": name, "namespace": ns,
			"creationTimestamp": time.Date(2026, 1, 1, 0, 0, created, 0, time.UTC).Format(time.RFC3339)},
		"spec": map[string]any{"poolRef": map[string]any{"group": poolRefGroup, "name": pool}, "rules": rs},
	}}
}

// rewriteRecorder is a RewriteConfig.Apply that merges what the source
// found as the server does, through a real intake.RewriteTable over the
// flags, and keeps what it was given and what it answered.
type rewriteRecorder struct {
	table *intake.RewriteTable

	mu      sync.Mutex
	last    intake.ModelRewriteRules
	answer  intake.Merge
	calls   int
	changed chan struct{}
}

func newRewriteRecorder(t *testing.T, flags map[string][]intake.RewriteTarget) *rewriteRecorder {
	t.Helper()
	table, err := intake.NewRewriteTable(flags)
	if err != nil {
		t.Fatal(err)
	}
	return &rewriteRecorder{table: table, changed: make(chan struct{})}
}

func (r *rewriteRecorder) apply(rules intake.ModelRewriteRules) (intake.Merge, error) {
	m, err := r.table.Set(rules)
	if err != nil {
		return m, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last, r.answer, r.calls = rules, m, r.calls+1
	close(r.changed)
	r.changed = make(chan struct{})
	return m, nil
}

// lastAnswer returns the last answer to an apply and how many there were.
func (r *rewriteRecorder) lastAnswer() (intake.Merge, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.answer, r.calls
}

// await waits until the last rules found, written as "model=target*w,..." (and
// "*=..." for the rule of every other model), equal want.
func (r *rewriteRecorder) await(t *testing.T, want ...string) {
	t.Helper()
	slices.Sort(want)
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ch, got, calls := r.changed, rulesText(r.last), r.calls
		r.mu.Unlock()
		if calls > 0 && slices.Equal(got, want) {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("rewrite rules are %q (%d applies), want %q", got, calls, want)
		}
	}
}

func rulesText(r intake.ModelRewriteRules) []string {
	text := func(from string, ts []intake.RewriteTarget) string {
		var parts []string
		for _, t := range ts {
			parts = append(parts, fmt.Sprintf("%s*%d", t.Model, t.Weight))
		}
		return from + "=" + strings.Join(parts, ",")
	}
	var out []string
	for _, from := range slices.Sorted(maps.Keys(r.Exact)) {
		out = append(out, text(from, r.Exact[from]))
	}
	if r.Other != nil {
		out = append(out, text("*", r.Other))
	}
	slices.Sort(out)
	return out
}

// The rules follow the objects through create, update and delete, with the
// API's precedence (GIE pkg/epp/datastore/modelrewritestore.go at
// 1748e829): exact before a rule without matches, the oldest object first,
// the first rule of an object first. The flag table wins in the merge,
// and what it shadows is logged on the rule.
func TestRewriteSource_FollowsObjects(t *testing.T) {
	xgroup := inferenceModelRewrite("legacy", "pool", 0, rule{[]string{"legacy"}, []string{"x"}})
	xgroup.Object["spec"].(map[string]any)["poolRef"].(map[string]any)["group"] = "inference.networking.x-k8s.io"
	leaving := inferenceModelRewrite("leaving", "pool", 0, rule{[]string{"leaving"}, []string{"x"}})
	leaving.SetDeletionTimestamp(&now)
	dyn := kubefixture.NewDynamic(
		inferenceModelRewrite("canary", "pool", 10,
			rule{[]string{"chat", "chat-latest"}, []string{"chat-v2*90", "chat-v1*10"}},
			rule{[]string{"chat"}, []string{"never"}}, // the object's first rule wins
			rule{[]string{"pinned"}, []string{"from-object"}}),
		inferenceModelRewrite("older", "pool", 5, rule{[]string{"chat-latest"}, []string{"chat-v3"}}),
		inferenceModelRewrite("fallback", "pool", 20, rule{nil, []string{"default-a", "default-b"}}),
		inferenceModelRewrite("later-fallback", "pool", 30, rule{nil, []string{"other"}}),
		inferenceModelRewrite("mixed", "pool", 40, rule{[]string{"mixed"}, []string{"a*3", "b"}}),
		inferenceModelRewrite("empty", "pool", 50, rule{[]string{"empty"}, nil}),
		inferenceModelRewrite("elsewhere", "other-pool", 0, rule{[]string{"chat"}, []string{"x"}}),
		xgroup, leaving,
	)
	rec, logs := newRewriteRecorder(t, map[string][]intake.RewriteTarget{"pinned": {{Model: "from-flag", Weight: 1}}}), &kubefixture.LogBuffer{}
	src, err := NewRewriteSource(RewriteConfig{
		Namespace: ns, Pool: "pool", Apply: rec.apply, Logger: logs.Logger(), Debounce: 10 * time.Millisecond,
	}, dyn)
	if err != nil {
		t.Fatal(err)
	}
	stop := kubefixture.Run(t, src.Run)

	// Unset weights split evenly; a target without a weight next to
	// weighted ones gets nothing, as in the peer's picker. The source
	// reports the flag's name too; the merge keeps the flag's rule.
	rec.await(t, "chat=chat-v2*90,chat-v1*10", "chat-latest=chat-v3*1", "mixed=a*3", "pinned=from-object*1", "*=default-a*1,default-b*1")
	if m, _ := rec.lastAnswer(); !maps.Equal(m.Shadowed, map[string]string{"pinned": "--model-rewrite rewrites pinned to from-flag*1"}) || m.Total != 4 || m.FromFlags != 1 {
		t.Errorf("answer %+v, want pinned shadowed, 4 names of which 1 from the flags", m)
	}
	if flags, objects, other := rec.table.Counts(); flags != 1 || objects != 3 || !other {
		t.Errorf("in force: %d names from the flags, %d from objects, other %v; want 1, 3, true", flags, objects, other)
	}
	for _, want := range []string{
		`InferenceModelRewrite llm/legacy" problem="ignored: spec.poolRef.group is \"inference.networking.x-k8s.io\"`,
		`InferenceModelRewrite llm/canary" problem="rule 0 for \"chat-latest\" shadowed by older rule 0; rule 1 for \"chat\" shadowed by canary rule 0; rule 2 for \"pinned\" ignored: --model-rewrite rewrites pinned to from-flag*1"`,
		`InferenceModelRewrite llm/later-fallback" problem="rule 0 (no matches) shadowed by fallback rule 0"`,
		`InferenceModelRewrite llm/mixed" problem="rule 0: 1 targets without a weight next to weighted ones receive no requests`,
		`InferenceModelRewrite llm/empty" problem="rule 0 ignored: no targets"`,
	} {
		logs.Await(t, want)
	}
	if strings.Contains(logs.String(), "elsewhere") || strings.Contains(logs.String(), "leaving") {
		t.Errorf("another pool's or a deleted object was logged:\n%s", logs)
	}

	// Update, create and delete through the watch.
	api := dyn.Resource(InferenceModelRewriteGVR).Namespace(ns)
	ctx := context.Background()
	if _, err := api.Update(ctx, inferenceModelRewrite("canary", "pool", 10,
		rule{[]string{"chat"}, []string{"chat-v2*1", "chat-v1*1"}}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Create(ctx, inferenceModelRewrite("alias", "pool", 60, rule{[]string{"alias"}, []string{"llama"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := api.Delete(ctx, "fallback", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.await(t, "chat=chat-v2*1,chat-v1*1", "chat-latest=chat-v3*1", "mixed=a*3", "alias=llama*1", "*=other*1")

	// Objects moved to another pool or deleted leave the table.
	if _, err := api.Update(ctx, inferenceModelRewrite("older", "other-pool", 5, rule{[]string{"chat-latest"}, []string{"chat-v3"}}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"later-fallback", "mixed"} {
		if err := api.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rec.await(t, "chat=chat-v2*1,chat-v1*1", "alias=llama*1")
	stop() // the update is logged after it is applied
	if n := logs.Count("model rewrites updated"); n < 3 {
		t.Errorf("%d updates logged, want at least 3:\n%s", n, logs)
	}
}

// The names past the budget are left out by name order and logged in one
// note on the pool, whether the source's own bound or the server's merge,
// which counts the flags' names in the budget, left them out.
func TestRewriteSource_BoundsTheNames(t *testing.T) {
	tests := []struct {
		name  string
		names int
		flags []string
		// held is how many names the merge keeps; note is the pool's.
		held int
		note string
	}{
		{name: "the source's bound", names: intake.MaxModelRewrites + 3, held: intake.MaxModelRewrites,
			note: "3 model names past the limit of 1024 rewrites ignored (by name order; first: m-1024, m-1025, m-1026)"},
		{name: "the merge's budget", names: intake.MaxModelRewrites, flags: []string{"flag-a", "flag-b"}, held: intake.MaxModelRewrites - 2,
			note: "2 model names past the limit of 1024 rewrites ignored (by name order; first: m-1022, m-1023)"},
		{name: "both", names: intake.MaxModelRewrites + 3, flags: []string{"flag"}, held: intake.MaxModelRewrites - 1,
			note: "4 model names past the limit of 1024 rewrites ignored (by name order; first: m-1023, m-1024, m-1025, m-1026)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var names []string
			for i := range tt.names {
				names = append(names, fmt.Sprintf("m-%04d", i))
			}
			flags := map[string][]intake.RewriteTarget{}
			for _, f := range tt.flags {
				flags[f] = []intake.RewriteTarget{{Model: "x", Weight: 1}}
			}
			rec, logs := newRewriteRecorder(t, flags), &kubefixture.LogBuffer{}
			src, err := NewRewriteSource(RewriteConfig{
				Namespace: ns, Pool: "pool", Apply: rec.apply, Logger: logs.Logger(), Debounce: 10 * time.Millisecond,
			}, kubefixture.NewDynamic(inferenceModelRewrite("many", "pool", 0, rule{names, []string{"t"}})))
			if err != nil {
				t.Fatal(err)
			}
			stop := kubefixture.Run(t, src.Run)
			var want []string
			for _, n := range names[:min(len(names), intake.MaxModelRewrites)] { // what the source holds
				want = append(want, n+"=t*1")
			}
			rec.await(t, want...)
			stop() // the note is logged after the apply returns
			if fromFlags, objects, _ := rec.table.Counts(); fromFlags != len(tt.flags) || objects != tt.held {
				t.Errorf("in force: %d names from the flags and %d from objects, want %d and %d", fromFlags, objects, len(tt.flags), tt.held)
			}
			if n := logs.Count(tt.note); n != 1 {
				t.Errorf("the bound is logged %d times, want once (%q):\n%s", n, tt.note, logs)
			}
		})
	}
}

// A cluster without the InferenceModelRewrite API: the missing API is
// logged once however often the list is retried, nothing is applied, and
// once the API appears its objects are read.
func TestRewriteSource_MissingAPI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dyn := kubefixture.NewDynamic(inferenceModelRewrite("alias", "pool", 0, rule{[]string{"alias"}, []string{"llama"}}))
		var installed atomic.Bool
		var lists atomic.Int32
		dyn.PrependReactor("list", "inferencemodelrewrites", func(k8stesting.Action) (bool, runtime.Object, error) {
			if installed.Load() {
				return false, nil, nil
			}
			lists.Add(1)
			return true, nil, apierrors.NewNotFound(InferenceModelRewriteGVR.GroupResource(), "")
		})
		logs, rec := &kubefixture.LogBuffer{}, newRewriteRecorder(t, nil)
		src, err := NewRewriteSource(RewriteConfig{Namespace: ns, Pool: "pool", Apply: rec.apply,
			Logger: logs.Logger(), Debounce: 10 * time.Millisecond}, dyn)
		if err != nil {
			t.Fatal(err)
		}
		kubefixture.Run(t, src.Run)
		kubefixture.Eventually(t, 10*time.Second, "a retried list", func() bool { return lists.Load() >= 2 })
		if n := logs.Count("the InferenceModelRewrite API is not installed"); n != 1 {
			t.Errorf("missing API logged %d times after %d lists, want once:\n%s", n, lists.Load(), logs)
		}
		if _, calls := rec.lastAnswer(); calls != 0 {
			t.Errorf("rules were applied without the API")
		}
		installed.Store(true)
		rec.await(t, "alias=llama*1")
	})
}

func TestNewRewriteSource_ReportsEveryProblem(t *testing.T) {
	_, err := NewRewriteSource(RewriteConfig{Namespace: "Bad", Pool: "Bad_Pool", Debounce: -1}, nil)
	for _, want := range []string{"dynamic client", "apply function", "namespace", "inference pool name", "debounce"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}
