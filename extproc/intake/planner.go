package intake

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/extproc/request/tokenize"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
	"github.com/tollgate/tollgate/sched/prefix"
)

// Tenancy is how tollgate identifies tenants and caps their priority
// (SMG's tenant resolution and clamp).
type Tenancy struct {
	// Tenants resolves tenant keys from the bearer token, the trusted
	// tenant header and the client address. Nil means no keys and no
	// trusted header.
	Tenants *policy.Tenants
	// PriorityFile supplies tenant_policies max classes. Nil means none.
	PriorityFile *policy.PriorityFile
	// DefaultMaxClass is --priority-scheduler-default-max-class; empty
	// means "default".
	DefaultMaxClass string
}

// Validate reports a bad default max class.
func (t *Tenancy) Validate() error {
	if _, err := policy.ParseDefaultMaxClass(t.DefaultMaxClass); err != nil {
		return fmt.Errorf("intake: %w", err)
	}
	return nil
}

// Config configures a Planner. Zero values select the defaults.
type Config struct {
	// Logger receives the planner's logs. Nil discards them.
	Logger *slog.Logger
	// Registry takes the planner's metrics. Nil registers them nowhere.
	Registry prometheus.Registerer
	// TenantLabel and ModelLabel bound the tenant and model labels of the
	// planner's metrics (ModelLabel gets the request's model, "" when it
	// named none). Nil labels every value "other".
	TenantLabel, ModelLabel func(string) string
	// Tenancy resolves tenants and clamps priorities. Nil means no tenant
	// keys, no trusted tenant header and default-max-class "default".
	Tenancy *Tenancy
	// Fairness selects the fairness key of flows inside a lane.
	Fairness policy.FairnessMode
	// Objectives are the operator's objective classes (--objective-class).
	Objectives policy.Objectives
	// ModelRewrites are the operator's rewrite rules (--model-rewrite).
	ModelRewrites map[string][]RewriteTarget
	// Tokenizer counts prompt tokens. Nil means the default estimator
	// (tokenize.DefaultSpec).
	Tokenizer Tokenizer
	// BlockSize is the KV block size in tokens; 0 means
	// sched.DefaultBlockSize.
	BlockSize uint64
	// PrefixBytesPerToken sizes byte blocks for prefix hashing when the
	// tokenizer is not exact; 0 means DefaultPrefixBytesPerToken.
	PrefixBytesPerToken int
	// Cache prices prompts; nil means a cache view with the defaults and
	// no KV events.
	Cache *CacheView
}

// DefaultPrefixBytesPerToken is the bytes-per-token estimate that sizes
// byte blocks when the tokenizer only estimates counts.
const DefaultPrefixBytesPerToken = 4

// Planner turns what a stream read into a scheduler request. It runs in
// the stream goroutines, in parallel: the identity, JSON, tokenizing,
// hashing and the cache view's lookup all happen here, never in the
// dispatcher. It is safe for concurrent use.
type Planner struct {
	tenants       *policy.Tenants
	file          *policy.PriorityFile
	defaultMax    sched.Priority
	fairness      policy.FairnessMode
	prompts       *promptTokenizer
	cache         *CacheView
	blockSize     uint64
	bytesPerToken int
	tenantLabel   func(string) string
	modelLabel    func(string) string
	clamp         *prometheus.CounterVec
	costError     *prometheus.HistogramVec
	cachedError   prometheus.Histogram
	unknownPrio   *prometheus.CounterVec
	objectives    *ObjectiveTable
	rewrites      *RewriteTable
}

