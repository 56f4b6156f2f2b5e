package extproc

import (
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/tollgate/tollgate/extproc/answer"
	"github.com/tollgate/tollgate/sched/policy"
)

// Dynamo's request-metadata limits for x-dynamo-meta-* headers.
const (
	metaPrefix     = "x-dynamo-meta-"
	maxMetaEntries = 64
	maxMetaBytes   = 64 << 10
)

// Headers tollgate writes upstream.
const (
	// headerDestination is the routing header Envoy's ORIGINAL_DST cluster
	// (or override_host policy) reads; its value is the worker's IP:port.
	headerDestination = "x-gateway-destination-endpoint"
	// lbNamespace is the dynamic-metadata namespace carrying the same value.
	lbNamespace = "envoy.lb"
	// headerUpstreamRank carries the chosen DP rank to a multi-rank worker.
	// It is the header vLLM's OpenAI server reads to place a request on a
	// data-parallel rank, and so also one of the rank pin headers a client
	// may send.
	headerUpstreamRank = policy.HeaderDataParallelRankAlias
	// headerPrefiller names the prefill worker of a split request to the
	// decode worker's sidecar (llm-d's contract). Only tollgate sets it: a
	// client's value is always removed.
	headerPrefiller = "x-prefiller-host-port"
)

// headerInfo is what tollgate reads from the request headers. Values are
// the first value of each header, as upstream reads them.
type headerInfo struct {
	method, path string
	// values holds the first value of each kept header (readHeaders).
	values map[string]string
	// forwardedFor joins every x-forwarded-for value with ", ".
	forwardedFor string
	// bytes is the total size of names and values.
	bytes int
}

// lookup adapts the headers to policy.Lookup.
func (h *headerInfo) lookup(name string) (string, bool) {
	v, ok := h.values[name]
	return v, ok
}

// headerSet is a small set of lower-case header names, found by length and
// then compared: cheaper than hashing every header of every request.
type headerSet struct {
	byLen [][]string
}

func newHeaderSet(names ...string) headerSet {
	var s headerSet
	for _, n := range names {
		if len(n) >= len(s.byLen) {
			s.byLen = append(s.byLen, make([][]string, len(n)+1-len(s.byLen))...)
		}
		s.byLen[len(n)] = append(s.byLen[len(n)], n)
	}
	return s
}

func (s headerSet) has(name string) bool {
	if len(name) >= len(s.byLen) {
		return false
	}
	for _, n := range s.byLen[len(name)] {
		if n == name {
			return true
		}
	}
	return false
}

// readHeaders is the set of headers whose values parseHeaders keeps: every
// header the policy inputs read (policy.RequestHeaders, with the
// configured tenant header) and the test endpoint selection header. The
// pseudo-headers and x-forwarded-for are read apart.
func readHeaders(tenantHeader string) headerSet {
	return newHeaderSet(append(policy.RequestHeaders(tenantHeader), headerTestEndpointSelection)...)
}

// headerValue returns a header's value: raw_value, which Envoy sends, or
// value from older senders.
func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

// headerValueLen is len(headerValue(h)) without converting the value.
func headerValueLen(h *corev3.HeaderValue) int {
	if n := len(h.GetRawValue()); n > 0 {
		return n
	}
	return len(h.GetValue())
}

// parseHeaders reads the request headers and enforces the size limits: the
// number of entries (maxCount, so that empty entries count too), the
// total size of names and values (maxBytes), and Dynamo's limits of 64
// x-dynamo-meta-* entries and 64 KiB of metadata. Names are compared in lower
// case whatever the sender did. Of the other headers it keeps the values of
// those in keep (readHeaders).
func parseHeaders(hm *corev3.HeaderMap, keep headerSet, maxBytes, maxCount int) (*headerInfo, *answer.Rejection) {
	if n := len(hm.GetHeaders()); n > maxCount {
		return nil, &answer.Rejection{Reason: answer.ReasonHeadersTooLarge,
			Message: fmt.Sprintf("request has %d header entries, more than the limit of %d", n, maxCount)}
	}
	h := &headerInfo{values: make(map[string]string, 4)}
	metaEntries, metaBytes := 0, 0
	for _, hv := range hm.GetHeaders() {
		key := hv.GetKey()
		valLen := headerValueLen(hv)
		h.bytes += len(key) + valLen
		if h.bytes > maxBytes {
			return nil, &answer.Rejection{Reason: answer.ReasonHeadersTooLarge,
				Message: fmt.Sprintf("request headers exceed the limit of %d bytes", maxBytes)}
		}
		if hasUpper(key) {
			key = strings.ToLower(key)
		}
		switch {
		case key == ":method":
			if h.method == "" {
				h.method = headerValue(hv)
			}
			continue
		case key == ":path":
			if h.path == "" {
				h.path = headerValue(hv)
			}
			continue
		case key == "x-forwarded-for":
			if h.forwardedFor != "" {
				h.forwardedFor += ", "
			}
			h.forwardedFor += headerValue(hv)
			continue
		case strings.HasPrefix(key, metaPrefix):
			metaEntries++
			metaBytes += len(key) - len(metaPrefix) + valLen
			if metaEntries > maxMetaEntries {
				return nil, &answer.Rejection{Reason: answer.ReasonHeadersTooLarge,
					Message: fmt.Sprintf("too many %s* headers: more than %d", metaPrefix, maxMetaEntries)}
			}
			if metaBytes > maxMetaBytes {
				return nil, &answer.Rejection{Reason: answer.ReasonHeadersTooLarge,
					Message: fmt.Sprintf("%s* headers exceed %d bytes", metaPrefix, maxMetaBytes)}
			}
		}
		if keep.has(key) {
			if _, seen := h.values[key]; !seen {
				h.values[key] = headerValue(hv) // only the headers tollgate reads are converted
			}
		}
	}
	return h, nil
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// forwardedClient picks the client address from an x-forwarded-for list:
// the entry trustedHops places left of the rightmost one. It returns ""
// when the list is shorter.
func forwardedClient(xff string, trustedHops int) string {
	if xff == "" {
		return ""
	}
	parts := strings.Split(xff, ",")
	i := len(parts) - 1 - trustedHops
	if i < 0 {
		return ""
	}
	return strings.TrimSpace(parts[i])
}
