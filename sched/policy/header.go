package policy

import (
	"fmt"
	"strings"

	"github.com/tollgate/tollgate/sched"
)

// ParsePriorityHeader reads the x-smg-priority request header. v is its
// first value and present says whether the header was sent at all.
//
// Surrounding ASCII whitespace is trimmed, then the value is matched
// against system, interactive, default and bulk ignoring ASCII case. An
// absent header, an empty or whitespace-only value, and a value that is not
// visible ASCII (which upstream cannot read as text) all give the default
// class and are not unknown. Any other value that names no class gives the
// default class with unknown set: the request is never rejected for it, and
// the caller counts it in smg_scheduler_unknown_priority_value_total.
//
// Trimming happens before the visible-ASCII check, so "\tinteractive\n"
// parses as upstream's parser unit test expects; a header carrying CR or
// LF cannot reach the server through a proxy anyway.
func ParsePriorityHeader(v string, present bool) (p sched.Priority, unknown bool) {
	if !present {
		return sched.PriorityDefault, false
	}
	v = trimASCIISpace(v)
	if v == "" || !visibleASCII(v) {
		return sched.PriorityDefault, false
	}
	if p, ok := parsePriorityFold(v); ok {
		return p, false
	}
	return sched.PriorityDefault, true
}

// ParseDefaultMaxClass parses --priority-scheduler-default-max-class; empty
// means the flag's default, "default". Upstream reads the flag with the
// header parser, so a typo silently becomes "default". Here an unknown value
// is an error, so that check-config reports the typo instead of quietly
// capping every unlisted tenant at the default class.
func ParseDefaultMaxClass(s string) (sched.Priority, error) {
	t := trimASCIISpace(s)
	if t == "" {
		return sched.PriorityDefault, nil
	}
	if p, ok := parsePriorityFold(t); ok {
		return p, nil
	}
	return sched.PriorityDefault, fmt.Errorf("invalid --priority-scheduler-default-max-class %q: must be one of system, interactive, default, bulk", s)
}

// Clamp applies the tenant clamp: the effective class is the lower of the
// requested class and the tenant's max_class (its tenant_policies entry in
// file, or defaultMax when it has none or file is nil). clamped reports a
// lowered class, which the caller counts in smg_scheduler_clamp_total.
func Clamp(requested sched.Priority, tenant string, file *PriorityFile, defaultMax sched.Priority) (effective sched.Priority, clamped bool) {
	limit := file.MaxClass(tenant, defaultMax)
	if requested > limit {
		return limit, true
	}
	return requested, false
}

// parsePriorityFold matches a class name ignoring ASCII case.
func parsePriorityFold(s string) (sched.Priority, bool) {
	for p := range sched.Priority(sched.NumPriorities) {
		if equalFoldASCII(s, p.String()) {
			return p, true
		}
	}
	return sched.PriorityDefault, false
}

// equalFoldASCII compares ignoring ASCII case only: unlike strings.EqualFold,
// "ſystem" (with U+017F) does not match "system".
func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lowerASCII(a[i]) != lowerASCII(b[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

// trimASCIISpace removes leading and trailing ASCII whitespace.
func trimASCIISpace(s string) string {
	return strings.Trim(s, " \t\n\v\f\r")
}

// visibleASCII reports whether every byte of s is a tab or printable ASCII,
// the bytes an HTTP header value may hold to be read as text.
func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '\t' && (c < 0x20 || c > 0x7e) {
			return false
		}
	}
	return true
}
