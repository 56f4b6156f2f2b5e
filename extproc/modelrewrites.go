package extproc

import (
	"fmt"
	"maps"

	"github.com/prometheus/client_golang/prometheus"
)

// ModelRewriteRules is a rewrite table found outside the flags: the
// InferenceModelRewrite objects of the pool, already resolved to one rule
// per model name by their precedence.
type ModelRewriteRules struct {
	// Exact maps a requested model name to its targets.
	Exact map[string][]RewriteTarget
	// Other are the targets of every model name that no exact rule (of
	// the flags or of Exact) names: a rule without matches. Nil: such
	// names are not rewritten.
	Other []RewriteTarget
}

// rewriteTable is the rewrite table in force: exact names first, then
// the rule for any other name.
type rewriteTable struct {
	exact map[string][]RewriteTarget
	other []RewriteTarget
}

// targets returns the targets for model, nil when it is not rewritten.
func (t *rewriteTable) targets(model string) []RewriteTarget {
	if ts, ok := t.exact[model]; ok {
		return ts
	}
	return t.other
}

// empty reports whether the table rewrites nothing.
func (t *rewriteTable) empty() bool { return len(t.exact) == 0 && len(t.other) == 0 }

// SetModelRewrites installs the rewrite rules found outside the flags (the
// InferenceModelRewrite objects of the pool), replacing the previous ones.
// Config.ModelRewrites (--model-rewrite) wins for any name both hold, and
// found.Other applies only to names neither names. The merged table is
// checked (at most MaxModelRewrites names, MaxRewriteTargets targets of
// weight 1 to MaxRewriteWeight per name) and swapped in atomically: each
// request is rewritten by either the old table or the new one. On error
// the current table stays. Safe for concurrent use.
func (s *Server) SetModelRewrites(found ModelRewriteRules) error {
	t, err := mergeRewrites(s.cfg.ModelRewrites, found)
	if err != nil {
		return err
	}
	s.planner.rewrites.Store(t)
	s.log.Info("model rewrites applied", "models", len(t.exact), "from_flags", len(s.cfg.ModelRewrites),
		"other_models_rewritten", len(t.other) > 0)
	return nil
}

// mergeRewrites lays the flag table over found and checks the result.
func mergeRewrites(flags map[string][]RewriteTarget, found ModelRewriteRules) (*rewriteTable, error) {
	t := &rewriteTable{exact: make(map[string][]RewriteTarget, len(flags)+len(found.Exact)), other: found.Other}
	maps.Copy(t.exact, found.Exact)
	maps.Copy(t.exact, flags)
	if err := validRewrites(t.exact); err != nil {
		return nil, fmt.Errorf("extproc: model rewrites: %w", err)
	}
	if t.other != nil {
		if err := validTargets("any other model", t.other); err != nil {
			return nil, fmt.Errorf("extproc: model rewrites: %w", err)
		}
	}
	return t, nil
}

// Sources of a rewrite rule, the source label of tollgate_model_rewrites.
const (
	rewriteFromFlag   = "flag"
	rewriteFromObject = "inferencemodelrewrite"
)

// rewriteCollector exports the rewrite table in force: how many model
// names have a rule, by source, and whether a rule rewrites every other
// name. Three series, whatever the number of names.
type rewriteCollector struct {
	s    *Server
	desc *prometheus.Desc
}

func newRewriteCollector(s *Server) *rewriteCollector {
	return &rewriteCollector{s: s, desc: prometheus.NewDesc("tollgate_model_rewrites",
		"Model-name rewrite rules in force, by source: flag (--model-rewrite) or inferencemodelrewrite (InferenceModelRewrite objects of the pool); match is exact (one per model name) or any (a rule without matches, 0 or 1).",
		[]string{"source", "match"}, nil)}
}

func (c *rewriteCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *rewriteCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.s.planner.rewrites.Load()
	var flag, object, other int
	for name := range t.exact {
		if _, ok := c.s.cfg.ModelRewrites[name]; ok {
			flag++
		} else {
			object++
		}
	}
	if len(t.other) > 0 {
		other = 1
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(flag), rewriteFromFlag, "exact")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(object), rewriteFromObject, "exact")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(other), rewriteFromObject, "any")
}
