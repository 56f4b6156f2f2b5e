package kube

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/extproc/request/openai"
)

// InferenceModelRewriteGVR is the Gateway API Inference Extension's
// InferenceModelRewrite resource that NewRewriteSource reads.
var InferenceModelRewriteGVR = schema.GroupVersionResource{Group: "inference.networking.x-k8s.io", Version: "v1alpha2", Resource: "inferencemodelrewrites"}

// RewriteConfig is what a RewriteSource needs.
type RewriteConfig struct {
	// Namespace holds the InferencePool and its InferenceModelRewrites.
	// Required.
	Namespace string
	// Pool is the InferencePool's name; rewrites whose spec.poolRef names
	// another pool are not read. Required.
	Pool string
	// Apply installs the complete rules found; normally
	// (*extproc.Server).SetModelRewrites. It owns the merge with the
	// operator's --model-rewrite table, which wins, and the budget of
	// intake.MaxModelRewrites names they share; its answer says which
	// rules a flag shadows and which names the budget left out, and the
	// source logs both on the objects concerned. It must leave the current
	// table in force when it returns an error. Required.
	Apply func(intake.ModelRewriteRules) (intake.Merge, error)
	// Logger receives the source's logs. Nil discards them.
	Logger *slog.Logger
	// Debounce is how long to wait after a change before rebuilding.
	// 0 means DefaultDebounce.
	Debounce time.Duration
}

// RewriteSource keeps the server's model rewrite table in step with the
// InferenceModelRewrites (inference.networking.x-k8s.io/v1alpha2) of one
// InferencePool. Each rule's spec.rules[].matches[].model.value (type
// Exact) names a requested model; spec.rules[].targets[] (modelRewrite,
// weight) are the models it is served as, split by weight. A rule without
// matches serves every model no exact rule names. Precedence is the API's:
// an exact match before a rule without matches, then the oldest object
// (creation time, then name), then the first rule of an object. A cluster
// without the API is reported once and the source keeps checking. Build
// one with NewRewriteSource, then call Run once.
type RewriteSource struct {
	cfg RewriteConfig
	w   *poolWatch[intake.ModelRewriteRules]
}

// NewRewriteSource returns a source over the InferenceModelRewrites of the
// pool cfg.Pool in cfg.Namespace, read through the dynamic client.
func NewRewriteSource(cfg RewriteConfig, dyn dynamic.Interface) (*RewriteSource, error) {
	errs := checkWatchConfig(dyn, cfg.Apply != nil, cfg.Namespace, cfg.Pool, cfg.Debounce)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s := &RewriteSource{cfg: cfg}
	w, err := newPoolWatch(watchConfig[intake.ModelRewriteRules]{
		gvr: InferenceModelRewriteGVR, kind: "InferenceModelRewrite", source: "rewrite source",
		what: "model rewrites", flag: "--model-rewrite",
		namespace: cfg.Namespace, pool: cfg.Pool, debounce: cfg.Debounce, log: cfg.Logger,
		build: s.build,
		equal: sameRules,
		apply: cfg.Apply,
		updated: func(log *slog.Logger, _, cur intake.ModelRewriteRules) {
			log.Info("model rewrites updated from InferenceModelRewrites", "models", len(cur.Exact),
				"first", firstNames(slices.Sorted(maps.Keys(cur.Exact))), "other_models_rewritten", cur.Other != nil)
		},
	}, dyn)
	if err != nil {
		return nil, err
	}
	s.w = w
	return s, nil
}

// Run starts the informer and, once its cache is complete, applies the
// rules and then every change until ctx ends. Until then (for example
// while the API is not installed) nothing is applied and the server keeps
// the --model-rewrite table. It returns nil once ctx has ended and the
// informer has stopped, and an error only when called twice.
func (s *RewriteSource) Run(ctx context.Context) error { return s.w.run(ctx) }

func sameRules(a, b intake.ModelRewriteRules) bool {
	return slices.Equal(a.Other, b.Other) && (a.Other == nil) == (b.Other == nil) &&
		maps.EqualFunc(a.Exact, b.Exact, slices.Equal)
}

