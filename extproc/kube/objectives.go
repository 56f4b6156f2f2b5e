package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
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

	"github.com/tollgate/tollgate/sched/policy"
)

// InferenceObjectiveGVR is the Gateway API Inference Extension's
// InferenceObjective resource that NewObjectiveSource reads.
var InferenceObjectiveGVR = schema.GroupVersionResource{Group: "inference.networking.x-k8s.io", Version: "v1alpha2", Resource: "inferenceobjectives"}

// poolRefGroup and poolRefKind are what an InferenceObjective's
// spec.poolRef must name (they are also its defaults) to refer to the
// InferencePool tollgate follows.
const (
	poolRefGroup = "inference.networking.k8s.io"
	poolRefKind  = "InferencePool"
)

// ObjectiveConfig is what an ObjectiveSource needs.
type ObjectiveConfig struct {
	// Namespace holds the InferencePool and its InferenceObjectives.
	// Required.
	Namespace string
	// Pool is the InferencePool's name; objectives whose spec.poolRef
	// names another pool are not read. Required.
	Pool string
	// Explicit are the operator's --objective-class names. They win over
	// objects (the server merges them); the source leaves them out of what
	// it applies and logs the objects they shadow.
	Explicit policy.Objectives
	// Apply installs a complete mapping from objective name to class;
	// normally (*extproc.Server).SetObjectives. It must leave the current
	// mapping in force when it returns an error. Required.
	Apply func(policy.Objectives) error
	// Logger receives the source's logs. Nil discards them.
	Logger *slog.Logger
	// Debounce is how long to wait after a change before rebuilding.
	// 0 means DefaultDebounce.
	Debounce time.Duration
}

// ObjectiveSource keeps the server's objective classes in step with the
// InferenceObjectives (inference.networking.x-k8s.io/v1alpha2) of one
// InferencePool. An object's name is the value clients send in the
// objective header; its spec.priority gives the class by
// policy.ObjectiveClass. A cluster without the InferenceObjective API is
// reported once and the source keeps checking; the worker sources do not
// depend on it. Build one with NewObjectiveSource, then call Run once.
type ObjectiveSource struct {
	cfg  ObjectiveConfig
	log  *slog.Logger
	inf  cache.SharedIndexInformer
	kick chan struct{}

	// mu guards started and reasons.
	mu      sync.Mutex
	started bool
	// reasons are the list/watch failure reasons logged, each once.
	reasons map[metav1.StatusReason]bool

	// Owned by Run's goroutine.
	applied    policy.Objectives
	hasApplied bool
	rejected   string
	notes      map[string]string
}

// NewObjectiveSource returns a source over the InferenceObjectives of the
// pool cfg.Pool in cfg.Namespace, read through the dynamic client.
func NewObjectiveSource(cfg ObjectiveConfig, dyn dynamic.Interface) (*ObjectiveSource, error) {
	var errs []error
	if dyn == nil {
		errs = append(errs, errors.New("kube: a dynamic client is required"))
	}
	if cfg.Apply == nil {
		errs = append(errs, errors.New("kube: an apply function is required"))
	}
	if msgs := validation.IsDNS1123Label(cfg.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("kube: namespace %q: %s", cfg.Namespace, msgs[0]))
	}
	if msgs := validation.IsDNS1123Subdomain(cfg.Pool); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("kube: inference pool name %q: %s", cfg.Pool, msgs[0]))
	}
	if cfg.Debounce < 0 {
		errs = append(errs, fmt.Errorf("kube: debounce %v is negative", cfg.Debounce))
	}
	if err := cfg.Explicit.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("kube: explicit objectives: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = DefaultDebounce
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &ObjectiveSource{cfg: cfg, log: log, kick: make(chan struct{}, 1), reasons: make(map[metav1.StatusReason]bool)}
	api := dyn.Resource(InferenceObjectiveGVR).Namespace(cfg.Namespace)
	s.inf = newInformer(&unstructured.Unstructured{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return api.List(ctx, o) },
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return api.Watch(ctx, o) })
	kick := func() {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	if _, err := s.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kick() },
		UpdateFunc: func(any, any) { kick() },
		DeleteFunc: func(any) { kick() },
	}); err != nil {
		return nil, fmt.Errorf("kube: inferenceobjectives informer: %w", err)
	}
	if err := s.inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) { s.listFailed(err) }); err != nil {
		return nil, fmt.Errorf("kube: inferenceobjectives informer: %w", err)
	}
	return s, nil
}