// New builds a Planner.
func New(cfg Config) (*Planner, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	for _, l := range []*func(string) string{&cfg.TenantLabel, &cfg.ModelLabel} {
		if *l == nil {
			*l = func(string) string { return "other" }
		}
	}
	if cfg.Tenancy == nil {
		cfg.Tenancy = &Tenancy{}
	}
	if cfg.Tokenizer == nil {
		tok, err := tokenize.New(tokenize.DefaultSpec)
		if err != nil {
			return nil, err
		}
		cfg.Tokenizer = tok
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = sched.DefaultBlockSize
	}
	if cfg.PrefixBytesPerToken <= 0 {
		cfg.PrefixBytesPerToken = DefaultPrefixBytesPerToken
	}
	if cfg.Cache == nil {
		cfg.Cache = NewCacheView(CacheConfig{})
	}
	objectives, err := NewObjectiveTable(cfg.Objectives)
	if err != nil {
		return nil, err
	}
	rewrites, err := NewRewriteTable(cfg.ModelRewrites)
	if err != nil {
		return nil, err
	}
	p := &Planner{
		tenants:       cfg.Tenancy.Tenants,
		file:          cfg.Tenancy.PriorityFile,
		fairness:      cfg.Fairness,
		prompts:       newPromptTokenizer(cfg.Tokenizer, cfg.Registry, cfg.Logger),
		cache:         cfg.Cache,
		blockSize:     cfg.BlockSize,
		bytesPerToken: cfg.PrefixBytesPerToken,
		tenantLabel:   cfg.TenantLabel,
		modelLabel:    cfg.ModelLabel,
		costError: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_cost_estimate_error_ratio",
			Help:    "(estimated - actual) / actual prompt tokens, against the usage the worker reported, by model and tokenizer kind (estimate, tiktoken, hf).",
			Buckets: errorRatioBuckets,
		}, []string{"model", "tokenizer"}),
		cachedError: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_cached_tokens_estimate_error_ratio",
			Help:    "(estimated - actual) cached prompt tokens / actual prompt tokens, against the usage the worker reported.",
			Buckets: errorRatioBuckets,
		}),
		objectives: objectives,
		rewrites:   rewrites,
		clamp: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smg_scheduler_clamp_total",
			Help: "Requests whose x-smg-priority was lowered to the tenant's max class.",
		}, []string{"tenant", "requested_class", "effective_class"}),
		unknownPrio: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smg_scheduler_unknown_priority_value_total",
			Help: "Requests whose non-empty x-smg-priority value was not a known class.",
		}, []string{"tenant"}),
	}
	if p.tenants == nil {
		t, err := policy.NewTenants(policy.TenantOptions{})
		if err != nil {
			return nil, err
		}
		p.tenants = t
	}
	dm, err := policy.ParseDefaultMaxClass(cfg.Tenancy.DefaultMaxClass)
	if err != nil {
		return nil, err
	}
	p.defaultMax = dm
	cfg.Registry.MustRegister(p.clamp, p.unknownPrio, p.costError, p.cachedError, newObjectiveCollector(objectives), newRewriteCollector(rewrites))
	return p, nil
}

// TenantHeader is the trusted tenant header Identify reads, besides the
// flow-control, pin and authorization headers.
func (p *Planner) TenantHeader() string { return p.tenants.HeaderName() }

// Objectives is the objective table the planner reads.
func (p *Planner) Objectives() *ObjectiveTable { return p.objectives }

// Rewrites is the model rewrite table in force.
func (p *Planner) Rewrites() *RewriteTable { return p.rewrites }

// errorRatioBuckets are the buckets of the estimate error ratios.
var errorRatioBuckets = []float64{-1, -0.5, -0.25, -0.1, -0.05, -0.01, 0, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2}

// ObserveUsage compares a plan's estimates with the usage the worker
// reported: the prompt tokens, and cached, the cached tokens the scheduler
// priced the request on. It feeds an estimating tokenizer's calibration.
func (p *Planner) ObserveUsage(pl *Plan, cached uint64, u openai.Usage) {
	if !u.Found || u.PromptTokens <= 0 {
		return
	}
	actual := float64(u.PromptTokens)
	p.costError.WithLabelValues(p.modelLabel(pl.Req.Model), tokenize.Kind(p.prompts.tok, pl.Req.Model)).Observe((float64(pl.Estimate) - actual) / actual)
	p.cachedError.Observe((float64(cached) - float64(u.CachedTokens)) / actual)
	if !pl.Exact && pl.TextBytes > 0 {
		p.prompts.tok.Observe(pl.Req.Model, pl.TextBytes, u.PromptTokens)
	}
}

// Identity is what the request headers decide.
type Identity struct {
	Tenant   string
	Priority sched.Priority
	// Flow is the fairness key (--fairness), empty when fairness is off.
	Flow string
	// pin is what the pin headers say, read once here; Build joins it
	// with the body's hints.
	pin policy.PinHeaders
}

