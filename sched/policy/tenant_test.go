package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func mustTenants(t *testing.T, o TenantOptions) *Tenants {
	t.Helper()
	tn, err := NewTenants(o)
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestTenants_ResolveWithKeys(t *testing.T) {
	tn := mustTenants(t, TenantOptions{
		TenantAPIKeys: []string{"acme:acme-secret", "team-red:red:secret:with:colons", "both:shared-secret"},
		APIKey:        "shared-secret",
		TrustHeader:   true,
	})
	if !tn.AuthEnabled() {
		t.Fatal("AuthEnabled = false")
	}
	for _, tt := range []struct {
		name, authorization, header, ip string
		want                            string
		wantErr                         error
	}{
		{"per-tenant key", "Bearer acme-secret", "", "", "auth:acme", nil},
		{"key containing colons", "Bearer red:secret:with:colons", "", "", "auth:team-red", nil},
		{"per-tenant key wins over the same shared key", "Bearer shared-secret", "", "", "auth:both", nil},
		{"scheme is case-insensitive", "bearer acme-secret", "", "", "auth:acme", nil},
		{"upper-case scheme", "BEARER acme-secret", "", "", "auth:acme", nil},
		{"extra spaces", "  Bearer   acme-secret  ", "", "", "auth:acme", nil},
		{"auth beats the trusted header", "Bearer acme-secret", "team-blue", "10.0.0.1", "auth:acme", nil},
		{"missing token", "", "team-blue", "10.0.0.1", "", ErrMissingAPIKey},
		{"empty bearer", "Bearer ", "", "", "", ErrMissingAPIKey},
		{"other scheme", "Basic YWxhZGRpbjpvcGVuc2VzYW1l", "", "", "", ErrMissingAPIKey},
		{"unknown token", "Bearer nope", "", "", "", ErrInvalidAPIKey},
		{"key prefix is not the key", "Bearer acme-secre", "", "", "", ErrInvalidAPIKey},
		{"keys are case-sensitive", "Bearer ACME-SECRET", "", "", "", ErrInvalidAPIKey},
	} {
		got, err := tn.Resolve(tt.authorization, tt.header, tt.ip)
		if got != tt.want || !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: Resolve = %q, %v; want %q, %v", tt.name, got, err, tt.want, tt.wantErr)
		}
		if tt.wantErr != nil && !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s: %v does not wrap ErrUnauthorized", tt.name, err)
		}
	}
}

func TestTenants_SharedKeyHashesToTenant(t *testing.T) {
	tn := mustTenants(t, TenantOptions{APIKey: "shared-secret"})
	got, err := tn.Resolve("Bearer shared-secret", "", "")
	if want := "auth:" + sha256Hex("shared-secret"); err != nil || got != want {
		t.Fatalf("Resolve = %q, %v; want %q", got, err, want)
	}
	if len(got) != len("auth:")+64 || strings.ToLower(got) != got {
		t.Errorf("tenant %q is not auth:<64 lower-case hex>", got)
	}
	if _, err := tn.Resolve("", "", "10.0.0.1"); !errors.Is(err, ErrMissingAPIKey) {
		t.Errorf("no token with a shared key configured: err = %v", err)
	}
}

func TestTenants_ResolveWithoutKeys(t *testing.T) {
	trusted := mustTenants(t, TenantOptions{TrustHeader: true})
	untrusted := mustTenants(t, TenantOptions{})
	if trusted.AuthEnabled() || untrusted.AuthEnabled() {
		t.Fatal("AuthEnabled without keys")
	}
	for _, tt := range []struct {
		name                      string
		tn                        *Tenants
		authorization, header, ip string
		want                      string
	}{
		{"trusted header", trusted, "", "team-red", "10.0.0.1", "header:team-red"},
		{"trusted header is trimmed", trusted, "", "  team-red\t", "", "header:team-red"},
		{"bearer is ignored without keys", trusted, "Bearer x", "team-red", "", "header:team-red"},
		{"blank header falls through to ip", trusted, "", "   ", "10.0.0.1", "ip:10.0.0.1"},
		{"non-ASCII header falls through", trusted, "", "équipe", "10.0.0.1", "ip:10.0.0.1"},
		{"untrusted header is ignored", untrusted, "", "team-red", "10.0.0.1", "ip:10.0.0.1"},
		{"ip with port", untrusted, "", "", "203.0.113.42:443", "ip:203.0.113.42"},
		{"ipv6", untrusted, "", "", "2001:db8::1", "ip:2001:db8::1"},
		{"ipv6 with port", untrusted, "", "", "[2001:db8::1]:8080", "ip:2001:db8::1"},
		{"ipv6 zone dropped", untrusted, "", "", "fe80::1%eth0", "ip:fe80::1"},
		{"ipv4-mapped ipv6", untrusted, "", "", "::ffff:10.0.0.1", "ip:::ffff:10.0.0.1"},
		{"unparseable address", untrusted, "", "", "not-an-ip", "anonymous"},
		{"nothing", untrusted, "", "", "", "anonymous"},
	} {
		got, err := tt.tn.Resolve(tt.authorization, tt.header, tt.ip)
		if err != nil || got != tt.want {
			t.Errorf("%s: Resolve = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

func TestNewTenants_HeaderName(t *testing.T) {
	if got := mustTenants(t, TenantOptions{}).HeaderName(); got != "x-smg-tenant-id" {
		t.Errorf("default header = %q", got)
	}
	if got := mustTenants(t, TenantOptions{HeaderName: "X-Org-ID"}).HeaderName(); got != "x-org-id" {
		t.Errorf("header = %q, want lower case", got)
	}
	if !mustTenants(t, TenantOptions{TrustHeader: true}).TrustHeader() {
		t.Error("TrustHeader = false")
	}
	if _, err := NewTenants(TenantOptions{HeaderName: "x org"}); err == nil || err.Error() != `invalid --tenant-header-name "x org": not a valid HTTP header name` {
		t.Errorf("err = %v", err)
	}
}

func TestNewTenants_FlagErrors(t *testing.T) {
	for _, tt := range []struct {
		keys []string
		want string
	}{
		{[]string{"acme"}, "invalid --tenant-api-key: want ID:KEY, found no colon"},
		{[]string{":secret"}, "invalid --tenant-api-key: empty tenant id before the colon"},
		{[]string{"acme:"}, `invalid --tenant-api-key: empty key for tenant id "acme"`},
		{[]string{"ac me:secret"}, `invalid --tenant-api-key: tenant id "ac me" must be visible ASCII without spaces`},
		{[]string{"acme:one", "acme:two"}, `invalid --tenant-api-key: tenant id "acme" is given more than once`},
		{[]string{"acme:same", "beta:same"}, `invalid --tenant-api-key: tenants "acme" and "beta" have the same key`},
	} {
		_, err := NewTenants(TenantOptions{TenantAPIKeys: tt.keys})
		if err == nil || err.Error() != tt.want {
			t.Errorf("NewTenants(%q) error = %v, want %s", tt.keys, err, tt.want)
		}
		if err != nil && (strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "same\"") || strings.Contains(err.Error(), "one")) {
			t.Errorf("error %q echoes a key", err)
		}
	}
}

func TestParseTenantAPIKey(t *testing.T) {
	id, key, err := ParseTenantAPIKey("acme:k:e:y")
	if err != nil || id != "acme" || key != "k:e:y" {
		t.Errorf("ParseTenantAPIKey = %q, %q, %v", id, key, err)
	}
}
