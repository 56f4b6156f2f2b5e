package demo

import (
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

// serverSpec is a scenario's tollgate configuration in the terms of the
// serving flags. build turns it into an extproc.Config the way
// `tollgate serve` does, with the same policy loaders, so the demo reads the
// example files exactly as a user's flags would.
type serverSpec struct {
	// routerPolicy is --router-policy-config; empty means none.
	routerPolicy string
	// priority is --priority-scheduler-enabled.
	priority bool
	// priorityConfig is --priority-scheduler-config; empty means the
	// built-in defaults.
	priorityConfig string
	// tenantKeys are --tenant-api-key values, "ID:KEY".
	tenantKeys []string
	// seed seeds the worker-selection tie-breaker (--seed).
	seed uint64
	// queueThreshold is --router-queue-threshold; nil means unset.
	queueThreshold *float64
	// fairness is --fairness.
	fairness policy.FairnessMode
	// tenantRateLimits is --tenant-rate-limit-config (with
	// --tenant-rate-limit-enabled); empty means none.
	tenantRateLimits string
}

// build loads every file the spec names and returns the server
// configuration, reporting every problem joined.
func (s serverSpec) build(log *slog.Logger) (extproc.Config, error) {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	sc := sched.Config{
		BlockSize: sched.DefaultBlockSize,
		Rand:      rand.New(rand.NewPCG(s.seed, s.seed^0x9e3779b97f4a7c15)),
	}
	pc, pf, err := policy.Load(policy.Files{
		RouterPolicy:    s.routerPolicy,
		QueueThreshold:  s.queueThreshold,
		QueuePolicy:     "fcfs",
		PriorityEnabled: s.priority,
		PriorityConfig:  s.priorityConfig,
	})
	add(err)
	sc.Policy = pc
	if pf != nil {
		sc.Priority = pf.PriorityConfig()
	}
	tenants, err := policy.NewTenants(policy.TenantOptions{TenantAPIKeys: s.tenantKeys})
	add(err)
	if s.tenantRateLimits != "" {
		sc.TenantBudgets, err = policy.LoadTenantRateLimits(s.tenantRateLimits)
		add(err)
	}

	cfg := extproc.Config{
		Logger:              log,
		EnvoyMessageTimeout: messageTimeout,
		Sched:               sc,
		Tenancy:             &intake.Tenancy{Tenants: tenants, PriorityFile: pf, DefaultMaxClass: "default"},
		Fairness:            s.fairness,
		// The demo stops its own stack: no readiness drain to wait for.
		DrainDelay:      -1,
		ShutdownTimeout: 5 * time.Second,
	}
	add(cfg.Validate())
	if len(errs) > 0 {
		return extproc.Config{}, errors.Join(errs...)
	}
	return cfg, nil
}
