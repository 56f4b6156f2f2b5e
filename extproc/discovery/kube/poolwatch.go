package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/tollgate/tollgate/extproc/intake"
)

// watchConfig says what a poolWatch follows and how it turns the objects
// into a value of type T that it applies.
type watchConfig[T any] struct {
	gvr schema.GroupVersionResource
	// kind names the resource in logs, as in "InferenceObjective".
	kind string
	// source names the owner in the Run-twice error, as in "objective source".
	source string
	// what is what is applied and flag the option it falls back to, as in
	// "objective classes" and "--objective-class".
	what, flag string

	namespace, pool string
	debounce        time.Duration
	log             *slog.Logger

	// build turns the pool's live objects into the value to apply.
	build func([]*unstructured.Unstructured) built[T]
	// equal reports whether two built values are the same.
	equal func(a, b T) bool
	// apply installs a value and answers how the server merged it under
	// the operator's flags; on error the one in force stays.
	apply func(T) (intake.Merge, error)
	// updated logs a value applied in place of old.
	updated func(log *slog.Logger, old, cur T)
}

// built is one build of a pool watch's value from the pool's objects.
type built[T any] struct {
	value T
	// notes map a subject (an object, or the pool's objects as a whole)
	// to a problem: what of it was ignored and why.
	notes map[string]string
	// explain turns the server's answer to value into notes on the
	// objects concerned: what a flag shadows and what the name budget
	// left out. Nil: no notes.
	explain func(intake.Merge) map[string]string
}

// checkWatchConfig reports the problems with the settings every pool
// watch needs.
func checkWatchConfig(dyn dynamic.Interface, hasApply bool, namespace, pool string, debounce time.Duration) []error {
	var errs []error
	if dyn == nil {
		errs = append(errs, errors.New("kube: a dynamic client is required"))
	}
	if !hasApply {
		errs = append(errs, errors.New("kube: an apply function is required"))
	}
	if msgs := validation.IsDNS1123Label(namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("kube: namespace %q: %s", namespace, msgs[0]))
	}
	if msgs := validation.IsDNS1123Subdomain(pool); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("kube: inference pool name %q: %s", pool, msgs[0]))
	}
	if debounce < 0 {
		errs = append(errs, fmt.Errorf("kube: debounce %v is negative", debounce))
	}
	return errs
}

// poolWatch keeps one value in step with the objects of one namespaced
// resource whose spec.poolRef.name names the pool: it runs a dynamic
// informer in the pool's namespace, rebuilds debounce after each change,
// applies what differs from the value in force and logs each problem once.
type poolWatch[T any] struct {
	watchConfig[T]
	inf  cache.SharedIndexInformer
	kick chan struct{}

	// mu guards started and reasons.
	mu      sync.Mutex
	started bool
	// reasons are the list/watch failure reasons logged, each once.
	reasons map[metav1.StatusReason]bool

	// Owned by run's goroutine.
	applied    T
	hasApplied bool
	// answer is the server's answer to applied.
	answer   intake.Merge
	rejected string
	// notes are the problems logged by the last sync.
	notes map[string]string
}

// newPoolWatch sets up the informer of a checked config; a zero debounce
// means DefaultDebounce and a nil logger discards.
func newPoolWatch[T any](cfg watchConfig[T], dyn dynamic.Interface) (*poolWatch[T], error) {
	if cfg.debounce == 0 {
		cfg.debounce = DefaultDebounce
	}
	if cfg.log == nil {
		cfg.log = slog.New(slog.DiscardHandler)
	}
	w := &poolWatch[T]{watchConfig: cfg, kick: make(chan struct{}, 1), reasons: make(map[metav1.StatusReason]bool)}
	api := dyn.Resource(cfg.gvr).Namespace(cfg.namespace)
	w.inf = newInformer(&unstructured.Unstructured{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return api.List(ctx, o) },
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return api.Watch(ctx, o) })
	kick := func() {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	if _, err := w.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kick() },
		UpdateFunc: func(any, any) { kick() },
		DeleteFunc: func(any) { kick() },
	}); err != nil {
		return nil, fmt.Errorf("kube: %s informer: %w", cfg.gvr.Resource, err)
	}
	if err := w.inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) { w.listFailed(err) }); err != nil {
		return nil, fmt.Errorf("kube: %s informer: %w", cfg.gvr.Resource, err)
	}
	return w, nil
}

