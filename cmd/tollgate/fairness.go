package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

// fairnessOptions holds the flags of flows inside a lane and of the
// Gateway API Inference Extension request headers.
type fairnessOptions struct {
	mode       string
	maxFlows   int
	weights    stringList
	objectives stringList
}

func registerFairnessFlags(fs *flag.FlagSet, o *fairnessOptions) {
	fs.StringVar(&o.mode, "fairness", "none", "fair share between keys inside a policy class: none, tenant (the resolved tenant) or header (x-llm-d-inference-fairness-id, else the tenant)")
	fs.IntVar(&o.maxFlows, "fairness-max-flows", sched.DefaultMaxFlows, "flows per lane; keys past it share one overflow flow")
	fs.Var(&o.weights, "fairness-weight", "weight of a fairness key as KEY=WEIGHT, 1 to 1000 (repeatable; default 1)")
	fs.Var(&o.objectives, "objective-class", "map an x-llm-d-inference-objective value to a priority class as NAME=CLASS (repeatable); wins over the InferenceObjectives of --discovery=inferencepool")
}

// apply resolves the flags into cfg (after cfg.Sched is set).
func (o *fairnessOptions) apply(cfg *extproc.Config) error {
	var errs []error
	mode, err := policy.ParseFairnessMode(o.mode)
	if err != nil {
		errs = append(errs, err)
	}
	cfg.Fairness = mode
	if o.maxFlows < 1 || o.maxFlows > sched.MaxFlowsLimit {
		errs = append(errs, fmt.Errorf("--fairness-max-flows must be in [1, %d], got %d", sched.MaxFlowsLimit, o.maxFlows))
	}
	cfg.Sched.Fairness.MaxFlows = o.maxFlows
	if len(o.weights) > 0 {
		w := make(map[string]uint32, len(o.weights))
		for _, s := range o.weights {
			k, v, ok := strings.Cut(s, "=")
			n, err := strconv.ParseUint(v, 10, 32)
			if !ok || k == "" || err != nil || n < 1 || n > sched.MaxFlowWeight {
				errs = append(errs, fmt.Errorf("invalid --fairness-weight %q: want KEY=WEIGHT with a weight from 1 to %d", s, sched.MaxFlowWeight))
				continue
			}
			w[k] = uint32(n)
		}
		cfg.Sched.Fairness.Weights = w
	}
	if len(o.objectives) > 0 {
		obj := make(policy.Objectives, len(o.objectives))
		for _, s := range o.objectives {
			name, p, err := policy.ParseObjective(s)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			obj[name] = p
		}
		cfg.Objectives = obj
	}
	return errors.Join(errs...)
}
