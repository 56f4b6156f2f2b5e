package policy

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// DefaultTenantHeader is the default --tenant-header-name, SMG's.
const DefaultTenantHeader = "x-smg-tenant-id"

// AnonymousTenant is the tenant key of a request with no other identity.
const AnonymousTenant = "anonymous"

// Authentication failures. Both wrap ErrUnauthorized; the shell answers 401
// and may tell a missing token from a wrong one.
var (
	ErrUnauthorized  = errors.New("unauthorized")
	ErrMissingAPIKey = fmt.Errorf("%w: missing API key: send it as Authorization: Bearer <key>", ErrUnauthorized)
	ErrInvalidAPIKey = fmt.Errorf("%w: invalid API key", ErrUnauthorized)
)

// TenantOptions are the flags that decide tenant identity.
type TenantOptions struct {
	// TenantAPIKeys are --tenant-api-key values, each "ID:KEY". A request
	// bearing KEY is tenant "auth:ID".
	TenantAPIKeys []string
	// APIKey is the shared --api-key; empty means none. A request bearing
	// it is tenant "auth:<lower-case hex SHA-256 of the key>".
	APIKey string
	// TrustHeader (--trust-tenant-header) takes the tenant from the
	// HeaderName request header when no key is configured.
	TrustHeader bool
	// HeaderName is --tenant-header-name; empty means DefaultTenantHeader.
	// It is matched case-insensitively and stored in lower case.
	HeaderName string
}

// Tenants resolves the tenant key of a request, SMG's canonical identity
// used for the tenant clamp and the tenant metric label. It is immutable
// and safe for concurrent use.
type Tenants struct {
	keys        []tenantKey // per-tenant keys, in flag order
	shared      *tenantKey  // the shared --api-key, if any
	trustHeader bool
	headerName  string
}

// tenantKey is one configured key, stored only as its SHA-256.
type tenantKey struct {
	hash   [sha256.Size]byte
	tenant string
}

// NewTenants validates the tenant flags. Errors name the flag and the
// tenant id but never echo a key.
func NewTenants(o TenantOptions) (*Tenants, error) {
	t := &Tenants{trustHeader: o.TrustHeader, headerName: DefaultTenantHeader}
	if o.HeaderName != "" {
		if !isToken(o.HeaderName) {
			return nil, fmt.Errorf("invalid --tenant-header-name %q: not a valid HTTP header name", o.HeaderName)
		}
		t.headerName = strings.ToLower(o.HeaderName)
	}
	ids := make(map[string]bool, len(o.TenantAPIKeys))
	hashes := make(map[[sha256.Size]byte]string, len(o.TenantAPIKeys))
	for _, flag := range o.TenantAPIKeys {
		id, key, err := ParseTenantAPIKey(flag)
		if err != nil {
			return nil, err
		}
		if ids[id] {
			return nil, fmt.Errorf("invalid --tenant-api-key: tenant id %q is given more than once", id)
		}
		ids[id] = true
		h := sha256.Sum256([]byte(key))
		if other, dup := hashes[h]; dup {
			return nil, fmt.Errorf("invalid --tenant-api-key: tenants %q and %q have the same key", other, id)
		}
		hashes[h] = id
		t.keys = append(t.keys, tenantKey{hash: h, tenant: "auth:" + id})
	}
	if o.APIKey != "" {
		h := sha256.Sum256([]byte(o.APIKey))
		t.shared = &tenantKey{hash: h, tenant: "auth:" + hex.EncodeToString(h[:])}
	}
	return t, nil
}

// ParseTenantAPIKey splits one --tenant-api-key value "ID:KEY" at its first
// colon, so the key may itself contain colons. The id must be non-empty
// visible ASCII without spaces (it becomes part of the tenant key and a
// metric label); the key must be non-empty.
func ParseTenantAPIKey(s string) (id, key string, err error) {
	id, key, ok := strings.Cut(s, ":")
	switch {
	case !ok:
		return "", "", errors.New("invalid --tenant-api-key: want ID:KEY, found no colon")
	case id == "":
		return "", "", errors.New("invalid --tenant-api-key: empty tenant id before the colon")
	case !isTenantID(id):
		return "", "", fmt.Errorf("invalid --tenant-api-key: tenant id %q must be visible ASCII without spaces", id)
	case key == "":
		return "", "", fmt.Errorf("invalid --tenant-api-key: empty key for tenant id %q", id)
	}
	return id, key, nil
}

// HeaderName returns the lower-case name of the trusted tenant header.
func (t *Tenants) HeaderName() string { return t.headerName }

// TrustHeader reports whether the tenant header is trusted.
func (t *Tenants) TrustHeader() bool { return t.trustHeader }

// AuthEnabled reports whether any API key is configured, in which case
// every request must carry a valid bearer token.
func (t *Tenants) AuthEnabled() bool { return len(t.keys) > 0 || t.shared != nil }

// Resolve returns the tenant key of a request from its Authorization header
// value, its tenant header value (the HeaderName header) and the client's
// address ("IP" or "IP:port"); empty strings mean absent. First match wins:
//
//  1. With keys configured, the bearer token decides: "auth:<id>" for a
//     per-tenant key, "auth:<sha256 hex>" for the shared key. A missing or
//     unknown token returns ErrMissingAPIKey or ErrInvalidAPIKey.
//  2. With TrustHeader, a non-empty trimmed tenant header: "header:<value>".
//  3. A parseable client address: "ip:<addr>".
//  4. Otherwise "anonymous".
//
// The token's SHA-256 is compared with every configured key's in constant
// time, so neither the match nor its position leaks through timing.
func (t *Tenants) Resolve(authorization, tenantHeader, clientIP string) (string, error) {
	if t.AuthEnabled() {
		token, ok := bearerToken(authorization)
		if !ok {
			return "", ErrMissingAPIKey
		}
		h := sha256.Sum256([]byte(token))
		match := ""
		for i := range t.keys {
			if subtle.ConstantTimeCompare(h[:], t.keys[i].hash[:]) == 1 && match == "" {
				match = t.keys[i].tenant
			}
		}
		if t.shared != nil && subtle.ConstantTimeCompare(h[:], t.shared.hash[:]) == 1 && match == "" {
			match = t.shared.tenant
		}
		if match == "" {
			return "", ErrInvalidAPIKey
		}
		return match, nil
	}
	if t.trustHeader {
		if v := trimASCIISpace(tenantHeader); v != "" && visibleASCII(v) {
			return "header:" + v, nil
		}
	}
	if addr, ok := parseClientAddr(clientIP); ok {
		return "ip:" + addr.String(), nil
	}
	return AnonymousTenant, nil
}

// bearerToken extracts the token of "Bearer <token>", the scheme matched
// ignoring case. A value that is not visible ASCII, another scheme, or an
// empty token is no token.
func bearerToken(authorization string) (string, bool) {
	v := trimASCIISpace(authorization)
	if !visibleASCII(v) {
		return "", false
	}
	scheme, rest, ok := strings.Cut(v, " ")
	if !ok || !equalFoldASCII(scheme, "bearer") {
		return "", false
	}
	token := trimASCIISpace(rest)
	return token, token != ""
}

// parseClientAddr reads an IP address, with or without a port, and drops
// the port and any IPv6 zone.
func parseClientAddr(s string) (netip.Addr, bool) {
	s = trimASCIISpace(s)
	if s == "" {
		return netip.Addr{}, false
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().WithZone(""), true
	}
	return netip.Addr{}, false
}

// isToken reports whether s is an HTTP token (RFC 9110), as a header name is.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// isTenantID reports whether s is visible ASCII without spaces.
func isTenantID(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
