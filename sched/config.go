package sched

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
)

// validateConfig checks the structure the scheduler relies on, so that bad
// input gives an error instead of a panic later: profiles the policy
// package did not build, out-of-range class indexes, non-finite numbers.
// The policy package reports YAML problems with the upstream texts; these
// errors only guard the scheduler.
func validateConfig(cfg *Config) error {
	var errs []error
	if cfg.Policy.Root != nil {
		errs = append(errs, validateProfile("root profile", cfg.Policy.Root))
	}
	models := slices.Sorted(maps.Keys(cfg.Policy.Models))
	for _, m := range models {
		if m == "" {
			// The empty name's queue is shared by overflow names (queueKey),
			// which must resolve to the same profile.
			errs = append(errs, errors.New("sched: model profile name must not be empty"))
		}
		errs = append(errs, validateProfile(fmt.Sprintf("model %q profile", m), cfg.Policy.Models[m]))
	}
	if cfg.Policy.Fallback != nil {
		errs = append(errs, validateProfile("fallback profile", cfg.Policy.Fallback))
	}
	for p := range Priority(NumPriorities) {
		c := &cfg.Priority.Classes[p]
		if math.IsNaN(c.ReservedPerSlot) || math.IsInf(c.ReservedPerSlot, 0) || c.ReservedPerSlot < 0 {
			errs = append(errs, fmt.Errorf("sched: class %s: reserved_per_slot must be finite and >= 0", p))
		}
		if c.QueueTimeout < 0 || c.StarvationThreshold < 0 {
			errs = append(errs, fmt.Errorf("sched: class %s: queue timeout and starvation threshold must not be negative", p))
		}
	}
	sel := DefaultSelection()
	if cfg.Selection != nil {
		sel = *cfg.Selection
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"prefill load scale", sel.PrefillLoadScale}, {"overlap credit", sel.OverlapCredit}, {"temperature", sel.Temperature}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			errs = append(errs, fmt.Errorf("sched: selection %s must be finite and >= 0", f.name))
		}
	}
	if cfg.Fallbacks < 0 || cfg.Fallbacks > MaxFallbacks {
		errs = append(errs, fmt.Errorf("sched: fallbacks %d must be in [0, %d]", cfg.Fallbacks, MaxFallbacks))
	}
	errs = append(errs, validateFairness(&cfg.Fairness), validateAdmission(cfg), validateBudgets(cfg.TenantBudgets))
	return errors.Join(errs...)
}

// validateAdmission checks SMG's bucket: a legacy queue needs a timeout.
func validateAdmission(cfg *Config) error {
	a := &cfg.Admission
	if !cfg.Priority.Enabled && a.Capacity > 0 && a.QueueSize > 0 && a.QueueTimeout <= 0 {
		return errors.New("sched: admission queue timeout must be > 0 when the queue size is > 0")
	}
	return nil
}

// validateBudgets checks that every tenant budget is positive.
func validateBudgets(b *TenantBudgets) error {
	if b == nil {
		return nil
	}
	var errs []error
	check := func(who string, p *BudgetPolicy) {
		if p.TokensPerMinute == 0 || p.RequestsPerMinute == 0 {
			errs = append(errs, fmt.Errorf("sched: tenant budget %s: per-minute values must be > 0", who))
		}
		for _, r := range p.Rules {
			if r.TokensPerMinute == 0 || r.RequestsPerMinute == 0 {
				errs = append(errs, fmt.Errorf("sched: tenant budget %s rule %q: per-minute values must be > 0", who, r.ID))
			}
		}
	}
	check("default", &b.Default)
	keys := slices.Sorted(maps.Keys(b.Tenants))
	for _, k := range keys {
		p := b.Tenants[k]
		check(strconv.Quote(k), &p)
	}
	return errors.Join(errs...)
}

