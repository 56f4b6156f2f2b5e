package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/sched"
)

// Request headers the policy inputs come from. Names are lower case, as
// Envoy delivers them.
const (
	HeaderPolicyClass           = "x-dynamo-meta-policy-class"
	HeaderStrictPriority        = "x-dynamo-request-strict-priority"
	HeaderRequestPriority       = "x-dynamo-request-priority"
	HeaderWorkerInstanceID      = "x-dynamo-worker-instance-id"
	HeaderWorkerInstanceIDAlias = "x-worker-instance-id"
	HeaderDPRank                = "x-dynamo-dp-rank"
	HeaderDPRankAlias           = "x-dp-rank"
	HeaderDataParallelRankAlias = "x-data-parallel-rank"
	HeaderSMGPriority           = "x-smg-priority"
)

// bearerPrefix starts a metadata value that upstream drops as a credential.
const bearerPrefix = "bearer "

// Lookup returns the first value of the named request header and whether
// the header is present. The shell builds it over the request's headers.
type Lookup func(name string) (value string, ok bool)

// AgentHints are the nvext.agent_hints fields of the request body; nil
// means absent.
type AgentHints struct {
	Priority           *int32
	StrictPriority     *uint32
	LatencySensitivity *float64
}

// PolicyClass returns the requested Dynamo policy class or family: the
// x-dynamo-meta-policy-class value, trimmed; "" when absent. Like any
// metadata value upstream, one that starts with "bearer " (any case) is
// dropped, so a credential pasted into the wrong header is never used.
func PolicyClass(v string, present bool) string {
	if !present {
		return ""
	}
	v = strings.TrimSpace(v)
	if len(v) >= len(bearerPrefix) && equalFoldASCII(v[:len(bearerPrefix)], bearerPrefix) {
		return ""
	}
	return v
}

// ParseStrictPriority reads an x-dynamo-request-strict-priority value: an
// unsigned 32-bit integer after trimming. ok is false for a malformed
// value, which the caller treats as absent (the body hint applies).
func ParseStrictPriority(v string) (tier uint32, ok bool) {
	u, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(v), "+"), 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(u), true
}

// ParseRequestPriority reads an x-dynamo-request-priority value: a signed
// 32-bit integer after trimming. ok is false for a malformed value, which
// the caller treats as absent.
func ParseRequestPriority(v string) (priority int32, ok bool) {
	i, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(i), true
}

// PriorityInputs resolves a request's Dynamo ordering inputs. The strict
// tier is the strict-priority header when it is well formed, else the body's
// strict_priority; hasStrict is false when neither is given (the scheduler
// then uses the SMG class rank). The priority jump is the priority header
// when well formed, else the body's priority, else the deprecated
// latency_sensitivity, clamped to >= 0 (non-finite values count as 0).
func PriorityInputs(lookup Lookup, hints AgentHints) (strict uint32, hasStrict bool, jump float64) {
	if v, ok := lookup(HeaderStrictPriority); ok {
		strict, hasStrict = ParseStrictPriority(v)
	}
	if !hasStrict && hints.StrictPriority != nil {
		strict, hasStrict = *hints.StrictPriority, true
	}
	var p *int32
	if v, ok := lookup(HeaderRequestPriority); ok {
		if i, ok := ParseRequestPriority(v); ok {
			p = &i
		}
	}
	if p == nil {
		p = hints.Priority
	}
	switch {
	case p != nil:
		jump = float64(max(0, *p))
	case hints.LatencySensitivity != nil:
		jump = *hints.LatencySensitivity
	}
	if !(jump > 0) || math.IsInf(jump, 0) {
		jump = 0
	}
	return strict, hasStrict, jump
}

// PinError is a malformed pin header; the shell answers 400 with its text.
type PinError struct {
	// Header is the header read, Value its raw value, and Reason what is
	// wrong with it.
	Header, Value, Reason string
}

func (e *PinError) Error() string {
	return fmt.Sprintf("invalid %s header %q: %s", e.Header, e.Value, e.Reason)
}

// PinHeaders are a request's worker pin headers, read and checked once
// (ParsePinHeaders); Pin joins them with the body's hints.
type PinHeaders struct {
	// Worker is the trimmed worker header; "" when none was sent.
	Worker string
	// Rank is the rank header, when HasRank.
	Rank    uint32
	HasRank bool
}

// ParsePinHeaders reads the pin headers. The worker header is
// x-dynamo-worker-instance-id, else its alias x-worker-instance-id; the
// rank header is x-dynamo-dp-rank, else x-dp-rank, else
// x-data-parallel-rank. The first present header of each group is the one
// read; its value is trimmed. A worker header that is empty, has spaces or
// is not visible ASCII, and a rank header that is not an unsigned 32-bit
// integer, are a *PinError, even when no pin results.
func ParsePinHeaders(lookup Lookup) (PinHeaders, error) {
	var h PinHeaders
	if name, v, ok := first(lookup, HeaderWorkerInstanceID, HeaderWorkerInstanceIDAlias); ok {
		t := strings.TrimSpace(v)
		if t == "" || !visibleASCII(t) || strings.ContainsAny(t, " \t") {
			return PinHeaders{}, &PinError{Header: name, Value: v, Reason: "must be a worker id (visible ASCII, no spaces)"}
		}
		h.Worker = t
	}
	if name, v, ok := first(lookup, HeaderDPRank, HeaderDPRankAlias, HeaderDataParallelRankAlias); ok {
		r, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(v), "+"), 10, 32)
		if err != nil {
			return PinHeaders{}, &PinError{Header: name, Value: v, Reason: "must be an unsigned 32-bit integer"}
		}
		h.Rank, h.HasRank = uint32(r), true
	}
	return h, nil
}

// Pin resolves the exact worker (and DP rank) a request must run on. The
// headers take precedence over the body's nvext.backend_instance_id
// (bodyWorker, "" when absent) and nvext.dp_rank (bodyRank, nil when
// absent), field by field. It returns nil when no worker is named; a rank
// alone pins nothing, as upstream.
func (h PinHeaders) Pin(bodyWorker string, bodyRank *uint32) *sched.Pin {
	worker := bodyWorker
	if h.Worker != "" {
		worker = h.Worker
	}
	if worker == "" {
		return nil
	}
	pin := &sched.Pin{Worker: worker}
	switch {
	case h.HasRank:
		pin.Rank, pin.HasRank = h.Rank, true
	case bodyRank != nil:
		pin.Rank, pin.HasRank = *bodyRank, true
	}
	return pin
}

// first returns the first present header among names.
func first(lookup Lookup, names ...string) (name, value string, ok bool) {
	for _, n := range names {
		if v, ok := lookup(n); ok {
			return n, v, true
		}
	}
	return "", "", false
}
