package sched

// TenantBudgets is SMG's per-tenant rate limit (--tenant-rate-limit-config):
// a token and a request budget per tenant, plus at most one model rule's
// budgets per request. Every budget is a bucket that starts full and
// refills continuously at its per-minute value / 60 per second.
type TenantBudgets struct {
	// Default applies to every tenant not listed in Tenants.
	Default BudgetPolicy
	// Tenants maps a canonical tenant key (auth:<id>, header:<id>,
	// ip:<addr>, anonymous) to its policy.
	Tenants map[string]BudgetPolicy
}

// BudgetPolicy is one tenant's budgets.
type BudgetPolicy struct {
	// TokensPerMinute and RequestsPerMinute are the tenant-global budgets
	// (> 0).
	TokensPerMinute   uint32
	RequestsPerMinute uint32
	// Rules are the per-model scopes on top of the tenant-global one. An
	// exact match beats a prefix, the longest prefix wins, and at most
	// one rule applies to a request.
	Rules []ModelRule
}

// ModelRule is one model_rules entry.
type ModelRule struct {
	// ID is the rule_id, unique within its tenant.
	ID string
	// Prefix makes Value a model-name prefix; otherwise Value is the exact
	// model name.
	Prefix bool
	Value  string
	// TokensPerMinute and RequestsPerMinute are the rule's own budgets (> 0).
	TokensPerMinute   uint32
	RequestsPerMinute uint32
}

// Rule returns the rule of p that applies to model: the exact match, else
// the longest matching prefix, else nil.
func (p *BudgetPolicy) Rule(model string) *ModelRule {
	var best *ModelRule
	for i := range p.Rules {
		r := &p.Rules[i]
		switch {
		case !r.Prefix && r.Value == model:
			return r
		case r.Prefix && len(r.Value) <= len(model) && model[:len(r.Value)] == r.Value:
			if best == nil || len(r.Value) > len(best.Value) {
				best = r
			}
		}
	}
	return best
}
