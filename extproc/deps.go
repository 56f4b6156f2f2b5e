package extproc

import (
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched"
)

// exchangeDeps is what every exchange of a server reads: the
// configuration, the planner (intake), the metrics, the headers to keep
// and each class's queue timeout. It is built once per server.
type exchangeDeps struct {
	cfg     *Config
	planner *intake.Planner
	metrics *metrics
	// keep is the set of request headers parseHeaders keeps.
	keep headerSet
	// queueTimeout[p] is class p's queue timeout, 0 when admission is off.
	queueTimeout [sched.NumPriorities]time.Duration
	// routes shares the routing answers.
	routes routeCache
	// warnedSourceAddress is set once the missing source.address
	// attribute was logged.
	warnedSourceAddress atomic.Bool
}

// newExchangeDeps builds the planner over cache and the rest of what the
// exchanges read. cfg has its defaults.
func newExchangeDeps(cfg *Config, cache *intake.CacheView, m *metrics) (*exchangeDeps, error) {
	p, err := intake.New(intake.Config{
		Logger:              cfg.Logger,
		Registry:            m.reg,
		TenantLabel:         m.tenants.Label,
		ModelLabel:          m.boundedModel,
		Tenancy:             cfg.Tenancy,
		Fairness:            cfg.Fairness,
		Objectives:          cfg.Objectives,
		ModelRewrites:       cfg.ModelRewrites,
		Tokenizer:           cfg.Tokenizer,
		BlockSize:           cfg.Sched.BlockSize,
		PrefixBytesPerToken: cfg.PrefixBytesPerToken,
		Cache:               cache,
	})
	if err != nil {
		return nil, err
	}
	d := &exchangeDeps{cfg: cfg, planner: p, metrics: m, keep: readHeaders(p.TenantHeader())}
	if pc := cfg.Sched.Priority; pc.Enabled {
		for v := range sched.Priority(sched.NumPriorities) {
			d.queueTimeout[v] = pc.Classes[v].QueueTimeout
		}
	}
	return d, nil
}
