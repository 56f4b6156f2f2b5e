package policy

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tollgate/tollgate/sched"
)

// Flow-control request headers of the Gateway API Inference Extension and
// llm-d. The older x-gateway-inference-* names are read when the newer one
// is absent.
const (
	HeaderFairnessID       = "x-llm-d-inference-fairness-id"
	HeaderFairnessIDLegacy = "x-gateway-inference-fairness-id"
	HeaderObjective        = "x-llm-d-inference-objective"
	HeaderObjectiveLegacy  = "x-gateway-inference-objective"
)

// MaxFairnessIDBytes bounds a fairness-id or objective header value.
const MaxFairnessIDBytes = 256

// FairnessMode says where a request's fairness key comes from
// (--fairness).
type FairnessMode uint8

// Fairness modes.
const (
	// FairnessNone: no flows; every lane is Dynamo's single queue.
	FairnessNone FairnessMode = iota
	// FairnessTenant: the resolved tenant key.
	FairnessTenant
	// FairnessHeader: the fairness-id header, the tenant key when absent.
	FairnessHeader
)

// String returns the --fairness value.
func (m FairnessMode) String() string {
	switch m {
	case FairnessNone:
		return "none"
	case FairnessTenant:
		return "tenant"
	case FairnessHeader:
		return "header"
	}
	return fmt.Sprintf("fairness(%d)", uint8(m))
}

// ParseFairnessMode parses --fairness: none, tenant or header.
func ParseFairnessMode(s string) (FairnessMode, error) {
	switch s {
	case "", "none":
		return FairnessNone, nil
	case "tenant":
		return FairnessTenant, nil
	case "header":
		return FairnessHeader, nil
	}
	return FairnessNone, fmt.Errorf("invalid --fairness %q: must be none, tenant or header", s)
}

// FairnessKey returns a request's fairness key under mode: the tenant key,
// or with FairnessHeader the first non-empty of the fairness-id headers
// (trimmed), falling back to the tenant key when neither is sent. Header
// values and tenant keys share one namespace (and one set of weights). A header value longer than
// MaxFairnessIDBytes or not visible ASCII is an error naming the header.
func FairnessKey(mode FairnessMode, lookup Lookup, tenant string) (string, error) {
	switch mode {
	case FairnessNone:
		return "", nil
	case FairnessTenant:
		return tenant, nil
	case FairnessHeader:
	}
	v, err := flowHeader(lookup, HeaderFairnessID, HeaderFairnessIDLegacy)
	if err != nil || v == "" {
		return tenant, err
	}
	return v, nil
}

// flowHeader returns the first non-empty (trimmed) value of the headers
// names, checked by checkFlowValue; "" when none is sent.
func flowHeader(lookup Lookup, names ...string) (string, error) {
	for _, name := range names {
		v, ok := lookup(name)
		if !ok {
			continue
		}
		if v = trimASCIISpace(v); v == "" {
			continue
		}
		if err := checkFlowValue(name, v); err != nil {
			return "", err
		}
		return v, nil
	}
	return "", nil
}

// checkFlowValue bounds a client-supplied fairness-id or objective value.
func checkFlowValue(name, v string) error {
	if len(v) > MaxFairnessIDBytes {
		return &HeaderError{Header: name, Message: fmt.Sprintf("%s is %d bytes long, more than %d", name, len(v), MaxFairnessIDBytes)}
	}
	if !visibleASCII(v) {
		return &HeaderError{Header: name, Message: fmt.Sprintf("%s must be visible ASCII", name)}
	}
	return nil
}

// HeaderError is a malformed flow-control header (a 400 answer).
type HeaderError struct {
	Header, Message string
}

func (e *HeaderError) Error() string { return e.Message }

// Objectives maps objective names (the objective header's values) to
// priority classes (--objective-class NAME=CLASS).
type Objectives map[string]sched.Priority

// ParseObjective parses one NAME=CLASS mapping, CLASS being system,
// interactive, default or bulk.
func ParseObjective(s string) (name string, p sched.Priority, err error) {
	name, class, ok := strings.Cut(s, "=")
	name = trimASCIISpace(name)
	if !ok || name == "" {
		return "", 0, fmt.Errorf("invalid --objective-class %q: want NAME=CLASS", s)
	}
	if len(name) > MaxFairnessIDBytes || !visibleASCII(name) {
		return "", 0, fmt.Errorf("invalid --objective-class %q: the name must be visible ASCII of at most %d bytes", s, MaxFairnessIDBytes)
	}
	p, ok = parsePriorityFold(trimASCIISpace(class))
	if !ok {
		return "", 0, fmt.Errorf("invalid --objective-class %q: class must be one of system, interactive, default, bulk", s)
	}
	return name, p, nil
}

// Objective returns the priority class the request's objective header maps
// to: the first non-empty of the objective headers, trimmed. found is false
// when no objective header is sent, its value is not in o (not an error:
// the request keeps its class), or o is empty; an overlong or non-ASCII
// value is an error naming the header.
func (o Objectives) Objective(lookup Lookup) (p sched.Priority, found bool, err error) {
	if len(o) == 0 {
		return 0, false, nil
	}
	v, err := flowHeader(lookup, HeaderObjective, HeaderObjectiveLegacy)
	if err != nil || v == "" {
		return 0, false, err
	}
	p, found = o[v]
	return p, found, nil
}

// MaxObjectives bounds the objective names one mapping holds: the
// --objective-class entries and the InferenceObjective objects together.
const MaxObjectives = 1024

// ObjectiveClass maps an InferenceObjective's integer spec.priority onto a
// priority class: negative is bulk, zero or unset (nil) is default, and
// positive is interactive. system is never derived from an object; only an
// explicit --objective-class maps a name to it. The rule keeps the API's
// order (a higher priority is never served after a lower one) and its
// zero point (an unset priority counts as 0).
func ObjectiveClass(priority *int64) sched.Priority {
	switch {
	case priority == nil || *priority == 0:
		return sched.PriorityDefault
	case *priority < 0:
		return sched.PriorityBulk
	}
	return sched.PriorityInteractive
}

// CheckObjectiveName reports why name cannot be an objective name: empty,
// longer than MaxFairnessIDBytes, or not visible ASCII without spaces at
// either end (a header value is trimmed, so it could never match).
func CheckObjectiveName(name string) error {
	switch {
	case name == "":
		return errors.New("the objective name is empty")
	case len(name) > MaxFairnessIDBytes:
		return fmt.Errorf("the objective name is %d bytes long, more than %d", len(name), MaxFairnessIDBytes)
	case !visibleASCII(name) || trimASCIISpace(name) != name:
		return fmt.Errorf("the objective name %q is not visible ASCII without surrounding spaces", name)
	}
	return nil
}

// Validate reports every problem with o, joined: more than MaxObjectives
// names, a bad name, or an unknown class.
func (o Objectives) Validate() error {
	var errs []error
	if len(o) > MaxObjectives {
		errs = append(errs, fmt.Errorf("%d objectives, more than %d", len(o), MaxObjectives))
	}
	for _, name := range slices.Sorted(maps.Keys(o)) {
		if err := CheckObjectiveName(name); err != nil {
			errs = append(errs, err)
		}
		if p := o[name]; p >= sched.NumPriorities {
			errs = append(errs, fmt.Errorf("objective %q: class %d is not a priority class", name, p))
		}
	}
	return errors.Join(errs...)
}