// listFailed logs a list or watch failure once per reason: a cluster
// without the InferenceObjective API, or without the RBAC rule to read it,
// would otherwise log on every retry.
func (s *ObjectiveSource) listFailed(err error) {
	if errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return // a watch ended normally; the reflector resumes it
	}
	reason := apierrors.ReasonForError(err)
	s.mu.Lock()
	seen := s.reasons[reason]
	s.reasons[reason] = true
	s.mu.Unlock()
	if seen {
		return
	}
	const resource = "inferenceobjectives.inference.networking.x-k8s.io/v1alpha2"
	switch {
	case apierrors.IsNotFound(err):
		s.log.Warn("the InferenceObjective API is not installed: objective classes come from --objective-class only; it is checked again and read once installed",
			"resource", resource)
	case apierrors.IsForbidden(err):
		s.log.Warn("not allowed to list InferenceObjectives (the Role needs list and watch on them): objective classes come from --objective-class only; retrying",
			"resource", resource, "error", err)
	default:
		s.log.Warn("listing InferenceObjectives failed; retrying (further failures of this kind are not logged)", "resource", resource, "error", err)
	}
}

// Run starts the informer and, once its cache is complete, applies the
// mapping and then every change until ctx ends. Until then (for example
// while the API is not installed) nothing is applied and the server keeps
// the --objective-class mapping. It returns nil once ctx has ended and the
// informer has stopped, and an error only when called twice.
func (s *ObjectiveSource) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("kube: objective source Run called twice")
	}
	s.started = true
	s.mu.Unlock()

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.inf.RunWithContext(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), s.inf.HasSynced) {
		return nil // ctx ended first
	}
	s.log.Info("InferenceObjectives cache ready", "namespace", s.cfg.Namespace, "pool", s.cfg.Pool)
	select { // the cache is complete: one sync covers every earlier kick
	case <-s.kick:
	default:
	}
	s.sync()
	t := time.NewTimer(s.cfg.Debounce)
	t.Stop()
	defer t.Stop()
	armed := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
			if !armed {
				t.Reset(s.cfg.Debounce)
				armed = true
			}
		case <-t.C:
			armed = false
			s.sync()
		}
	}
}

// sync builds the mapping and applies it when it differs from the one in
// force.
func (s *ObjectiveSource) sync() {
	found, notes := s.build()
	s.report(notes)
	if s.hasApplied && maps.Equal(found, s.applied) {
		return
	}
	if err := s.cfg.Apply(found); err != nil {
		if text := err.Error(); text != s.rejected {
			s.rejected = text
			s.log.Error("objective classes rejected; keeping the current ones", "error", text)
		}
		return
	}
	added, removed, changed := diffObjectives(s.applied, found)
	s.log.Info("objective classes updated from InferenceObjectives", "objectives", len(found),
		"added", firstNames(added), "removed", firstNames(removed), "changed", firstNames(changed))
	s.applied, s.hasApplied, s.rejected = found, true, ""
}

// build reads the cache: every object whose poolRef names the pool gives
// its name a class, except names --objective-class sets and objects past
// the bound. notes say what was ignored and why.
func (s *ObjectiveSource) build() (policy.Objectives, map[string]string) {
	notes := make(map[string]string)
	found := make(policy.Objectives)
	for _, obj := range s.inf.GetStore().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GetNamespace() != s.cfg.Namespace || u.GetDeletionTimestamp() != nil {
			continue // a deleted object no longer maps, even while finalizers hold it
		}
		if ref, _, _ := unstructured.NestedString(u.Object, "spec", "poolRef", "name"); ref != s.cfg.Pool {
			continue // another pool's objective
		}
		name := u.GetName()
		subject := "InferenceObjective " + s.cfg.Namespace + "/" + name
		o, err := decodeObjective(u)
		if err != nil {
			notes[subject] = "ignored: " + err.Error()
			continue
		}
		if o.refProblem != "" {
			notes[subject] = "ignored: " + o.refProblem
			continue
		}
		if err := policy.CheckObjectiveName(name); err != nil {
			notes[subject] = "ignored: " + err.Error()
			continue
		}
		class := policy.ObjectiveClass(o.priority)
		if p, ok := s.cfg.Explicit[name]; ok {
			if p != class {
				notes[subject] = fmt.Sprintf("spec.priority %s (class %s) ignored: --objective-class maps %s to %s", o.priorityText(), class, name, p)
			}
			continue
		}
		found[name] = class
	}
	if limit := policy.MaxObjectives - len(s.cfg.Explicit); len(found) > limit {
		names := slices.Sorted(maps.Keys(found))
		dropped := names[limit:]
		for _, n := range dropped {
			delete(found, n)
		}
		first := dropped[:min(len(dropped), 5)]
		notes["InferenceObjectives of pool "+s.cfg.Namespace+"/"+s.cfg.Pool] = fmt.Sprintf(
			"%d objects past the limit of %d objective names ignored (by name order; first: %s)", len(dropped), policy.MaxObjectives, strings.Join(first, ", "))
	}
	return found, notes
}

