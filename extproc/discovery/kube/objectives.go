package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/tollgate/tollgate/extproc/intake"
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
	// Apply installs the complete mapping found, from objective name to
	// class; normally (*extproc.Server).SetObjectives. It owns the merge
	// with the operator's --objective-class names, which win, and the
	// budget of policy.MaxObjectives names they share; its answer says
	// which objects a flag shadows and which names the budget left out,
	// and the source logs both on the objects concerned. It must leave the
	// current mapping in force when it returns an error. Required.
	Apply func(policy.Objectives) (intake.Merge, error)
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
	cfg ObjectiveConfig
	w   *poolWatch[policy.Objectives]
}

// NewObjectiveSource returns a source over the InferenceObjectives of the
// pool cfg.Pool in cfg.Namespace, read through the dynamic client.
func NewObjectiveSource(cfg ObjectiveConfig, dyn dynamic.Interface) (*ObjectiveSource, error) {
	errs := checkWatchConfig(dyn, cfg.Apply != nil, cfg.Namespace, cfg.Pool, cfg.Debounce)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s := &ObjectiveSource{cfg: cfg}
	w, err := newPoolWatch(watchConfig[policy.Objectives]{
		gvr: InferenceObjectiveGVR, kind: "InferenceObjective", source: "objective source",
		what: "objective classes", flag: "--objective-class",
		namespace: cfg.Namespace, pool: cfg.Pool, debounce: cfg.Debounce, log: cfg.Logger,
		build: s.build,
		equal: func(a, b policy.Objectives) bool { return maps.Equal(a, b) },
		apply: cfg.Apply,
		updated: func(log *slog.Logger, old, cur policy.Objectives) {
			added, removed, changed := diffObjectives(old, cur)
			log.Info("objective classes updated from InferenceObjectives", "objectives", len(cur),
				"added", firstNames(added), "removed", firstNames(removed), "changed", firstNames(changed))
		},
	}, dyn)
	if err != nil {
		return nil, err
	}
	s.w = w
	return s, nil
}

// Run starts the informer and, once its cache is complete, applies the
// mapping and then every change until ctx ends. Until then (for example
// while the API is not installed) nothing is applied and the server keeps
// the --objective-class mapping. It returns nil once ctx has ended and the
// informer has stopped, and an error only when called twice.
func (s *ObjectiveSource) Run(ctx context.Context) error { return s.w.run(ctx) }

// build maps the pool's objects: each gives its name a class, up to the
// first policy.MaxObjectives names in name order, which bound what the
// source holds. Names --objective-class also sets are reported all the
// same: the server's merge decides, and its answer is explained on the
// objects. notes say what was ignored and why.
func (s *ObjectiveSource) build(objs []*unstructured.Unstructured) built[policy.Objectives] {
	notes := make(map[string]string)
	found := make(policy.Objectives)
	priority := make(map[string]string) // name -> spec.priority as written
	for _, u := range objs {
		name := u.GetName()
		subject := s.subject(name)
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
		found[name], priority[name] = policy.ObjectiveClass(o.priority), o.priorityText()
	}
	var unheld []string // names past the source's own bound
	if len(found) > policy.MaxObjectives {
		unheld = slices.Sorted(maps.Keys(found))[policy.MaxObjectives:]
		for _, n := range unheld {
			delete(found, n)
		}
	}
	explain := func(m intake.Merge) map[string]string {
		notes := make(map[string]string)
		for name, flag := range m.Shadowed {
			if class, ok := found[name]; ok {
				notes[s.subject(name)] = fmt.Sprintf("spec.priority %s (class %s) ignored: %s", priority[name], class, flag)
			}
		}
		if n, first := pastLimit(unheld, m.Dropped); n > 0 {
			notes["InferenceObjectives of pool "+s.cfg.Namespace+"/"+s.cfg.Pool] = fmt.Sprintf(
				"%d objects past the limit of %d objective names ignored (by name order; first: %s)", n, policy.MaxObjectives, first)
		}
		return notes
	}
	return built[policy.Objectives]{value: found, notes: notes, explain: explain}
}

// subject names the InferenceObjective name in notes.
func (s *ObjectiveSource) subject(name string) string {
	return "InferenceObjective " + s.cfg.Namespace + "/" + name
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