// ruleRef names the rule that rewrites a model name: its object and its
// index in spec.rules.
type ruleRef struct {
	object string
	index  int
}

func (r ruleRef) String() string { return fmt.Sprintf("%s rule %d", r.object, r.index) }

// build resolves the rules of the pool's objects by precedence, up to the
// first intake.MaxModelRewrites model names in name order, which bound
// what the source holds. Names --model-rewrite also sets are reported all
// the same: the server's merge decides, and its answer is explained on the
// rules. notes say what was ignored and why.
func (s *RewriteSource) build(objs []*unstructured.Unstructured) built[intake.ModelRewriteRules] {
	notes := make(map[string]string)
	// The oldest object first; the name breaks ties of the same second.
	slices.SortFunc(objs, func(a, b *unstructured.Unstructured) int {
		if c := a.GetCreationTimestamp().Compare(b.GetCreationTimestamp().Time); c != 0 {
			return c
		}
		return cmp.Compare(a.GetName(), b.GetName())
	})
	found := intake.ModelRewriteRules{Exact: make(map[string][]intake.RewriteTarget)}
	source := make(map[string]ruleRef) // model name -> the rule that rewrites it
	otherFrom := ""
	for _, u := range objs {
		subject := s.subject(u.GetName())
		r, err := decodeRewrite(u)
		if err != nil {
			notes[subject] = "ignored: " + err.Error()
			continue
		}
		if r.refProblem != "" {
			notes[subject] = "ignored: " + r.refProblem
			continue
		}
		var problems []string
		for i, rule := range r.Spec.Rules {
			where := ruleRef{object: u.GetName(), index: i}
			targets, problem := rewriteTargets(rule.Targets)
			if targets == nil {
				problems = append(problems, fmt.Sprintf("rule %d ignored: %s", i, problem))
				continue
			}
			if problem != "" {
				problems = append(problems, fmt.Sprintf("rule %d: %s", i, problem))
			}
			if len(rule.Matches) == 0 {
				if found.Other != nil {
					problems = append(problems, fmt.Sprintf("rule %d (no matches) shadowed by %s", i, otherFrom))
					continue
				}
				found.Other, otherFrom = targets, where.String()
				continue
			}
			for j, m := range rule.Matches {
				name := m.Model.Value
				prev, taken := source[name]
				switch {
				case m.Model.Type != "" && m.Model.Type != "Exact":
					problems = append(problems, fmt.Sprintf("rule %d match %d ignored: type %q (only Exact is supported)", i, j, m.Model.Type))
				case name == "" || len(name) > openai.MaxModelNameBytes:
					problems = append(problems, fmt.Sprintf("rule %d match %d ignored: model name of %d bytes (want 1 to %d)", i, j, len(name), openai.MaxModelNameBytes))
				case taken:
					if prev != where {
						problems = append(problems, fmt.Sprintf("rule %d for %q shadowed by %s", i, name, prev))
					}
				default:
					found.Exact[name], source[name] = targets, where
				}
			}
		}
		if len(problems) > 0 {
			notes[subject] = strings.Join(problems, "; ")
		}
	}
	var unheld []string // names past the source's own bound
	if len(found.Exact) > intake.MaxModelRewrites {
		unheld = slices.Sorted(maps.Keys(found.Exact))[intake.MaxModelRewrites:]
		for _, n := range unheld {
			delete(found.Exact, n)
		}
	}
	explain := func(m intake.Merge) map[string]string {
		notes := make(map[string]string)
		shadowed := make(map[string][]string) // subject -> notes, in rule then name order
		for _, name := range slices.SortedFunc(maps.Keys(m.Shadowed), func(a, b string) int {
			return cmp.Or(cmp.Compare(source[a].index, source[b].index), cmp.Compare(a, b))
		}) {
			if _, ok := found.Exact[name]; !ok {
				continue
			}
			ref := source[name]
			subject := s.subject(ref.object)
			shadowed[subject] = append(shadowed[subject], fmt.Sprintf("rule %d for %q ignored: %s", ref.index, name, m.Shadowed[name]))
		}
		for subject, msgs := range shadowed {
			notes[subject] = strings.Join(msgs, "; ")
		}
		if n, first := pastLimit(unheld, m.Dropped); n > 0 {
			notes["InferenceModelRewrites of pool "+s.cfg.Namespace+"/"+s.cfg.Pool] = fmt.Sprintf(
				"%d model names past the limit of %d rewrites ignored (by name order; first: %s)", n, intake.MaxModelRewrites, first)
		}
		return notes
	}
	return built[intake.ModelRewriteRules]{value: found, notes: notes, explain: explain}
}