// report logs each note that is new or changed since the last build.
func (s *ObjectiveSource) report(notes map[string]string) {
	for _, subject := range slices.Sorted(maps.Keys(notes)) {
		if msg := notes[subject]; s.notes[subject] != msg {
			s.log.Warn("InferenceObjective problem", "subject", subject, "problem", msg)
		}
	}
	for subject := range s.notes {
		if _, ok := notes[subject]; !ok {
			s.log.Info("problem resolved", "subject", subject)
		}
	}
	s.notes = notes
}

// objectiveObject is the part of an InferenceObjective that tollgate
// reads. Other fields, present or future, are ignored.
type objectiveObject struct {
	Spec struct {
		Priority *int64 `json:"priority"`
		PoolRef  struct {
			Group string `json:"group"`
			Kind  string `json:"kind"`
			Name  string `json:"name"`
		} `json:"poolRef"`
	} `json:"spec"`
}

// objective is a decoded InferenceObjective.
type objective struct {
	priority *int64
	// refProblem says why a poolRef that names the pool's name does not
	// refer to the InferencePool tollgate follows; empty when it does.
	refProblem string
}

func (o *objective) priorityText() string {
	if o.priority == nil {
		return "unset"
	}
	return strconv.FormatInt(*o.priority, 10)
}

// decodeObjective reads spec.priority and spec.poolRef.
func decodeObjective(u *unstructured.Unstructured) (*objective, error) {
	data, err := json.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	var o objectiveObject
	if err := json.Unmarshal(data, &o); err != nil {
		return nil, fmt.Errorf("decode (spec.priority must be an integer): %w", err)
	}
	r := o.Spec.PoolRef
	obj := &objective{priority: o.Spec.Priority}
	if g := cmpOr(r.Group, poolRefGroup); g != poolRefGroup {
		obj.refProblem = fmt.Sprintf("spec.poolRef.group is %q, not %s (the InferencePool API tollgate follows)", g, poolRefGroup)
	}
	if k := cmpOr(r.Kind, poolRefKind); k != poolRefKind {
		obj.refProblem = fmt.Sprintf("spec.poolRef.kind is %q, not %s", k, poolRefKind)
	}
	return obj, nil
}

// diffObjectives names the objectives added, removed and changed from old
// to cur.
func diffObjectives(old, cur policy.Objectives) (added, removed, changed []string) {
	for _, n := range slices.Sorted(maps.Keys(cur)) {
		p, ok := old[n]
		switch {
		case !ok:
			added = append(added, n+"="+cur[n].String())
		case p != cur[n]:
			changed = append(changed, n+"="+cur[n].String())
		}
	}
	for _, n := range slices.Sorted(maps.Keys(old)) {
		if _, ok := cur[n]; !ok {
			removed = append(removed, n)
		}
	}
	return added, removed, changed
}

// maxLoggedNames bounds the names one log line lists.
const maxLoggedNames = 20

// firstNames returns names, cut to maxLoggedNames with a count of the rest.
func firstNames(names []string) []string {
	if len(names) <= maxLoggedNames {
		return names
	}
	return append(names[:maxLoggedNames:maxLoggedNames], fmt.Sprintf("(%d more)", len(names)-maxLoggedNames))
}