// validateFairness checks the flow bounds and weights.
func validateFairness(f *FairnessConfig) error {
	var errs []error
	if f.MaxFlows < 0 || f.MaxFlows > MaxFlowsLimit {
		errs = append(errs, fmt.Errorf("sched: fairness max flows %d must be in [0, %d]", f.MaxFlows, MaxFlowsLimit))
	}
	keys := slices.Sorted(maps.Keys(f.Weights))
	for _, k := range keys {
		if w := f.Weights[k]; w < 1 || w > MaxFlowWeight {
			errs = append(errs, fmt.Errorf("sched: fairness weight of %q is %d, must be in [1, %d]", k, w, MaxFlowWeight))
		}
	}
	return errors.Join(errs...)
}

// validateProfile checks that p resolves every request to a valid class.
func validateProfile(where string, p *Profile) error {
	if p == nil {
		return fmt.Errorf("sched: %s is nil", where)
	}
	if len(p.Classes) == 0 {
		return fmt.Errorf("sched: %s has no policy classes", where)
	}
	var errs []error
	for i := range p.Classes {
		c := &p.Classes[i]
		if c.Quantum == 0 {
			errs = append(errs, fmt.Errorf("sched: %s: policy class %q quantum must be greater than zero", where, c.Name))
		}
		if f := c.BusyThresholdFrac; f != nil && (math.IsNaN(*f) || math.IsInf(*f, 0) || *f < 0) {
			errs = append(errs, fmt.Errorf("sched: %s: policy class %q busy threshold fraction must be finite and non-negative", where, c.Name))
		}
		if r := c.BusyWorkerRatio; math.IsNaN(r) || r < 0 || r > 1 {
			errs = append(errs, fmt.Errorf("sched: %s: policy class %q busy worker ratio must be in [0, 1]", where, c.Name))
		}
		if c.SLO < 0 {
			errs = append(errs, fmt.Errorf("sched: %s: policy class %q SLO must not be negative", where, c.Name))
		}
	}
	switch {
	case p.Synthetic:
		return errors.Join(errs...)
	case p.Flat:
		return errors.Join(append(errs, validateFlat(where, p))...)
	}
	n := len(p.Classes)
	if len(p.Buckets) == 0 || p.Buckets[0].MinTokens != 0 {
		errs = append(errs, fmt.Errorf("sched: %s: buckets must start at min_tokens 0", where))
	}
	for i := 1; i < len(p.Buckets); i++ {
		if p.Buckets[i].MinTokens <= p.Buckets[i-1].MinTokens {
			errs = append(errs, fmt.Errorf("sched: %s: bucket floors must be strictly increasing", where))
			break
		}
	}
	if _, ok := p.Matrix[p.DefaultFamily]; !ok {
		errs = append(errs, fmt.Errorf("sched: %s: default family %q has no matrix row", where, p.DefaultFamily))
	}
	families := slices.Sorted(maps.Keys(p.Matrix))
	for _, f := range families {
		row := p.Matrix[f]
		if len(row) != len(p.Buckets) {
			errs = append(errs, fmt.Errorf("sched: %s: family %q has %d classes for %d buckets", where, f, len(row), len(p.Buckets)))
		}
		for _, i := range row {
			if i < 0 || i >= n {
				errs = append(errs, fmt.Errorf("sched: %s: family %q names class index %d of %d", where, f, i, n))
			}
		}
	}
	names := slices.Sorted(maps.Keys(p.Explicit))
	for _, name := range names {
		if i := p.Explicit[name]; i < 0 || i >= n {
			errs = append(errs, fmt.Errorf("sched: %s: explicit class %q has index %d of %d", where, name, i, n))
		}
	}
	return errors.Join(errs...)
}

// validateFlat checks that a flat profile names every class once and has
// a default class.
func validateFlat(where string, p *Profile) error {
	n := len(p.Classes)
	if p.DefaultClass < 0 || p.DefaultClass >= n {
		return fmt.Errorf("sched: %s: default class index %d of %d", where, p.DefaultClass, n)
	}
	if len(p.Explicit) != n {
		return fmt.Errorf("sched: %s: %d class names for %d classes", where, len(p.Explicit), n)
	}
	for i := range p.Classes {
		if name := p.Classes[i].Name; p.Explicit[name] != i {
			return fmt.Errorf("sched: %s: class name %q does not name its class", where, name)
		}
	}
	return nil
}
