package extproc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/extproc/request/openai"
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

func (t *Tenancy) validate() error {
	if _, err := policy.ParseDefaultMaxClass(t.DefaultMaxClass); err != nil {
		return fmt.Errorf("extproc: %w", err)
	}
	return nil
}

// planner turns what a stream read into a scheduler request. It runs in
// the stream goroutines, in parallel: header parsing, JSON, tokenizing,
// hashing and the prefix lookup all happen here, never in the dispatcher.
// It is safe for concurrent use.
type planner struct {
	cfg     *Config
	tenants *policy.Tenants
	// keep is the set of request headers parseHeaders keeps.
	keep       headerSet
	file       *policy.PriorityFile
	defaultMax sched.Priority
	tok        Tokenizer
	prompts    *promptTokenizer
	prefix     *prefixCache
	metrics    *metrics
	// queueTimeout[p] is class p's queue timeout, 0 when admission is off.
	queueTimeout [sched.NumPriorities]time.Duration
	// objectives is the objective mapping in force: cfg.Objectives merged
	// with what Server.SetObjectives installed. Never nil.
	objectives atomic.Pointer[policy.Objectives]
	// rewrites is the model rewrite table in force: cfg.ModelRewrites
	// merged with what Server.SetModelRewrites installed. Never nil.
	rewrites atomic.Pointer[rewriteTable]
	// warnedSourceAddress is set once the missing source.address
	// attribute was logged.
	warnedSourceAddress atomic.Bool
}

func newPlanner(cfg *Config, tok Tokenizer, m *metrics) (*planner, error) {
	p := &planner{
		cfg:     cfg,
		tenants: cfg.Tenancy.Tenants,
		file:    cfg.Tenancy.PriorityFile,
		tok:     tok,
		prompts: newPromptTokenizer(tok, m.reg, cfg.Logger),
		prefix:  &prefixCache{idx: prefix.New(cfg.RouterTTL, cfg.PrefixMaxEntries), events: cfg.KVEvents},
		metrics: m,
	}
	obj := cfg.Objectives
	p.objectives.Store(&obj)
	p.rewrites.Store(&rewriteTable{exact: cfg.ModelRewrites})
	if p.tenants == nil {
		t, err := policy.NewTenants(policy.TenantOptions{})
		if err != nil {
			return nil, err
		}
		p.tenants = t
	}
	p.keep = readHeaders(p.tenants.HeaderName())
	dm, err := policy.ParseDefaultMaxClass(cfg.Tenancy.DefaultMaxClass)
	if err != nil {
		return nil, err
	}
	p.defaultMax = dm
	if pc := cfg.Sched.Priority; pc.Enabled {
		for v := range sched.Priority(sched.NumPriorities) {
			p.queueTimeout[v] = pc.Classes[v].QueueTimeout
		}
	}
	return p, nil
}

// identity is what the request headers decide.
type identity struct {
	tenant   string
	priority sched.Priority
	// flow is the fairness key (--fairness), empty when fairness is off.
	flow string
	// pin is what the pin headers say, read once here; build joins it
	// with the body's hints.
	pin policy.PinHeaders
}

// identify resolves the tenant (401 on a bad key) and, for an admission
// route, the effective priority, counting clamps and unknown values as SMG
// does: before admission, so rejected requests count too. A malformed pin
// header is a 400 here already.
func (p *planner) identify(h *headerInfo, clientIP string, admission bool) (identity, *rejection) {
	tenantHeader, _ := h.lookup(p.tenants.HeaderName())
	auth, _ := h.lookup(policy.HeaderAuthorization)
	tenant, err := p.tenants.Resolve(auth, tenantHeader, clientIP)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), policy.ErrUnauthorized.Error()+": ")
		return identity{}, &rejection{reason: reasonUnauthorized, message: msg}
	}
	id := identity{tenant: tenant, priority: sched.PriorityDefault}
	if !admission {
		return id, nil
	}
	flow, err := policy.FairnessKey(p.cfg.Fairness, h.lookup, tenant)
	if err != nil {
		return identity{}, headerRejection(err)
	}
	id.flow = flow
	v, present := h.lookup(policy.HeaderSMGPriority)
	requested, unknown := policy.ParsePriorityHeader(v, present)
	if unknown {
		p.metrics.unknownPriority.WithLabelValues(p.metrics.tenants.label(tenant)).Inc()
	}
	if !present {
		obj, found, err := p.objectives.Load().Objective(h.lookup)
		if err != nil {
			return identity{}, headerRejection(err)
		}
		if found {
			requested = obj
		}
	}
	eff, clamped := policy.Clamp(requested, tenant, p.file, p.defaultMax)
	if clamped {
		p.metrics.clamp.WithLabelValues(p.metrics.tenants.label(tenant), requested.String(), eff.String()).Inc()
	}
	id.priority = eff
	if id.pin, err = policy.ParsePinHeaders(h.lookup); err != nil {
		return identity{}, pinRejection(err)
	}
	return id, nil
}

// headerRejection answers a malformed flow-control header with a 400
// naming it.
func headerRejection(err error) *rejection {
	r := &rejection{reason: reasonBadRequest, message: err.Error()}
	var he *policy.HeaderError
	if errors.As(err, &he) {
		r.param = he.Header
	}
	return r
}

func pinRejection(err error) *rejection {
	r := &rejection{reason: reasonBadRequest, message: err.Error()}
	var pe *policy.PinError
	if errors.As(err, &pe) {
		r.param = pe.Header
	}
	return r
}

