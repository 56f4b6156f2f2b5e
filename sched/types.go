package sched

import (
	"math/rand/v2"
	"strconv"
	"time"
)

// Defaults from the references.
const (
	// DefaultMaxRunningRequests is the SMG slot count of a worker that does
	// not state max_running_requests.
	DefaultMaxRunningRequests = 64
	// DefaultMaxBatchedTokens is Dynamo's max_num_batched_tokens for a worker
	// that does not state it: in practice never busy by fraction.
	DefaultMaxBatchedTokens = 10_000_000
	// DefaultFallbackCapacity is the SMG capacity with no ready worker.
	DefaultFallbackCapacity = 1024
	// DefaultBlockSize is the KV block size in tokens.
	DefaultBlockSize = 16
)

// Worker is one model server instance. It expands into DP ranks
// [DPStart, DPStart+DPSize).
type Worker struct {
	// ID is what pins name; unique in a worker set.
	ID string
	// Model is the served model name; empty serves every model.
	Model  string
	Taints []string
	// DPSize is the number of data-parallel ranks; 0 means 1.
	DPSize  uint32
	DPStart uint32
	// MaxRunningRequests is the worker's SMG slot count; 0 means
	// DefaultMaxRunningRequests.
	MaxRunningRequests uint32
	// MaxBatchedTokens is the worker's max_num_batched_tokens; 0 means
	// DefaultMaxBatchedTokens.
	MaxBatchedTokens uint64
	// Role is the worker's part in prefill/decode disaggregation.
	Role Role
}

// Role is a worker's part in prefill/decode disaggregation.
type Role uint8

// Roles.
const (
	// RoleBoth serves whole requests, and the prefill half of split ones.
	RoleBoth Role = iota
	// RolePrefill serves only the prefill half of split requests: it is
	// never a request's destination.
	RolePrefill
	// RoleDecode serves whole requests and the decode half of split
	// ones, never a prefill half.
	RoleDecode
	// NumRoles counts the roles (a sentinel, not a role).
	NumRoles
)

var roleNames = [NumRoles]string{"both", "prefill", "decode"}

// String returns the workers file's spelling.
func (r Role) String() string { return enumName(roleNames[:], r, "role") }

// Pin names the exact worker, and optionally the DP rank, a request must run on.
type Pin struct {
	Worker  string
	Rank    uint32
	HasRank bool
}

// CachedTokens is how many of a request's prompt tokens one worker holds in
// its prefix cache.
type CachedTokens struct {
	Worker string
	Tokens uint64
}

// Request is what the shell knows about one inference request when it
// submits it.
type Request struct {
	// ID is chosen by the shell and unique among live requests.
	ID    uint64
	Model string
	// Class is the requested Dynamo policy class or family
	// (x-dynamo-meta-policy-class), trimmed; empty when absent.
	Class string
	// Priority is the effective SMG class, after the tenant clamp.
	Priority Priority
	// StrictPriority is the client's strict-priority hint when
	// HasStrictPriority is set (0 otherwise). It orders requests only
	// within their effective Priority: the lane order is the Priority
	// first, then this hint, so no hint lifts a request above its class.
	StrictPriority    uint32
	HasStrictPriority bool
	// PriorityJump is Dynamo's priority_jump in seconds (clamped to >= 0).
	PriorityJump float64
	// ISL is the prompt length in tokens.
	ISL uint64
	// Cached lists per-worker prefix-cache hits; workers not listed have 0.
	// The scheduler copies it.
	Cached []CachedTokens
	// Pin, when non-nil, requires that exact worker (and rank).
	Pin *Pin
	// RequiredTaints must all be carried by an eligible worker.
	RequiredTaints []string
	// AllowedWorkers, when not empty, restricts the eligible workers to
	// the listed IDs (the data plane's endpoint subset); an ID outside the
	// worker set is ignored. Empty means every worker. The scheduler copies
	// it.
	AllowedWorkers []string
	// Tenant is the request's canonical tenant key; the tenant budgets
	// (Config.TenantBudgets) are kept per tenant.
	Tenant string
	// Arrival is when the request reached tollgate; the zero value means
	// the Submit time. A flat policy class's deadline counts from it.
	Arrival time.Time
	// FairnessKey names the request's flow inside its lane when
	// Config.Fairness is enabled (the tenant or fairness-id); ignored
	// otherwise. The scheduler keeps a reference while the request is
	// queued.
	FairnessKey string
	// Resumed marks a request an earlier scheduler admitted past SMG's
	// request bucket and the tenant budgets, re-registered after a change
	// of scheduler: it skips both, and its queue wait, deadline and FCFS
	// order count from Arrival (not from the Submit).
	Resumed bool
}

