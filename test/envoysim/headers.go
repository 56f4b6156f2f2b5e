package envoysim

import (
	"net/http"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// headerEntry is one header line. Keys are always lower case.
type headerEntry struct {
	key, value string
}

// headerMap is an ordered, multi-valued header map like Envoy's HeaderMap:
// keys are lower case and pseudo-headers (":method", ":status", ...) are
// ordinary entries.
type headerMap struct {
	entries []headerEntry
}

// hopByHop lists connection-specific headers that neither reach the
// ext_proc server nor cross the proxy.
var hopByHop = []string{
	"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te",
}

// get returns the first value of key.
func (m *headerMap) get(key string) (string, bool) {
	for _, e := range m.entries {
		if e.key == key {
			return e.value, true
		}
	}
	return "", false
}

// add appends a value for key.
func (m *headerMap) add(key, value string) {
	m.entries = append(m.entries, headerEntry{strings.ToLower(key), value})
}

// set replaces every value of key by value, keeping the position of the first
// one, or appends it.
func (m *headerMap) set(key, value string) {
	key = strings.ToLower(key)
	i := slices.IndexFunc(m.entries, func(e headerEntry) bool { return e.key == key })
	if i < 0 {
		m.add(key, value)
		return
	}
	m.entries[i].value = value
	rest := slices.DeleteFunc(m.entries[i+1:], func(e headerEntry) bool { return e.key == key })
	m.entries = m.entries[:i+1+len(rest)]
}

// remove deletes every value of key.
func (m *headerMap) remove(key string) {
	key = strings.ToLower(key)
	m.entries = slices.DeleteFunc(m.entries, func(e headerEntry) bool { return e.key == key })
}

// byteSize is Envoy's HeaderMap::byteSize: the sum of key and value lengths.
func (m *headerMap) byteSize() int {
	n := 0
	for _, e := range m.entries {
		n += len(e.key) + len(e.value)
	}
	return n
}

// proto renders the map as Envoy sends it: lower-case keys, value in
// raw_value, value empty.
func (m *headerMap) proto() *corev3.HeaderMap {
	hm := &corev3.HeaderMap{Headers: make([]*corev3.HeaderValue, 0, len(m.entries))}
	for _, e := range m.entries {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: e.key, RawValue: []byte(e.value)})
	}
	return hm
}

// httpHeader returns the non-pseudo entries as an http.Header with canonical
// keys, or nil when there are none.
func (m *headerMap) httpHeader() http.Header {
	var h http.Header
	for _, e := range m.entries {
		if strings.HasPrefix(e.key, ":") {
			continue
		}
		if h == nil {
			h = http.Header{}
		}
		h.Add(e.key, e.value)
	}
	return h
}

// addHTTP appends the entries of h in sorted key order, lower-casing keys and
// dropping hop-by-hop headers and the keys in skip.
func (m *headerMap) addHTTP(h http.Header, skip ...string) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		lk := strings.ToLower(k)
		if slices.Contains(hopByHop, lk) || slices.Contains(skip, lk) {
			continue
		}
		for _, v := range h[k] {
			m.add(lk, v)
		}
	}
}

// headerMapFromHTTP converts trailers or other plain headers; it returns nil
// when h has no value.
func headerMapFromHTTP(h http.Header) *headerMap {
	m := &headerMap{}
	m.addHTTP(h)
	if len(m.entries) == 0 {
		return nil
	}
	return m
}

// validHeaderName reports whether name is acceptable in a mutation: an
// RFC 9110 token, optionally after one leading ':' for pseudo-headers.
// Upper-case letters are allowed, as in Envoy (keys are lower-cased later).
func validHeaderName(name string) bool {
	name = strings.TrimPrefix(name, ":")
	if name == "" {
		return false
	}
	for i := range len(name) {
		if !isTokenChar(name[i]) {
			return false
		}
	}
	return true
}

// isTokenChar reports whether c is an RFC 9110 tchar.
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// validHeaderValue reports whether v is acceptable as a header value: no NUL,
// CR or LF.
func validHeaderValue(v string) bool {
	return !strings.ContainsAny(v, "\x00\r\n")
}