// plan is a request ready for the scheduler, with what the response path
// needs to compare against the worker's usage.
type plan struct {
	req    sched.Request
	hashes []uint64
	// estimate is the prompt token count, exact when exact is set.
	estimate  int
	exact     bool
	textBytes int
	// cachedBest is the largest cached-token estimate over workers.
	cachedBest uint64
	// cachedByWorker is the Cached list, sorted by worker.
	cachedByWorker []sched.CachedTokens
}

// build parses an admission request's body and makes the scheduler
// request. body may be nil when the body is unavailable (headers-only
// processing), which schedules with what the headers say. Tokenizing
// stops when ctx, the stream's, ends.
func (p *planner) build(ctx context.Context, now time.Time, id uint64, kind openai.Kind, h *headerInfo, who identity, body []byte, headersOnly bool, rewrite func(*openai.Request)) (*plan, *rejection) {
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
	strict, hasStrict, jump := policy.PriorityInputs(h.lookup, policy.AgentHints{
		Priority: r.Hints.Priority, StrictPriority: r.Hints.StrictPriority, LatencySensitivity: r.Hints.LatencySensitivity,
	})
	cls, present := h.lookup(policy.HeaderPolicyClass)
	pl := &plan{textBytes: r.TextBytes}
	bs := int(p.cfg.Sched.BlockSize)
	seed := p.prefix.seed(r.Model)
	switch {
	case len(r.TokenIDs) > 0:
		pl.estimate, pl.exact = len(r.TokenIDs), true
		pl.hashes = prefix.HashTokens(seed, r.TokenIDs, bs, nil)
	case r.Text != "":
		ids, n, exact, rej := p.prompts.tokens(ctx, &r)
		if rej != nil {
			return nil, rej
		}
		pl.estimate = n
		if exact {
			pl.exact = true
			pl.hashes = prefix.HashTokens(seed, ids, bs, nil)
		} else {
			pl.hashes = prefix.HashBytes(seed, r.Text, bs*p.cfg.PrefixBytesPerToken, nil)
		}
	}
	pl.cachedByWorker = p.prefix.lookup(now, pl.hashes, uint64(bs), pl.exact)
	for _, c := range pl.cachedByWorker {
		pl.cachedBest = max(pl.cachedBest, c.Tokens)
	}
	pl.req = sched.Request{
		ID:                id,
		Model:             r.Model,
		Class:             policy.PolicyClass(cls, present),
		Priority:          who.priority,
		StrictPriority:    strict,
		HasStrictPriority: hasStrict,
		PriorityJump:      jump,
		ISL:               uint64(pl.estimate),
		Cached:            pl.cachedByWorker,
		Pin:               who.pin.Pin(r.Hints.BackendInstanceID, r.Hints.DPRank),
		RequiredTaints:    r.Hints.RequiredTaints,
		FairnessKey:       who.flow,
	}
	return pl, nil
}

// badRequest maps a body parse error to its rejection.
func badRequest(err error) *rejection {
	var oe *openai.Error
	if errors.As(err, &oe) {
		r := &rejection{reason: reasonBadRequest, message: oe.Message, param: oe.Param, errType: oe.Type, errCode: oe.Code}
		if oe.Status == http.StatusRequestEntityTooLarge {
			r.reason = reasonBodyTooLarge
		}
		return r
	}
	return &rejection{reason: reasonBadRequest, message: err.Error()}
}

// modelField reads the model of a request body that is not under
// admission, for routing and a rewrite; empty when there is none or the
// body is not a JSON object. It makes the same single pass as admission's
// parse (openai.FindModel).
func modelField(body []byte) openai.ModelField {
	if len(body) == 0 {
		return openai.ModelField{}
	}
	m, err := openai.FindModel(body)
	if err != nil {
		return openai.ModelField{}
	}
	return m
}

// prefixCache guards the approximate prefix index, shared by all streams,
// and consults the exact index of KV events when there is one.
type prefixCache struct {
	// mu guards idx.
	mu  sync.Mutex
	idx *prefix.Index
	// events is nil without KV events. It has its own lock.
	events *kvevents.Manager
}

// lookup returns the cached tokens of a prompt per worker. Token hashes
// (exact set) are priced by the KV events for every worker in sync, and
// by the approximate index elsewhere.
func (c *prefixCache) lookup(now time.Time, hashes []uint64, blockTokens uint64, exact bool) []sched.CachedTokens {
	if len(hashes) == 0 {
		return nil
	}
	c.mu.Lock()
	approx := c.idx.Lookup(now, hashes, blockTokens, nil)
	c.mu.Unlock()
	if c.events != nil && exact {
		return c.events.Lookup(now, hashes, blockTokens, approx)
	}
	return approx
}

// seed returns the block-hash seed of a request for model: the model when
// the engines' KV events named it as a LoRA adapter, else the base seed "".
func (c *prefixCache) seed(model string) string {
	if c.events == nil {
		return ""
	}
	return c.events.Index().SeedFor(model)
}

func (c *prefixCache) record(now time.Time, worker string, hashes []uint64, exact bool) {
	if len(hashes) == 0 {
		return
	}
	c.mu.Lock()
	c.idx.Record(now, worker, hashes)
	c.mu.Unlock()
	if c.events != nil && exact {
		c.events.Record(now, worker, hashes)
	}
}

func (c *prefixCache) removeWorker(worker string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.idx.RemoveWorker(worker)
}