// Booking is where an in-flight request runs, for Adopt: the rank that
// serves it, the prefill rank of a split request (zero for none), and
// whether its first token arrived.
type Booking struct {
	Worker     string
	Rank       uint32
	Prefill    RankRef
	FirstToken bool
}

// ActionKind says what the shell must do.
type ActionKind uint8

// Action kinds.
const (
	// ActionDispatch: route request ID to Worker (and Rank).
	ActionDispatch ActionKind = iota + 1
	// ActionReject: answer request ID with Outcome (except
	// OutcomeClientCancelled, which only reports a release); it holds
	// nothing.
	ActionReject
	// ActionPreempt: end in-flight request ID (the victim) with the
	// preemption answer, then report Release for it.
	ActionPreempt
	// ActionQueue: request ID is queued; it carries ID, Priority (the
	// effective class), Model and PolicyClass. Submit appends it as its
	// last action when the submitted request is still queued at the end
	// of the call, never when it was dispatched or rejected within the
	// call. A request reported queued later gets exactly one
	// ActionDispatch or ActionReject, unless the shell releases it first.
	ActionQueue
	// NumActionKinds counts the action kinds (a sentinel, not a kind).
	NumActionKinds
)

var actionKindNames = [NumActionKinds]string{
	"unknown", "dispatch", "reject", "preempt", "queue",
}

// String returns the kind's snake_case name; out of range it returns
// "action_kind(N)".
func (k ActionKind) String() string { return enumName(actionKindNames[:], k, "action_kind") }

// Outcome says why a request left the queue without being dispatched, or
// names a dispatch.
type Outcome uint8

