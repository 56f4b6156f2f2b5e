package intake

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/tollgate/tollgate/extproc/request/openai"
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

// rewriteRules is one rewrite table: exact names first, then the rule for
// any other name.
type rewriteRules struct {
	exact map[string][]RewriteTarget
	other []RewriteTarget
}

// targets returns the targets for model, nil when it is not rewritten.
func (t *rewriteRules) targets(model string) []RewriteTarget {
	if ts, ok := t.exact[model]; ok {
		return ts
	}
	return t.other
}

// empty reports whether the table rewrites nothing.
func (t *rewriteRules) empty() bool { return len(t.exact) == 0 && len(t.other) == 0 }

// RewriteTable is the model rewrite table in force: the operator's rules
// (--model-rewrite), which win, merged over the rules found outside the
// flags. The merge is its own: discovery reports what it found, and the
// table answers what a flag shadowed and what the shared name budget left
// out. Safe for concurrent use; each request sees one table.
type RewriteTable struct {
	flags map[string][]RewriteTarget
	cur   atomic.Pointer[rewriteRules]
}

// NewRewriteTable checks the operator's rules and starts from them.
func NewRewriteTable(flags map[string][]RewriteTarget) (*RewriteTable, error) {
	if err := ValidRewrites(flags); err != nil {
		return nil, fmt.Errorf("intake: model rewrites: %w", err)
	}
	t := &RewriteTable{flags: flags}
	t.cur.Store(&rewriteRules{exact: flags})
	return t, nil
}

// Set merges found under the operator's rules, checks the result and
// swaps it in. On error the table in force stays.
func (t *RewriteTable) Set(found ModelRewriteRules) (Merge, error) {
	exact, m := mergeOver(t.flags, found.Exact, MaxModelRewrites, slices.Equal, func(name string, ts []RewriteTarget) string {
		return fmt.Sprintf("--model-rewrite rewrites %s to %s", name, describeTargets(ts))
	})
	next := &rewriteRules{exact: exact, other: found.Other}
	if err := ValidRewrites(next.exact); err != nil {
		return Merge{}, fmt.Errorf("intake: model rewrites: %w", err)
	}
	if next.other != nil {
		if err := validTargets("any other model", next.other); err != nil {
			return Merge{}, fmt.Errorf("intake: model rewrites: %w", err)
		}
	}
	t.cur.Store(next)
	return m, nil
}

// describeTargets writes targets as a --model-rewrite value does.
func describeTargets(ts []RewriteTarget) string {
	s := ""
	for i, tg := range ts {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf("%s*%d", tg.Model, tg.Weight)
	}
	return s
}

// Counts returns the names in force from the flags and from found rules,
// and whether a rule rewrites every other name.
func (t *RewriteTable) Counts() (fromFlags, found int, other bool) {
	cur := t.cur.Load()
	for name := range cur.exact {
		if _, ok := t.flags[name]; ok {
			fromFlags++
		} else {
			found++
		}
	}
	return fromFlags, found, len(cur.other) > 0
}

// Rewrite returns body with its top-level "model" field m replaced by one
// of the table's targets for it (chosen by weight with draw, which returns
// a uniform number in [0, n)), the model it replaced and the one it wrote,
// and whether it changed. The new value is spliced in place of the old:
// every other byte is kept as it was sent. A body without the field, or
// naming a model outside the table, is left alone.
func (t *RewriteTable) Rewrite(body []byte, m openai.ModelField, draw func(uint64) uint64) (out []byte, from, to string, ok bool) {
	return rewriteField(body, m, t.cur.Load(), draw)
}
