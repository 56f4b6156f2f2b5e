package envoysim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// routingHeaders may not be changed without mutation_rules.allow_all_routing.
var routingHeaders = []string{"host", ":authority", ":method", ":scheme"}

// mutationAllowed applies Envoy's default mutation_rules to setting key:
// routing headers and x-envoy-* are rejected (silently ignored).
func mutationAllowed(key string) bool {
	return !slices.Contains(routingHeaders, key) && !strings.HasPrefix(key, "x-envoy-")
}

// removalAllowed applies the default rules to removing key: in addition to
// the set rules, pseudo-headers and host can never be removed.
func removalAllowed(key string) bool {
	return !strings.HasPrefix(key, ":") && mutationAllowed(key)
}

// mutationOptions tell applyHeaderMutation what the caller's state allows.
type mutationOptions struct {
	// replacing is true for a CONTINUE_AND_REPLACE response, which may change
	// :method.
	replacing bool
	// skipContentLength drops content-length sets, as Envoy does when the
	// body may be mutated.
	skipContentLength bool
}

// applyHeaderMutation applies mut to h with Envoy's rules and returns the
// error Envoy turns into a status_on_error local reply. Rejected but
// tolerated mutations are counted as rejected_header_mutations. On error h
// may be partly mutated, as in Envoy; the caller then discards it.
func (s *Sim) applyHeaderMutation(mut *extprocv3.HeaderMutation, h *headerMap, opt mutationOptions) error {
	limit := s.cfg.maxHeadersCount
	if len(mut.GetRemoveHeaders()) > limit || len(mut.GetSetHeaders()) > limit {
		s.stats.inc(statRejectedHeaderMutations)
		return rejectf("Header mutation remove header count %d or set header count %d exceed the HCM header count limit %d",
			len(mut.GetRemoveHeaders()), len(mut.GetSetHeaders()), limit)
	}
	for _, name := range mut.GetRemoveHeaders() {
		if !validHeaderName(name) {
			s.stats.inc(statRejectedHeaderMutations)
			return rejectf("Invalid character in remove_headers mutation.")
		}
		key := strings.ToLower(name)
		if !removalAllowed(key) {
			s.stats.inc(statRejectedHeaderMutations)
			continue
		}
		h.remove(key)
	}
	for _, sh := range mut.GetSetHeaders() {
		hv := sh.GetHeader()
		if hv == nil {
			continue
		}
		key := strings.ToLower(hv.GetKey())
		if opt.skipContentLength && key == "content-length" {
			continue
		}
		// Envoy reads raw_value only (mutation_utils.cc:204 since 1.32): a
		// value next to it is ignored, and a mutation that fills only value
		// sets an empty header.
		value := string(hv.GetRawValue())
		if !validHeaderName(hv.GetKey()) || !validHeaderValue(value) {
			s.stats.inc(statRejectedHeaderMutations)
			return rejectf("Invalid character in set_headers mutation.")
		}
		allowed := mutationAllowed(key) || (opt.replacing && key == ":method")
		if key == ":status" && !validStatus(value) {
			allowed = false
		}
		if !allowed {
			s.stats.inc(statRejectedHeaderMutations)
			continue
		}
		// Only the deprecated append BoolValue counts; append_action is
		// ignored by ext_proc.
		if sh.GetAppend().GetValue() { //nolint:staticcheck // deprecated, yet the only flag ext_proc reads
			h.add(key, value)
		} else {
			h.set(key, value)
		}
	}
	if h.byteSize() > s.cfg.maxHeadersBytes || len(h.entries) > limit {
		s.stats.inc(statRejectedHeaderMutations)
		return rejectf("Header mutation causes end result header count %d or header size %d bytes, exceeding the count limit %d or the size limit %d kilobytes",
			len(h.entries), h.byteSize(), limit, s.cfg.maxHeadersBytes/1024)
	}
	return nil
}

// validStatus reports whether v is a three-digit HTTP status in [200, 599].
func validStatus(v string) bool {
	n, err := strconv.Atoi(v)
	return err == nil && len(v) == 3 && n >= 200 && n <= 599
}

// applyBodyMutation returns body after m: body replaces it, clear_body empties
// it, anything else (including streamed_response) leaves it unchanged.
func applyBodyMutation(m *extprocv3.BodyMutation, body []byte) []byte {
	switch v := m.GetMutation().(type) {
	case *extprocv3.BodyMutation_Body:
		return append([]byte{}, v.Body...)
	case *extprocv3.BodyMutation_ClearBody:
		if v.ClearBody {
			return []byte{}
		}
	}
	return body
}

// checkContentLength reproduces Envoy's BUFFERED-mode check: a body mutation
// whose length differs from the content-length header is an error.
func checkContentLength(h *headerMap, m *extprocv3.BodyMutation) error {
	v, ok := h.get("content-length")
	if !ok {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n == len(m.GetBody()) {
		return nil
	}
	return rejectf("mismatch between content length and the length of the mutated body")
}

// rejection is a response Envoy refuses to apply. details holds Envoy's own
// message, which becomes the local reply's response code details.
type rejection struct {
	details string
}

// Error implements error.
func (r *rejection) Error() string {
	return "envoysim: ext_proc response rejected: " + r.details
}

// rejectf returns a rejection with Envoy's message.
func rejectf(format string, args ...any) error {
	return &rejection{details: fmt.Sprintf(format, args...)}
}

// responseDetails renders a message as Envoy's %RESPONSE_CODE_DETAILS%, which
// replaces white space with underscores.
func responseDetails(msg string) string {
	return strings.Join(strings.Fields(msg), "_")
}
