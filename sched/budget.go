package sched

import (
	"container/list"
	"math"
	"time"
)

// This file holds SMG's tenant budgets (Config.TenantBudgets): per tenant a
// token and a request bucket, plus the buckets of the one model rule that
// applies, each refilling at its per-minute value / 60 per second. An
// arrival reserves its exact prompt tokens and one request from every
// scope, or none if any scope cannot afford it (OutcomeTenantRateLimited);
// Usage settles the tokens to what the worker reported. Any other end keeps
// the reservation, as SMG does.
//
// Tenants are client-chosen (an ip: tenant per address), so the scopes
// tracked are bounded: beyond MaxBudgetScopes the least recently used one
// is forgotten, which gives that tenant a full budget again (counted in
// BudgetStats.Evicted).

// DefaultMaxBudgetScopes bounds the tenant budget scopes tracked at once.
const DefaultMaxBudgetScopes = 16384

// scopeKey names a budget scope: a tenant's global scope (rule "") or one
// of its model rules.
type scopeKey struct{ tenant, rule string }

// budgetScope is one scope's two buckets and its place in the
// least-recently-used order.
type budgetScope struct {
	key              scopeKey
	tokens, requests bucket
	used             *list.Element
}

// reservation is what an admitted request took from its scopes.
type reservation struct {
	scopes [2]*budgetScope // tenant-global, then the rule's (nil if none)
	tokens uint64
}

// budgets is the tenant budgets' state.
type budgets struct {
	cfg    *TenantBudgets
	max    int
	scopes map[scopeKey]*budgetScope
	lru    list.List // of *budgetScope, least recently used first
	stats  BudgetStats
}

// BudgetStats counts the tenant budgets' decisions.
type BudgetStats struct {
	Allowed, Denied uint64
	// Evicted counts scopes forgotten to stay within MaxBudgetScopes.
	Evicted uint64
	// Scopes is the number of scopes tracked.
	Scopes int
}

func newBudgets(cfg *TenantBudgets, maxScopes int) *budgets {
	if cfg == nil {
		return nil
	}
	if maxScopes <= 0 {
		maxScopes = DefaultMaxBudgetScopes
	}
	return &budgets{cfg: cfg, max: maxScopes, scopes: make(map[scopeKey]*budgetScope)}
}

// reserve takes tokens and one request from every scope of tenant's
// policy that applies to model. When a scope cannot afford it, nothing is
// taken and it returns false with the wait after which every scope could,
// rounded up to whole seconds (at least one), or 0 when some scope never
// can.
func (b *budgets) reserve(t instant, tenant, model string, tokens uint64) (reservation, time.Duration, bool) {
	pol, ok := b.cfg.Tenants[tenant]
	if !ok {
		pol = b.cfg.Default
	}
	res := reservation{tokens: tokens}
	res.scopes[0] = b.scope(t, scopeKey{tenant, ""}, pol.TokensPerMinute, pol.RequestsPerMinute)
	if rule := pol.Rule(model); rule != nil {
		res.scopes[1] = b.scope(t, scopeKey{tenant, rule.ID}, rule.TokensPerMinute, rule.RequestsPerMinute)
	}
	ask := float64(tokens)
	var wait time.Duration
	never, short := false, false
	for _, sc := range res.scopes {
		if sc == nil {
			continue
		}
		for _, need := range [...]struct {
			b *bucket
			n float64
		}{{&sc.tokens, ask}, {&sc.requests, 1}} {
			if need.b.has(t, need.n) {
				continue
			}
			short = true
			d, can := need.b.wait(t, need.n)
			never = never || !can
			wait = max(wait, d)
		}
	}
	if short {
		b.stats.Denied++
		if never {
			return reservation{}, 0, false
		}
		return reservation{}, max(time.Second, ceilSeconds(wait)), false
	}
	for _, sc := range res.scopes {
		if sc != nil {
			sc.tokens.take(t, ask)
			sc.requests.take(t, 1)
		}
	}
	b.stats.Allowed++
	return res, 0, true
}

// settle charges res's scopes the difference between the tokens used and
// those reserved; the token buckets may go into debt.
func (b *budgets) settle(t instant, res reservation, used uint64) {
	delta := float64(res.tokens) - float64(used)
	for _, sc := range res.scopes {
		if sc != nil {
			sc.tokens.give(t, delta)
		}
	}
}

// scope returns the scope of key, creating it full (and forgetting the
// least recently used one beyond the bound), and marks it most recently
// used.
func (b *budgets) scope(t instant, key scopeKey, tokensPerMinute, requestsPerMinute uint32) *budgetScope {
	if sc := b.scopes[key]; sc != nil {
		b.lru.MoveToBack(sc.used)
		return sc
	}
	if len(b.scopes) >= b.max {
		old := b.lru.Remove(b.lru.Front()).(*budgetScope)
		delete(b.scopes, old.key)
		b.stats.Evicted++
	}
	tpm, rpm := float64(tokensPerMinute), float64(requestsPerMinute)
	sc := &budgetScope{key: key, tokens: newBucket(tpm, tpm/60, t), requests: newBucket(rpm, rpm/60, t)}
	sc.used = b.lru.PushBack(sc)
	b.scopes[key] = sc
	return sc
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) time.Duration {
	secs := math.Ceil(d.Seconds())
	return time.Duration(secs) * time.Second
}

// Usage settles the tenant budgets of in-flight request id to the tokens
// its worker reported (prompt plus completion); only the first report
// counts. IDs that are unknown, queued or without a reservation are
// ignored.
func (s *Scheduler) Usage(now time.Time, id uint64, promptTokens, completionTokens uint64) []Action {
	s.actions = s.actions[:0]
	t := s.at(now)
	if s.lateShed {
		s.pass(t)
	}
	e := s.entries[id]
	if e == nil || e.state != stateInFlight || s.budgets == nil || e.budget.scopes[0] == nil {
		return s.actions
	}
	used := promptTokens + completionTokens
	if used < promptTokens { // wrapped
		used = math.MaxUint64
	}
	s.budgets.settle(t, e.budget, used)
	e.budget = reservation{}
	return s.actions
}