// Identify resolves the tenant (401 on a bad key) and, for an admission
// route, the effective priority, counting clamps and unknown values as SMG
// does: before admission, so rejected requests count too. A malformed pin
// header is a 400 here already.
func (p *Planner) Identify(h policy.Lookup, clientIP string, admission bool) (Identity, *Rejection) {
	tenantHeader, _ := h(p.tenants.HeaderName())
	auth, _ := h(policy.HeaderAuthorization)
	tenant, err := p.tenants.Resolve(auth, tenantHeader, clientIP)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), policy.ErrUnauthorized.Error()+": ")
		return Identity{}, &Rejection{Reason: ReasonUnauthorized, Message: msg}
	}
	id := Identity{Tenant: tenant, Priority: sched.PriorityDefault}
	if !admission {
		return id, nil
	}
	flow, err := policy.FairnessKey(p.fairness, h, tenant)
	if err != nil {
		return Identity{}, headerRejection(err)
	}
	id.Flow = flow
	v, present := h(policy.HeaderSMGPriority)
	requested, unknown := policy.ParsePriorityHeader(v, present)
	if unknown {
		p.unknownPrio.WithLabelValues(p.tenantLabel(tenant)).Inc()
	}
	if !present {
		obj, found, err := p.objectives.Current().Objective(h)
		if err != nil {
			return Identity{}, headerRejection(err)
		}
		if found {
			requested = obj
		}
	}
	eff, clamped := policy.Clamp(requested, tenant, p.file, p.defaultMax)
	if clamped {
		p.clamp.WithLabelValues(p.tenantLabel(tenant), requested.String(), eff.String()).Inc()
	}
	id.Priority = eff
	if id.pin, err = policy.ParsePinHeaders(h); err != nil {
		return Identity{}, headerRejection(err)
	}
	return id, nil
}

// Plan is a request ready for the scheduler, with what the response path
// needs to compare against the worker's usage.
type Plan struct {
	Req sched.Request
	// Hashes are the prompt's block hashes.
	Hashes []uint64
	// Estimate is the prompt token count, exact when Exact is set.
	Estimate  int
	Exact     bool
	TextBytes int
}

// Build parses an admission request's body and makes the scheduler
// request. With headersOnly the body is unavailable (headers-only
// processing), and the request is scheduled with what the headers say.
// rewrite, when not nil, rewrites the parsed request's model. Tokenizing
// stops when ctx, the stream's, ends.
func (p *Planner) Build(ctx context.Context, now time.Time, id uint64, kind openai.Kind, h policy.Lookup, who Identity, body []byte, headersOnly bool, rewrite func(*openai.Request)) (*Plan, *Rejection) {
	var r openai.Request
	if !headersOnly {
		parsed, err := openai.Parse(kind, body)
		if err != nil {
			return nil, badRequest(err)
		}
		r = *parsed
		if rewrite != nil {
			rewrite(&r)
		}
	}
	strict, hasStrict, jump := policy.PriorityInputs(h, policy.AgentHints{
		Priority: r.Hints.Priority, StrictPriority: r.Hints.StrictPriority, LatencySensitivity: r.Hints.LatencySensitivity,
	})
	cls, present := h(policy.HeaderPolicyClass)
	pl := &Plan{TextBytes: r.TextBytes}
	bs := int(p.blockSize)
	seed := p.cache.Seed(r.Model)
	switch {
	case len(r.TokenIDs) > 0:
		pl.Estimate, pl.Exact = len(r.TokenIDs), true
		pl.Hashes = prefix.HashTokens(seed, r.TokenIDs, bs, nil)
	case r.Text != "":
		ids, n, exact, rej := p.prompts.tokens(ctx, &r)
		if rej != nil {
			return nil, rej
		}
		pl.Estimate = n
		if exact {
			pl.Exact = true
			pl.Hashes = prefix.HashTokens(seed, ids, bs, nil)
		} else {
			pl.Hashes = prefix.HashBytes(seed, r.Text, bs*p.bytesPerToken, nil)
		}
	}
	pl.Req = sched.Request{
		ID:                id,
		Model:             r.Model,
		Class:             policy.PolicyClass(cls, present),
		Priority:          who.Priority,
		StrictPriority:    strict,
		HasStrictPriority: hasStrict,
		PriorityJump:      jump,
		ISL:               uint64(pl.Estimate),
		Cached:            p.cache.Lookup(now, pl.Hashes, p.blockSize, pl.Exact),
		Pin:               who.pin.Pin(r.Hints.BackendInstanceID, r.Hints.DPRank),
		RequiredTaints:    r.Hints.RequiredTaints,
		FairnessKey:       who.Flow,
		Tenant:            who.Tenant,
	}
	return pl, nil
}

// Routed records that pl was routed to worker, so that its prompt counts
// as cached there.
func (p *Planner) Routed(now time.Time, worker string, pl *Plan) {
	p.cache.Record(now, worker, pl.Hashes, pl.Exact)
}

// ModelField reads the model of a request body that is not under
// admission, for routing and a rewrite; empty when there is none or the
// body is not a JSON object. It makes the same single pass as admission's
// parse (openai.FindModel).
func ModelField(body []byte) openai.ModelField {
	if len(body) == 0 {
		return openai.ModelField{}
	}
	m, err := openai.FindModel(body)
	if err != nil {
		return openai.ModelField{}
	}
	return m
}
