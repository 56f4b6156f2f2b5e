package intake

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/extproc/request/openai"
)

// MaxModelRewrites bounds the static rewrite table.
const MaxModelRewrites = 1024

// MaxRewriteWeight bounds the weight of one rewrite target; it is the
// InferenceModelRewrite API's own bound.
const MaxRewriteWeight = 1000000

// MaxRewriteTargets bounds the targets of one rewrite.
const MaxRewriteTargets = 64

// RewriteTarget is one model a rewrite sends requests to, with its share
// of the rewrite's requests (weight over the sum of the targets' weights).
type RewriteTarget struct {
	Model  string
	Weight uint32
}

// ParseModelRewrite parses one --model-rewrite value: FROM=TO, or weighted
// targets FROM=TO*WEIGHT,TO*WEIGHT,... (a missing weight is 1), as an
// InferenceModelRewrite rule splits traffic.
func ParseModelRewrite(s string) (from string, targets []RewriteTarget, err error) {
	bad := fmt.Errorf("invalid model rewrite %q: want FROM=TO or FROM=TO*WEIGHT,TO*WEIGHT,..., names of 1 to %d bytes, weights 1 to %d",
		s, openai.MaxModelNameBytes, MaxRewriteWeight)
	from, list, ok := strings.Cut(s, "=")
	from = strings.TrimSpace(from)
	if !ok || from == "" || len(from) > openai.MaxModelNameBytes {
		return "", nil, bad
	}
	for t := range strings.SplitSeq(list, ",") {
		name, w, weighted := strings.Cut(t, "*")
		name = strings.TrimSpace(name)
		weight := uint64(1)
		if weighted {
			if weight, err = strconv.ParseUint(strings.TrimSpace(w), 10, 32); err != nil {
				return "", nil, bad
			}
		}
		if name == "" || len(name) > openai.MaxModelNameBytes || weight < 1 || weight > MaxRewriteWeight {
			return "", nil, bad
		}
		targets = append(targets, RewriteTarget{Model: name, Weight: uint32(weight)})
	}
	if len(targets) > MaxRewriteTargets {
		return "", nil, fmt.Errorf("invalid model rewrite %q: %d targets exceed %d", s, len(targets), MaxRewriteTargets)
	}
	return from, targets, nil
}

// ValidRewrites reports the first invalid entry of a rewrite table.
func ValidRewrites(table map[string][]RewriteTarget) error {
	if len(table) > MaxModelRewrites {
		return fmt.Errorf("%d model rewrites exceed %d", len(table), MaxModelRewrites)
	}
	for from, ts := range table {
		if from == "" || len(from) > openai.MaxModelNameBytes {
			return fmt.Errorf("model rewrite of %q: want a name of 1 to %d bytes", from, openai.MaxModelNameBytes)
		}
		if err := validTargets(strconv.Quote(from), ts); err != nil {
			return err
		}
	}
	return nil
}

// validTargets reports the first invalid target of the rewrite of what.
func validTargets(what string, ts []RewriteTarget) error {
	if len(ts) == 0 || len(ts) > MaxRewriteTargets {
		return fmt.Errorf("model rewrite of %s has %d targets, want 1 to %d", what, len(ts), MaxRewriteTargets)
	}
	for _, t := range ts {
		if t.Model == "" || len(t.Model) > openai.MaxModelNameBytes || t.Weight < 1 || t.Weight > MaxRewriteWeight {
			return fmt.Errorf("model rewrite of %s: target %q weight %d: want a name of 1 to %d bytes and a weight from 1 to %d",
				what, t.Model, t.Weight, openai.MaxModelNameBytes, MaxRewriteWeight)
		}
	}
	return nil
}

// pickTarget chooses a target with probability weight/total; draw(n)
// returns a uniform number in [0, n).
func pickTarget(ts []RewriteTarget, draw func(uint64) uint64) string {
	if len(ts) == 1 {
		return ts[0].Model
	}
	var total uint64
	for _, t := range ts {
		total += uint64(t.Weight)
	}
	r := draw(total)
	for _, t := range ts {
		if r < uint64(t.Weight) {
			return t.Model
		}
		r -= uint64(t.Weight)
	}
	return ts[len(ts)-1].Model
}

// rewriteField is RewriteTable.Rewrite over one table.
func rewriteField(body []byte, m openai.ModelField, table *rewriteRules, draw func(uint64) uint64) (out []byte, from, to string, ok bool) {
	if m.End == 0 || table.empty() {
		return nil, "", "", false
	}
	ts := table.targets(m.Name)
	if len(ts) == 0 {
		return nil, "", "", false
	}
	to = pickTarget(ts, draw)
	if to == m.Name {
		return nil, "", "", false
	}
	v, err := json.Marshal(to)
	if err != nil {
		return nil, "", "", false
	}
	out = make([]byte, 0, len(body)-(m.End-m.Start)+len(v))
	out = append(append(append(out, body[:m.Start]...), v...), body[m.End:]...)
	return out, m.Name, to, true
}