// Outcomes. The shell maps each to one HTTP answer.
const (
	OutcomeUnknown Outcome = iota
	// OutcomeAdmitted: dispatched.
	OutcomeAdmitted
	// OutcomeQueueFull: the SMG class queue is at queue_size (429).
	OutcomeQueueFull
	// OutcomeQueueTimeout: waited queue_timeout_secs (503).
	OutcomeQueueTimeout
	// OutcomeClassLimit: a Dynamo per-worker queue limit (529 Overloaded).
	OutcomeClassLimit
	// OutcomeNoEndpoints: no eligible worker (503). Message says why.
	OutcomeNoEndpoints
	// OutcomePinInvalid: the pinned worker or rank is not eligible (503).
	// Message has the upstream text.
	OutcomePinInvalid
	// OutcomePreempted: the victim of a preemption (503 scheduler_preempted).
	OutcomePreempted
	// OutcomeShutdown: the scheduler is draining (503 + Retry-After).
	OutcomeShutdown
	// OutcomeClientCancelled: the shell released the request while it was
	// queued (its client went away); Release reports it with its Wait, to
	// be counted only: there is nobody to answer.
	OutcomeClientCancelled
	// OutcomeRateLimited: SMG's request-rate check before priority
	// admission found its bucket empty (429 scheduler_queue_full).
	OutcomeRateLimited
	// OutcomeAdmissionFull: SMG's legacy admission had no token and no
	// room to wait (429 admission_queue_full). Message has the upstream text.
	OutcomeAdmissionFull
	// OutcomeAdmissionTimeout: waited --queue-timeout-secs in SMG's legacy
	// admission queue (503 admission_queue_timeout).
	OutcomeAdmissionTimeout
	// OutcomeTenantRateLimited: a tenant budget cannot afford the request
	// (429 tenant_rate_limit_exceeded); RetryAfter says when it could.
	OutcomeTenantRateLimited
	// OutcomeDeadlineExceeded: a flat policy class's SLO deadline passed
	// (529 Overloaded); Stage, SLO and Overdue say where and by how much.
	OutcomeDeadlineExceeded
	// OutcomeUnknownClass: a flat profile has no class of the requested
	// name (400).
	OutcomeUnknownClass
	// NumOutcomes counts the outcomes (a sentinel, not an outcome).
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{
	"unknown", "admitted", "queue_full", "queue_timeout", "class_limit",
	"no_endpoints", "pin_invalid", "preempted", "shutdown", "client_cancelled",
	"rate_limited", "admission_full", "admission_timeout", "tenant_rate_limited",
	"deadline_exceeded", "unknown_class",
}

// String returns the outcome's stable snake_case name; out of range it
// returns "outcome(N)".
func (o Outcome) String() string { return enumName(outcomeNames[:], o, "outcome") }

// LimitKind names a Dynamo per-worker queue limit.
type LimitKind uint8

// Limit kinds, in the order they are checked.
const (
	LimitNone LimitKind = iota
	LimitRequests
	LimitRawISLTokens
	LimitCachedTokens
	// NumLimitKinds counts the limit kinds (a sentinel, not a kind).
	NumLimitKinds
)

var (
	limitKindNames   = [NumLimitKinds]string{"none", "requests", "raw_isl_tokens", "cached_tokens"}
	limitKindReasons = [NumLimitKinds]string{"none", "request_limit", "raw_isl_token_limit", "cached_token_limit"}
)

// String returns the limit_kind value of Dynamo's 529 body; out of range it
// returns "limit_kind(N)".
func (k LimitKind) String() string { return enumName(limitKindNames[:], k, "limit_kind") }

// Reason returns the reason label of dynamo_frontend_router_queue_backpressure_total;
// out of range it returns "limit_kind(N)".
func (k LimitKind) Reason() string { return enumName(limitKindReasons[:], k, "limit_kind") }

// DeadlineStage names where a flat policy class's deadline was found
// passed, as Dynamo names its stages.
type DeadlineStage uint8

// Deadline stages. tollgate has no parked custom-admission work, so it
// never reports Dynamo's deferred_wake.
const (
	StageNone DeadlineStage = iota
	// StageAdmission: the request was already late when it would have
	// entered its queue (it waited in SMG's admission queue, or arrived late).
	StageAdmission
	// StageDispatch: the request reached its deadline while queued.
	StageDispatch
	// NumDeadlineStages counts the stages (a sentinel, not a stage).
	NumDeadlineStages
)

var deadlineStageNames = [NumDeadlineStages]string{"none", "admission", "dispatch"}

// String returns the stage label of Dynamo's
// dynamo_frontend_router_queue_deadline_expired_total.
func (g DeadlineStage) String() string { return enumName(deadlineStageNames[:], g, "deadline_stage") }

// Action is one thing the shell must do as a result of a call.
type Action struct {
	Kind ActionKind
	// ID is the request acted on (the victim, for ActionPreempt).
	ID uint64
	// Worker and Rank are set for ActionDispatch.
	Worker string
	Rank   uint32
	// Outcome is OutcomeAdmitted for a dispatch, the reason for a reject,
	// OutcomePreempted for a preemption.
	Outcome Outcome
	// Priority is the request's effective SMG class; for ActionPreempt it
	// is the victim's, and By is the preemptor's.
	Priority Priority
	By       Priority
	// Model and PolicyClass name the Dynamo queue the request was
	// classified into (metric labels).
	Model       string
	PolicyClass string
	// Queued is true when the request waited in a queue; Wait is how long.
	Queued bool
	Wait   time.Duration
	// Limit details for OutcomeClassLimit.
	LimitKind    LimitKind
	LimitCurrent uint64
	LimitValue   uint64
	// Message explains OutcomeNoEndpoints, OutcomePinInvalid and
	// OutcomeAdmissionFull, with the upstream error text.
	Message string
	// Deadline details for OutcomeDeadlineExceeded: the stage, the class's
	// SLO and how far past the deadline the request was.
	Stage   DeadlineStage
	SLO     time.Duration
	Overdue time.Duration
	// RetryAfter is, for OutcomeTenantRateLimited, when the budgets could
	// afford the request; 0 when waiting cannot help (the ask exceeds a
	// budget's capacity).
	RetryAfter time.Duration
	// Preemptible is set on a dispatch that can still be preempted until
	// its first token: priority admission is on and some class above the
	// request's may preempt. The shell holds such a request's response
	// headers so that a preemption can still answer it.
	Preemptible bool
	// Cost snapshot taken at Submit, for dispatches.
	ISL      uint64
	Cached   uint64
	Uncached uint64
	// Prefill names, for a dispatch split into prefill and decode, the
	// rank that runs the prefill half; Worker and Rank run the decode half.
	// Its Worker is empty for a whole request.
	Prefill RankRef
	// Fallbacks are, for an unpinned dispatch with Config.Fallbacks > 0,
	// the next-best eligible workers by the same selection cost (each at
	// its cheapest rank), best first, none of them Worker. The slice is
	// the scheduler's: it is valid until the scheduler's next call.
	Fallbacks []RankRef
}

// RankRef names one DP rank of one worker.
type RankRef struct {
	Worker string
	Rank   uint32
}

// MaxFallbacks bounds Config.Fallbacks.
const MaxFallbacks = 8

// SelectionConfig tunes worker selection (Dynamo's cost function).
type SelectionConfig struct {
	// PrefillLoadScale multiplies the prefill term (default 1.0).
	PrefillLoadScale float64
	// OverlapCredit weights cached blocks against prefill (default 1.0).
	OverlapCredit float64
	// Temperature > 0 samples a softmax over normalized costs; 0 picks
	// the lowest cost, ties broken at random.
	Temperature float64
}

// Config configures a Scheduler. Zero values take the documented defaults.
type Config struct {
	// Policy is the Dynamo policy configuration.
	Policy PolicyConfig
	// Priority is the SMG priority admission configuration.
	Priority PriorityConfig
	// FallbackCapacity is the SMG capacity while no worker is known
	// (--max-concurrent-requests); 0 means DefaultFallbackCapacity.
	FallbackCapacity uint32
	// BlockSize is the KV block size in tokens; 0 means DefaultBlockSize.
	BlockSize uint64
	// Selection tunes worker selection; nil means DefaultSelection(). A
	// non-nil value is used as given, zeros included (prefill scale 0 is
	// a decode-only cost).
	Selection *SelectionConfig
	// Engine switches the use of engine-reported load (ReportLoad); the
	// zero value uses none of it.
	Engine EngineConfig
	// Rand breaks selection ties; nil means a fixed seed.
	Rand *rand.Rand
	// Fallbacks is how many next-best workers a dispatch names besides
	// its own (Action.Fallbacks), at most MaxFallbacks; 0 names none.
	Fallbacks int
	// Start is the scheduler's start time, the origin of FCFS scores.
	Start time.Time
	// Fairness turns on flows inside lanes (fair share between the keys
	// of one policy class); the zero value keeps Dynamo's lanes.
	Fairness FairnessConfig
	// Admission is SMG's request bucket: the rate check with priority
	// admission, the legacy admission without it. The zero value has none.
	Admission AdmissionConfig
	// TenantBudgets, when non-nil, holds every tenant to its token and
	// request budgets.
	TenantBudgets *TenantBudgets
	// MaxBudgetScopes bounds the tenant budgets tracked at once; 0 means
	// DefaultMaxBudgetScopes.
	MaxBudgetScopes int
	// PDThreshold is the uncached prompt tokens on its decode worker at
	// which a request is split into prefill and decode, when the fleet has
	// prefill-role workers; 0 means DefaultPDThreshold.
	PDThreshold uint64
}

// DefaultPDThreshold is the nonCachedTokens of the example in llm-d's
// prefix-based-pd-decider README (the plugin's own default, 0, turns it off).
const DefaultPDThreshold = 512

// AdmissionConfig is SMG's request bucket (--max-concurrent-requests,
// --rate-limit-tokens-per-second, --queue-size, --queue-timeout-secs).
type AdmissionConfig struct {
	// Capacity is the bucket's size; 0 means no bucket. With priority
	// admission on the bucket exists only when RatePerSecond is positive
	// too: it is then a pure request-rate check (burst Capacity, refill
	// RatePerSecond, tokens never returned). Without priority admission it
	// is SMG's legacy admission: a request holds a token until it ends,
	// and RatePerSecond also refills the bucket.
	Capacity uint32
	// RatePerSecond refills the bucket; 0 means no refill.
	RatePerSecond uint32
	// QueueSize is how many requests may wait for a legacy token, in
	// arrival order; 0 means none wait.
	QueueSize uint32
	// QueueTimeout is the longest legacy wait (> 0 when QueueSize > 0).
	QueueTimeout time.Duration
}

// DefaultSelection returns Dynamo's defaults: prefill_load_scale 1.0,
// overlap_score_credit 1.0, router_temperature 0.
func DefaultSelection() SelectionConfig {
	return SelectionConfig{PrefillLoadScale: 1, OverlapCredit: 1}
}

// enumName returns names[v], or "kind(v)" for a v out of range.
func enumName[T ~uint8](names []string, v T, kind string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return kind + "(" + strconv.Itoa(int(v)) + ")"
}