// listFailed logs a list or watch failure once per reason: a cluster
// without the API, or without the RBAC rule to read it, would otherwise
// log on every retry.
func (w *poolWatch[T]) listFailed(err error) {
	if errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return // a watch ended normally; the reflector resumes it
	}
	reason := apierrors.ReasonForError(err)
	w.mu.Lock()
	seen := w.reasons[reason]
	w.reasons[reason] = true
	w.mu.Unlock()
	if seen {
		return
	}
	resource := w.gvr.Resource + "." + w.gvr.Group + "/" + w.gvr.Version
	switch {
	case apierrors.IsNotFound(err):
		w.log.Warn(fmt.Sprintf("the %s API is not installed: %s come from %s only; it is checked again and read once installed", w.kind, w.what, w.flag),
			"resource", resource)
	case apierrors.IsForbidden(err):
		w.log.Warn(fmt.Sprintf("not allowed to list %ss (the Role needs list and watch on them): %s come from %s only; retrying", w.kind, w.what, w.flag),
			"resource", resource, "error", err)
	default:
		w.log.Warn(fmt.Sprintf("listing %ss failed; retrying (further failures of this kind are not logged)", w.kind), "resource", resource, "error", err)
	}
}

// run starts the informer and, once its cache is complete, applies the
// value and then every change until ctx ends. It returns nil once ctx has
// ended and the informer has stopped, and an error only when called twice.
func (w *poolWatch[T]) run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return fmt.Errorf("kube: %s Run called twice", w.source)
	}
	w.started = true
	w.mu.Unlock()

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { w.inf.RunWithContext(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), w.inf.HasSynced) {
		return nil // ctx ended first
	}
	w.log.Info(w.kind+"s cache ready", "namespace", w.namespace, "pool", w.pool)
	debounced(ctx, w.kick, w.debounce, w.sync)
	return nil
}

// sync builds the value and applies it when it differs from the one in
// force, then logs the problems of the build and of the server's answer.
// While the value stays the same the last answer stands: it is explained
// again for the objects as they are now, so its notes neither repeat nor
// read as resolved. A rejected value leaves the last answer too, since the
// value it answered stays in force.
func (w *poolWatch[T]) sync() {
	b := w.build(w.objects())
	changed := !w.hasApplied || !w.equal(b.value, w.applied)
	var err error
	if changed {
		var m intake.Merge
		if m, err = w.apply(b.value); err == nil {
			w.answer = m
		}
	}
	notes := b.notes
	if b.explain != nil {
		notes = joinNotes(notes, b.explain(w.answer))
	}
	w.report(notes)
	switch {
	case !changed:
	case err != nil:
		if text := err.Error(); text != w.rejected {
			w.rejected = text
			w.log.Error(w.what+" rejected; keeping the current ones", "error", text)
		}
	default:
		w.updated(w.log, w.applied, b.value)
		w.applied, w.hasApplied, w.rejected = b.value, true, ""
	}
}

// joinNotes returns the notes of a and b, joined by "; " where both hold
// a subject.
func joinNotes(a, b map[string]string) map[string]string {
	if len(b) == 0 {
		return a
	}
	out := make(map[string]string, len(a)+len(b))
	maps.Copy(out, a)
	for subject, msg := range b {
		if prev, ok := out[subject]; ok {
			msg = prev + "; " + msg
		}
		out[subject] = msg
	}
	return out
}

// pastLimit summarizes the names past a name budget for a note: how many,
// and the first five in name order. a and b are the names left out by the
// source's own bound and by the server's merge.
func pastLimit(a, b []string) (n int, first string) {
	names := slices.Compact(slices.Sorted(slices.Values(slices.Concat(a, b))))
	return len(names), strings.Join(names[:min(len(names), 5)], ", ")
}

// objects returns the cached objects of the pool's namespace whose
// spec.poolRef.name names the pool, leaving out deleted ones (even while
// finalizers hold them).
func (w *poolWatch[T]) objects() []*unstructured.Unstructured {
	var objs []*unstructured.Unstructured
	for _, obj := range w.inf.GetStore().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GetNamespace() != w.namespace || u.GetDeletionTimestamp() != nil {
			continue
		}
		if ref, _, _ := unstructured.NestedString(u.Object, "spec", "poolRef", "name"); ref != w.pool {
			continue // another pool's object
		}
		objs = append(objs, u)
	}
	return objs
}

// report logs each note that is new or changed since the last build.
func (w *poolWatch[T]) report(notes map[string]string) {
	for _, subject := range slices.Sorted(maps.Keys(notes)) {
		if msg := notes[subject]; w.notes[subject] != msg {
			w.log.Warn(w.kind+" problem", "subject", subject, "problem", msg)
		}
	}
	for subject := range w.notes {
		if _, ok := notes[subject]; !ok {
			w.log.Info("problem resolved", "subject", subject)
		}
	}
	w.notes = notes
}