// subject names the InferenceModelRewrite name in notes.
func (s *RewriteSource) subject(name string) string {
	return "InferenceModelRewrite " + s.cfg.Namespace + "/" + name
}

// rewriteTargets turns a rule's targets into weighted targets, or returns
// nil and why the rule cannot be used. As the API says, weights are set
// on every target or on none (then they split evenly); a target without a
// weight next to weighted ones never receives requests, as in the peer's
// picker, and the second result says so.
func rewriteTargets(ts []rewriteTarget) ([]intake.RewriteTarget, string) {
	if len(ts) == 0 {
		return nil, "no targets"
	}
	if len(ts) > intake.MaxRewriteTargets {
		return nil, fmt.Sprintf("%d targets exceed %d", len(ts), intake.MaxRewriteTargets)
	}
	weighted := slices.ContainsFunc(ts, func(t rewriteTarget) bool { return t.Weight != 0 })
	var out []intake.RewriteTarget
	unweighted := 0
	for _, t := range ts {
		if t.ModelRewrite == "" || len(t.ModelRewrite) > openai.MaxModelNameBytes {
			return nil, fmt.Sprintf("target model name of %d bytes (want 1 to %d)", len(t.ModelRewrite), openai.MaxModelNameBytes)
		}
		w := t.Weight
		switch {
		case !weighted:
			w = 1
		case w == 0:
			unweighted++
			continue
		case w < 1 || w > intake.MaxRewriteWeight:
			return nil, fmt.Sprintf("target %q weight %d (want 1 to %d)", t.ModelRewrite, w, intake.MaxRewriteWeight)
		}
		out = append(out, intake.RewriteTarget{Model: t.ModelRewrite, Weight: uint32(w)})
	}
	if unweighted > 0 {
		return out, fmt.Sprintf("%d targets without a weight next to weighted ones receive no requests (set a weight on every target or on none)", unweighted)
	}
	return out, ""
}

// rewriteObject is the part of an InferenceModelRewrite that tollgate
// reads. Other fields, present or future, are ignored.
type rewriteObject struct {
	Spec struct {
		PoolRef struct {
			Group string `json:"group"`
			Kind  string `json:"kind"`
		} `json:"poolRef"`
		Rules []struct {
			Matches []struct {
				Model struct {
					Type  string `json:"type"`
					Value string `json:"value"`
				} `json:"model"`
			} `json:"matches"`
			Targets []rewriteTarget `json:"targets"`
		} `json:"rules"`
	} `json:"spec"`
	// refProblem says why a poolRef that names the pool's name does not
	// refer to the InferencePool tollgate follows; empty when it does.
	refProblem string
}

type rewriteTarget struct {
	ModelRewrite string `json:"modelRewrite"`
	Weight       int64  `json:"weight"`
}

// decodeRewrite reads spec.poolRef and spec.rules.
func decodeRewrite(u *unstructured.Unstructured) (*rewriteObject, error) {
	data, err := json.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	var r rewriteObject
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	ref := r.Spec.PoolRef
	if g := cmpOr(ref.Group, poolRefGroup); g != poolRefGroup {
		r.refProblem = fmt.Sprintf("spec.poolRef.group is %q, not %s (the InferencePool API tollgate follows)", g, poolRefGroup)
	}
	if k := cmpOr(ref.Kind, poolRefKind); k != poolRefKind {
		r.refProblem = fmt.Sprintf("spec.poolRef.kind is %q, not %s", k, poolRefKind)
	}
	return &r, nil
}
