package policy

import "strings"

// HeaderAuthorization carries the bearer token that tenant keys are
// resolved from (Tenants.Resolve).
const HeaderAuthorization = "authorization"

// fixedRequestHeaders are the request headers the policy inputs read,
// the configurable tenant header aside.
var fixedRequestHeaders = [...]string{
	HeaderAuthorization,
	HeaderSMGPriority,
	HeaderPolicyClass,
	HeaderStrictPriority, HeaderRequestPriority,
	HeaderWorkerInstanceID, HeaderWorkerInstanceIDAlias,
	HeaderDPRank, HeaderDPRankAlias, HeaderDataParallelRankAlias,
	HeaderFairnessID, HeaderFairnessIDLegacy,
	HeaderObjective, HeaderObjectiveLegacy,
}

// RequestHeaders returns the lower-case names of every request header the
// policy inputs read: the Lookup each function here is given asks for no
// other, and the headers whose values the shell passes in (authorization,
// x-smg-priority, x-dynamo-meta-policy-class and the tenant header) are
// among them. tenantHeader is the trusted tenant header (Tenants.HeaderName;
// empty means DefaultTenantHeader). A shell that keeps only some request
// headers must keep these. The slice is the caller's.
func RequestHeaders(tenantHeader string) []string {
	if tenantHeader == "" {
		tenantHeader = DefaultTenantHeader
	}
	return append(fixedRequestHeaders[:len(fixedRequestHeaders):len(fixedRequestHeaders)], strings.ToLower(tenantHeader))
}
