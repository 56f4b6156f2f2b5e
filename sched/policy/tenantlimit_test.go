package policy

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/sched"
)

// rlDefault is a valid default_policy, for documents about other parts.
const rlDefault = "default_policy: {tokens_per_minute: 100, requests_per_minute: 10}\n"

func TestParseTenantRateLimits_Example(t *testing.T) {
	tb, err := ParseTenantRateLimits(readExample(t, "tenant-rate-limits.yaml"), "tenant-rate-limits.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &sched.TenantBudgets{
		Default: sched.BudgetPolicy{TokensPerMinute: 120000, RequestsPerMinute: 600},
		Tenants: map[string]sched.BudgetPolicy{
			"auth:acme": {TokensPerMinute: 600000, RequestsPerMinute: 3000, Rules: []sched.ModelRule{
				{ID: "acme-large", Value: "llama-3-70b", TokensPerMinute: 200000, RequestsPerMinute: 600},
				{ID: "acme-llama", Prefix: true, Value: "llama-", TokensPerMinute: 400000, RequestsPerMinute: 2000},
			}},
			"auth:trial": {TokensPerMinute: 20000, RequestsPerMinute: 2},
			"anonymous":  {TokensPerMinute: 10000, RequestsPerMinute: 60},
		},
	}
	if diff := cmp.Diff(want, tb); diff != "" {
		t.Errorf("budgets (-want +got):\n%s", diff)
	}
}

// TestParseTenantRateLimits_Defaults checks the optional keys: tenants
// and model_rules default to none, null reads as absent, and the default
// policy may have rules of its own.
func TestParseTenantRateLimits_Defaults(t *testing.T) {
	for _, doc := range []string{
		rlDefault,
		rlDefault + "tenants: []\n",
		rlDefault + "tenants: ~\n",
		"default_policy: {tokens_per_minute: 100, requests_per_minute: 10, tenant_key: ~, model_rules: []}\n",
	} {
		tb, err := ParseTenantRateLimits([]byte(doc), "")
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		want := &sched.TenantBudgets{Default: sched.BudgetPolicy{TokensPerMinute: 100, RequestsPerMinute: 10}, Tenants: map[string]sched.BudgetPolicy{}}
		if diff := cmp.Diff(want, tb); diff != "" {
			t.Errorf("%q (-want +got):\n%s", doc, diff)
		}
	}
	doc := `default_policy:
  tokens_per_minute: 4294967295
  requests_per_minute: 1
  model_rules:
    - {rule_id: a.B_9-z, matcher: {type: prefix, value: gpt-}, tokens_per_minute: 0x10, requests_per_minute: 2}
    - {rule_id: "7", matcher: {type: exact, value: gpt-}, tokens_per_minute: 1, requests_per_minute: 1}
`
	tb, err := ParseTenantRateLimits([]byte(doc), "")
	if err != nil {
		t.Fatal(err)
	}
	want := sched.BudgetPolicy{TokensPerMinute: math.MaxUint32, RequestsPerMinute: 1, Rules: []sched.ModelRule{
		{ID: "a.B_9-z", Prefix: true, Value: "gpt-", TokensPerMinute: 16, RequestsPerMinute: 2},
		{ID: "7", Value: "gpt-", TokensPerMinute: 1, RequestsPerMinute: 1},
	}}
	if diff := cmp.Diff(want, tb.Default); diff != "" {
		t.Errorf("an exact and a prefix rule may share a value (-want +got):\n%s", diff)
	}
}

var tenantLimitErrorTests = []struct {
	name, doc string
	want      []string // the problems, each "LINE:COLUMN: problem"
}{
	// The document and its top level.
	{"empty", "", []string{"the document is empty; it needs a default_policy"}},
	{"null", "~\n", []string{"the document is empty; it needs a default_policy"}},
	{"syntax", "default_policy: [\n", []string{"1: did not find expected node content"}},
	{"two documents", rlDefault + "---\n" + rlDefault, []string{"2:1: more than one YAML document is not supported"}},
	{"root not a map", "- 1\n", []string{"1:1: invalid type: sequence, expected a map"}},
	{"unknown root key", rlDefault + "tenant: []\n", []string{
		`2:1: unknown field "tenant", expected one of default_policy, tenants`}},
	{"duplicate root key", rlDefault + rlDefault, []string{`2:1: duplicate key "default_policy"`}},
	{"missing default_policy", "tenants: []\n", []string{`1:1: missing field "default_policy"`}},
	{"null default_policy", "default_policy: ~\n", []string{`1:1: missing field "default_policy"`}},
	{"default_policy not a map", "default_policy: 5\n", []string{"1:17: default_policy: invalid type: integer 5, expected a map"}},

	// default_policy.
	{"default sets tenant_key", "default_policy: {tenant_key: auth:x, tokens_per_minute: 1, requests_per_minute: 1}\n", []string{
		"1:18: default_policy must not set tenant_key"}},
	{"default zero tokens", "default_policy: {tokens_per_minute: 0, requests_per_minute: 1}\n", []string{
		"1:37: policy 'default_policy': tokens_per_minute must be > 0"}},
	{"default zero requests", "default_policy: {tokens_per_minute: 1, requests_per_minute: 0x0}\n", []string{
		"1:61: policy 'default_policy': requests_per_minute must be > 0"}},
	{"default missing both", "default_policy: {model_rules: []}\n", []string{
		`1:17: default_policy: missing field "tokens_per_minute"`,
		`1:17: default_policy: missing field "requests_per_minute"`}},
	{"default null value", "default_policy:\n  tokens_per_minute:\n  requests_per_minute: 1\n", []string{
		`2:3: default_policy: missing field "tokens_per_minute"`}},
	{"default unknown key", "default_policy: {tokens_per_minute: 1, requests_per_minute: 1, tokens_per_second: 1}\n", []string{
		`1:64: default_policy: unknown field "tokens_per_second", expected one of tenant_key, tokens_per_minute, requests_per_minute, model_rules`}},

	// Integers.
	{"float", "default_policy: {tokens_per_minute: 1.0, requests_per_minute: 1}\n", []string{
		"1:37: default_policy.tokens_per_minute: invalid type: floating point 1.0, expected an integer in [1, 4294967295]"}},
	{"string", "default_policy: {tokens_per_minute: \"5\", requests_per_minute: 1}\n", []string{
		`1:37: default_policy.tokens_per_minute: invalid type: string "5", expected an integer in [1, 4294967295]`}},
	{"negative", "default_policy: {tokens_per_minute: -5, requests_per_minute: 1}\n", []string{
		"1:37: default_policy.tokens_per_minute: invalid value: integer -5, expected an integer in [1, 4294967295]"}},
	{"above u32", "default_policy: {tokens_per_minute: 4294967296, requests_per_minute: 1}\n", []string{
		"1:37: default_policy.tokens_per_minute: invalid value: integer 4294967296, expected an integer in [1, 4294967295]"}},
	{"boolean", "default_policy: {tokens_per_minute: 1, requests_per_minute: true}\n", []string{
		"1:61: default_policy.requests_per_minute: invalid type: boolean true, expected an integer in [1, 4294967295]"}},

	// tenants and tenant_key.
	{"tenants not a list", rlDefault + "tenants: {}\n", []string{"2:10: tenants: invalid type: map, expected a sequence"}},
	{"tenant not a map", rlDefault + "tenants: [auth:x]\n", []string{"2:11: tenants[0]: invalid type: string \"auth:x\", expected a map"}},
	{"tenant_key absent", rlDefault + "tenants:\n  - {tokens_per_minute: 1, requests_per_minute: 1}\n", []string{
		"3:5: tenants[0] is missing tenant_key"}},
	{"tenant_key null", rlDefault + "tenants:\n  - {tenant_key: ~, tokens_per_minute: 1, requests_per_minute: 1}\n", []string{
		"3:6: tenants[0] is missing tenant_key"}},
	{"tenant_key empty", rlDefault + "tenants:\n  - {tenant_key: '', tokens_per_minute: 1, requests_per_minute: 1}\n", []string{
		"3:18: tenants[0] is missing tenant_key"}},
	{"tenant_key blank", rlDefault + "tenants:\n  - {tenant_key: auth:a, tokens_per_minute: 1, requests_per_minute: 1}\n  - {tenant_key: '  ', tokens_per_minute: 1, requests_per_minute: 1}\n", []string{
		"4:18: tenants[1] is missing tenant_key"}},
	{"tenant_key padded", rlDefault + "tenants:\n  - {tenant_key: ' auth:a', tokens_per_minute: 1, requests_per_minute: 1}\n", []string{
		"3:18: tenant_key ' auth:a' must not have surrounding whitespace"}},
	{"tenant_key padded tab", rlDefault + "tenants:\n  - {tenant_key: \"auth:a\\t\", tokens_per_minute: 1, requests_per_minute: 1}\n", []string{
		`3:18: tenant_key 'auth:a\t' must not have surrounding whitespace`}},
	{"tenant_key not a string", rlDefault + "tenants:\n  - {tenant_key: [a], tokens_per_minute: 1, requests_per_minute: 1}\n", []string{
		"3:18: tenants[0].tenant_key: invalid type: sequence, expected a string"}},
	{"tenant_key duplicate", rlDefault + "tenants:\n  - {tenant_key: auth:a, tokens_per_minute: 1, requests_per_minute: 1}\n  - {tenant_key: auth:a, tokens_per_minute: 2, requests_per_minute: 2}\n", []string{
		"4:18: duplicate tenant_key 'auth:a' (first at line 3)"}},
	{"tenant unknown key", rlDefault + "tenants:\n  - {tenant: auth:a, tokens_per_minute: 1, requests_per_minute: 1}\n", []string{
		"3:5: tenants[0] is missing tenant_key",
		`3:6: tenants[0]: unknown field "tenant", expected one of tenant_key, tokens_per_minute, requests_per_minute, model_rules`}},
	{"tenant zero limits name the tenant", rlDefault + "tenants:\n  - {tenant_key: header:team-red, tokens_per_minute: 0, requests_per_minute: 0}\n", []string{
		"3:54: policy 'header:team-red': tokens_per_minute must be > 0",
		"3:78: policy 'header:team-red': requests_per_minute must be > 0"}},
	{"tenant without key is named by its place", rlDefault + "tenants:\n  - {tokens_per_minute: 0, requests_per_minute: 1}\n", []string{
		"3:5: tenants[0] is missing tenant_key",
		"3:25: policy 'tenants[0]': tokens_per_minute must be > 0"}},

	// model_rules.
	{"model_rules not a list", "default_policy: {tokens_per_minute: 1, requests_per_minute: 1, model_rules: x}\n", []string{
		`1:77: default_policy.model_rules: invalid type: string "x", expected a sequence`}},
	{"rule not a map", "default_policy: {tokens_per_minute: 1, requests_per_minute: 1, model_rules: [7]}\n", []string{
		"1:78: default_policy.model_rules[0]: invalid type: integer 7, expected a map"}},
	{"rule missing everything", "default_policy: {tokens_per_minute: 1, requests_per_minute: 1, model_rules: [{}]}\n", []string{
		`1:78: default_policy.model_rules[0]: missing field "rule_id"`,
		`1:78: default_policy.model_rules[0]: missing field "tokens_per_minute"`,
		`1:78: default_policy.model_rules[0]: missing field "requests_per_minute"`,
		`1:78: default_policy.model_rules[0]: missing field "matcher"`}},
	{"rule unknown key", rlTenantRules("{rule_id: r, matcher: {type: exact, value: m}, tokens_per_minute: 1, requests_per_minute: 1, model: m}"), []string{
		`7:102: tenants[0].model_rules[0]: unknown field "model", expected one of rule_id, matcher, tokens_per_minute, requests_per_minute`}},
	{"rule_id invalid", rlTenantRules("{rule_id: 'bad id!', matcher: {type: exact, value: m}, tokens_per_minute: 1, requests_per_minute: 1}"), []string{
		"7:19: policy 'auth:acme': rule_id 'bad id!' must match [A-Za-z0-9._-]+"}},
	{"rule_id empty", rlTenantRules("{rule_id: '', matcher: {type: exact, value: m}, tokens_per_minute: 1, requests_per_minute: 1}"), []string{
		"7:19: policy 'auth:acme': rule_id '' must match [A-Za-z0-9._-]+"}},
	{"rule_id duplicate", rlTenantRules(
		"{rule_id: r, matcher: {type: exact, value: a}, tokens_per_minute: 1, requests_per_minute: 1}",
		"{rule_id: r, matcher: {type: exact, value: b}, tokens_per_minute: 1, requests_per_minute: 1}"), []string{
		"8:19: policy 'auth:acme': duplicate rule_id 'r' (first at line 7)"}},
	{"rule zero limits", rlTenantRules("{rule_id: r, matcher: {type: exact, value: m}, tokens_per_minute: 0, requests_per_minute: 0}"), []string{
		"7:75: policy 'auth:acme': rule 'r' tokens_per_minute must be > 0",
		"7:99: policy 'auth:acme': rule 'r' requests_per_minute must be > 0"}},
	{"rule limit out of range", rlTenantRules("{rule_id: r, matcher: {type: exact, value: m}, tokens_per_minute: 1e3, requests_per_minute: 1}"), []string{
		"7:75: tenants[0].model_rules[0].tokens_per_minute: invalid type: floating point 1e3, expected an integer in [1, 4294967295]"}},
	{"matcher not a map", rlTenantRules("{rule_id: r, matcher: exact, tokens_per_minute: 1, requests_per_minute: 1}"), []string{
		`7:31: tenants[0].model_rules[0].matcher: invalid type: string "exact", expected a map`}},
	{"matcher missing keys", rlTenantRules("{rule_id: r, matcher: {}, tokens_per_minute: 1, requests_per_minute: 1}"), []string{
		`7:31: tenants[0].model_rules[0].matcher: missing field "type"`,
		`7:31: tenants[0].model_rules[0].matcher: missing field "value"`}},
	{"matcher unknown type", rlTenantRules("{rule_id: r, matcher: {type: regex, value: m}, tokens_per_minute: 1, requests_per_minute: 1}"), []string{
		`7:38: tenants[0].model_rules[0].matcher.type: unknown variant "regex", expected one of exact, prefix`}},
	{"matcher unknown key", rlTenantRules("{rule_id: r, matcher: {type: exact, value: m, values: [n]}, tokens_per_minute: 1, requests_per_minute: 1}"), []string{
		`7:55: tenants[0].model_rules[0].matcher: unknown field "values", expected one of type, value`}},
	{"matcher value empty", rlTenantRules("{rule_id: r, matcher: {type: prefix, value: ''}, tokens_per_minute: 1, requests_per_minute: 1}"), []string{
		"7:53: policy 'auth:acme': rule 'r' matcher value must not be empty"}},
	{"matcher value blank", rlTenantRules("{rule_id: r, matcher: {type: prefix, value: ' '}, tokens_per_minute: 1, requests_per_minute: 1}"), []string{
		"7:53: policy 'auth:acme': rule 'r' matcher value must not be empty"}},
	{"matcher value padded", rlTenantRules("{rule_id: r, matcher: {type: exact, value: 'gpt-4 '}, tokens_per_minute: 1, requests_per_minute: 1}"), []string{
		"7:52: policy 'auth:acme': rule 'r' matcher value 'gpt-4 ' must not have surrounding whitespace"}},
	{"duplicate exact", rlTenantRules(
		"{rule_id: a, matcher: {type: exact, value: m}, tokens_per_minute: 1, requests_per_minute: 1}",
		"{rule_id: b, matcher: {type: prefix, value: m}, tokens_per_minute: 1, requests_per_minute: 1}",
		"{rule_id: c, matcher: {type: exact, value: m}, tokens_per_minute: 1, requests_per_minute: 1}"), []string{
		"9:52: policy 'auth:acme': rule 'c' matcher duplicates rule 'a'"}},
	{"duplicate prefix", rlTenantRules(
		"{rule_id: a, matcher: {type: prefix, value: m}, tokens_per_minute: 1, requests_per_minute: 1}",
		"{rule_id: b, matcher: {type: prefix, value: m}, tokens_per_minute: 1, requests_per_minute: 1}"), []string{
		"8:53: policy 'auth:acme': rule 'b' matcher duplicates rule 'a'"}},
	{"rule without id is named by its place", rlTenantRules("{matcher: {type: exact, value: m}, tokens_per_minute: 0, requests_per_minute: 1}"), []string{
		`7:9: tenants[0].model_rules[0]: missing field "rule_id"`,
		"7:63: policy 'auth:acme': rule 'tenants[0].model_rules[0]' tokens_per_minute must be > 0"}},

	// Every problem at once, in the file's order.
	{"every problem", `default_policy:
  tenant_key: anonymous
  tokens_per_minute: 0
  requests_per_minute: 1.5
tenants:
  - tenant_key: acme
    tokens_per_minute: 1
    requests_per_minute: 1
    model_rules:
      - {rule_id: x, matcher: {type: exact, value: ""}, tokens_per_minute: 1, requests_per_minute: 1}
  - tenant_key: auth:b
    tokens_per_minute: 1
    requests_per_minute: 1
    extra: 1
`, []string{
		"2:3: default_policy must not set tenant_key",
		"3:22: policy 'default_policy': tokens_per_minute must be > 0",
		"4:24: default_policy.requests_per_minute: invalid type: floating point 1.5, expected an integer in [1, 4294967295]",
		"6:17: tenants[0].tenant_key 'acme' is not a canonical serving-path tenant key: want auth:<id>, header:<value>, ip:<address> or anonymous",
		"10:52: policy 'acme': rule 'x' matcher value must not be empty",
		`14:5: tenants[1]: unknown field "extra", expected one of tenant_key, tokens_per_minute, requests_per_minute, model_rules`,
	}},
}

// rlTenantRules is a document whose tenant auth:acme has the given model
// rules, one a line from line 7.
func rlTenantRules(rules ...string) string {
	return rlDefault + "tenants:\n  - tenant_key: auth:acme\n    tokens_per_minute: 1\n    requests_per_minute: 1\n    model_rules:\n" +
		"      - " + strings.Join(rules, "\n      - ") + "\n"
}

func TestParseTenantRateLimits_Errors(t *testing.T) {
	for _, tt := range tenantLimitErrorTests {
		t.Run(tt.name, func(t *testing.T) {
			tb, err := ParseTenantRateLimits([]byte(tt.doc), "t.yaml")
			if err == nil {
				t.Fatalf("accepted: %+v", tb)
			}
			want := "t.yaml:" + strings.Join(tt.want, "\nt.yaml:")
			if tt.want[0][0] < '0' || tt.want[0][0] > '9' {
				want = "t.yaml: " + tt.want[0] // no position
			}
			if got := err.Error(); got != want {
				t.Errorf("error\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestParseTenantRateLimits_CanonicalTenantKeys(t *testing.T) {
	const reason = "want auth:<id>, header:<value>, ip:<address> or anonymous"
	for key, why := range map[string]string{
		"anonymous":         "",
		"auth:acme":         "",
		"auth:a.b_c-D~!":    "",
		"header:team red":   "",
		"header:a\tb":       "",
		"header:x:y":        "",
		"ip:10.0.0.1":       "",
		"ip:2001:db8::1":    "",
		"ip:::ffff:1.2.3.4": "",
		"acme":              reason,
		"Anonymous":         reason,
		"AUTH:acme":         reason,
		"tenant:acme":       reason,
		"auth:":             "the id after auth: must be visible ASCII without spaces or colons",
		"auth:a b":          "the id after auth: must be visible ASCII without spaces or colons",
		"auth:a:b":          "the id after auth: must be visible ASCII without spaces or colons",
		"auth:é":            "the id after auth: must be visible ASCII without spaces or colons",
		"header:":           "the value after header: must be visible ASCII without surrounding whitespace",
		"header: acme":      "the value after header: must be visible ASCII without surrounding whitespace",
		"header:é":          "the value after header: must be visible ASCII without surrounding whitespace",
		"ip:":               "'' is not an IP address",
		"ip:10.0.0.300":     "'10.0.0.300' is not an IP address",
		"ip:10.0.0.1:80":    "'10.0.0.1:80' is not an IP address",
		"ip:2001:DB8::1":    "write it as 'ip:2001:db8::1'",
		"ip:2001:db8:0::1":  "write it as 'ip:2001:db8::1'",
		"ip:fe80::1%eth0":   "write it as 'ip:fe80::1'",
	} {
		if got := nonCanonicalTenantKey(key); got != why {
			t.Errorf("%q: %q, want %q", key, got, why)
		}
		if why == "" {
			checkProducedKey(t, key)
		}
	}
}

// checkProducedKey checks that Tenants.Resolve returns key for some
// request, so that an override with it can match.
func checkProducedKey(t *testing.T, key string) {
	t.Helper()
	opts := TenantOptions{TrustHeader: true}
	var auth, header, ip string
	switch kind, rest, _ := strings.Cut(key, ":"); kind {
	case "auth":
		opts = TenantOptions{TenantAPIKeys: []string{rest + ":secret"}}
		auth = "Bearer secret"
	case "header":
		header = rest
	case "ip":
		ip = rest
	}
	tenants, err := NewTenants(opts)
	if err != nil {
		t.Fatalf("%q: %v", key, err)
	}
	if got, err := tenants.Resolve(auth, header, ip); err != nil || got != key {
		t.Errorf("no request resolves to %q: got %q, %v", key, got, err)
	}
}

func TestParseTenantRateLimits_Bounds(t *testing.T) {
	var b strings.Builder
	b.WriteString(rlDefault + "tenants:\n")
	for i := range MaxRateLimitTenants + 1 {
		fmt.Fprintf(&b, "- {tenant_key: 'auth:t%d', tokens_per_minute: 1, requests_per_minute: 1}\n", i)
	}
	_, err := ParseTenantRateLimits([]byte(b.String()), "t.yaml")
	if want := "t.yaml:3:1: tenants: 10001 entries; at most 10000 are supported"; err == nil || err.Error() != want {
		t.Errorf("%d tenants: %v, want %s", MaxRateLimitTenants+1, err, want)
	}

	b.Reset()
	b.WriteString("default_policy:\n  tokens_per_minute: 1\n  requests_per_minute: 1\n  model_rules:\n")
	for i := range MaxRateLimitModelRules + 1 {
		fmt.Fprintf(&b, "  - {rule_id: r%d, matcher: {type: exact, value: m%d}, tokens_per_minute: 1, requests_per_minute: 1}\n", i, i)
	}
	_, err = ParseTenantRateLimits([]byte(b.String()), "t.yaml")
	if want := "t.yaml:5:3: default_policy.model_rules: 257 rules; at most 256 per policy are supported"; err == nil || err.Error() != want {
		t.Errorf("%d rules: %v, want %s", MaxRateLimitModelRules+1, err, want)
	}

	big := []byte(rlDefault + "#" + strings.Repeat("x", MaxTenantRateLimitFileBytes) + "\n")
	if _, err := ParseTenantRateLimits(big, ""); err == nil || err.Error() != "<inline>: larger than 4194304 bytes" {
		t.Errorf("a document over 4 MiB: %v", err)
	}
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, big, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTenantRateLimits(path); err == nil || err.Error() != path+": larger than 4194304 bytes" {
		t.Errorf("a file over 4 MiB: %v", err)
	}
}

// TestParseTenantRateLimits_AliasBound checks that a document past the
// reader's work bound is one problem, not one for every node after it.
func TestParseTenantRateLimits_AliasBound(t *testing.T) {
	var b strings.Builder
	b.WriteString("default_policy:\n  tokens_per_minute: 1\n  requests_per_minute: 1\n  model_rules: &r\n")
	for i := range MaxRateLimitModelRules {
		fmt.Fprintf(&b, "  - {rule_id: r%d, matcher: {type: exact, value: m%d}, tokens_per_minute: 1, requests_per_minute: 1}\n", i, i)
	}
	b.WriteString("tenants:\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "- {tenant_key: auth:t%d, tokens_per_minute: 1, requests_per_minute: 1, model_rules: *r}\n", i)
	}
	_, err := ParseTenantRateLimits([]byte(b.String()), "t.yaml")
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.HasSuffix(err.Error(), ": document is too large after alias expansion") {
		t.Errorf("alias expansion past the bound: %v", err)
	}
}

func TestLoadTenantRateLimits(t *testing.T) {
	tb, err := LoadTenantRateLimits(filepath.Join("..", "..", "examples", "tenant-rate-limits.yaml"))
	if err != nil || len(tb.Tenants) != 3 {
		t.Fatalf("example: %v, %+v", err, tb)
	}
	missing := filepath.Join(t.TempDir(), "none.yaml")
	if _, err := LoadTenantRateLimits(missing); err == nil || err.Error() != "reading "+missing+": no such file or directory" {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(rlDefault+"tenants: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTenantRateLimits(bad); err == nil || err.Error() != bad+":2:10: tenants: invalid type: integer 1, expected a sequence" {
		t.Errorf("bad file: %v", err)
	}
}

// TestTenantBudgets_Rule checks rule selection on a parsed policy: an
// exact match beats any prefix, the longest prefix wins, and at most one
// rule applies.
func TestTenantBudgets_Rule(t *testing.T) {
	tb, err := ParseTenantRateLimits([]byte(rlTenantRules(
		"{rule_id: short, matcher: {type: prefix, value: llama}, tokens_per_minute: 1, requests_per_minute: 1}",
		"{rule_id: long, matcher: {type: prefix, value: llama-3-}, tokens_per_minute: 2, requests_per_minute: 2}",
		"{rule_id: exact, matcher: {type: exact, value: llama-3-70b}, tokens_per_minute: 3, requests_per_minute: 3}",
		"{rule_id: same, matcher: {type: exact, value: llama}, tokens_per_minute: 4, requests_per_minute: 4}",
	)), "")
	if err != nil {
		t.Fatal(err)
	}
	p := tb.Tenants["auth:acme"]
	for model, want := range map[string]string{
		"llama-3-70b":  "exact", // exact beats both prefixes
		"llama-3-8b":   "long",  // the longest prefix wins
		"llama-2":      "short",
		"llama":        "same", // exact beats its own value as a prefix
		"llamas":       "short",
		"llama-3-70bx": "long", // exact is exact
		"gpt-4":        "",
		"":             "",
		"Llama-3-70b":  "", // case matters
	} {
		got := ""
		if r := p.Rule(model); r != nil {
			got = r.ID
		}
		if got != want {
			t.Errorf("Rule(%q) = %q, want %q", model, got, want)
		}
	}
	if r := tb.Default.Rule("llama-3-70b"); r != nil {
		t.Errorf("the default policy has no rules, got %+v", r)
	}
}

func TestCheckTenantHeaderTrust(t *testing.T) {
	tb, err := ParseTenantRateLimits([]byte(rlDefault+`tenants:
  - {tenant_key: "header:zeta", tokens_per_minute: 1, requests_per_minute: 1}
  - {tenant_key: "header:acme", tokens_per_minute: 1, requests_per_minute: 1}
  - {tenant_key: "ip:10.0.0.1", tokens_per_minute: 1, requests_per_minute: 1}
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := HeaderKeys(tb); !cmp.Equal(got, []string{"header:acme", "header:zeta"}) {
		t.Errorf("HeaderKeys = %q", got)
	}
	if err := CheckTenantHeaderTrust(tb, "t.yaml", true); err != nil {
		t.Errorf("trusted: %v", err)
	}
	want := "t.yaml: tenant_key 'header:acme' needs --trust-tenant-header: without it this override can never match a real request\n" +
		"t.yaml: tenant_key 'header:zeta' needs --trust-tenant-header: without it this override can never match a real request"
	if err := CheckTenantHeaderTrust(tb, "t.yaml", false); err == nil || err.Error() != want {
		t.Errorf("untrusted: %v\nwant\n%s", err, want)
	}
	delete(tb.Tenants, "header:acme")
	delete(tb.Tenants, "header:zeta")
	if err := CheckTenantHeaderTrust(tb, "t.yaml", false); err != nil || HeaderKeys(tb) != nil {
		t.Errorf("no header keys: %v, %q", err, HeaderKeys(tb))
	}
}

func FuzzTenantRateLimits(f *testing.F) {
	f.Add(readExample(f, "tenant-rate-limits.yaml"))
	for _, tt := range tenantLimitErrorTests {
		f.Add([]byte(tt.doc))
	}
	f.Add([]byte("default_policy: &p {tokens_per_minute: 1, requests_per_minute: 1}\ntenants: [{<<: *p, tenant_key: anonymous}]\n"))
	f.Add([]byte("default_policy: {tokens_per_minute: 1, requests_per_minute: 1}\ntenants: [{tenant_key: 'ip:::1', tokens_per_minute: 2, requests_per_minute: 3}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tb, err := ParseTenantRateLimits(data, "")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "<inline>") {
				t.Fatalf("error does not name the document: %v", err)
			}
			return
		}
		checkBudgetPolicy(t, "default", tb.Default)
		if len(tb.Tenants) > MaxRateLimitTenants {
			t.Fatalf("%d tenants", len(tb.Tenants))
		}
		for key, p := range tb.Tenants {
			if why := nonCanonicalTenantKey(key); why != "" || strings.TrimSpace(key) != key {
				t.Fatalf("accepted tenant key %q: %s", key, why)
			}
			checkProducedKey(t, key)
			checkBudgetPolicy(t, key, p)
		}
	})
}

// checkBudgetPolicy checks what an accepted policy guarantees: budgets
// above 0, at most MaxRateLimitModelRules rules with valid, unique ids and
// unpadded values, no matcher twice.
func checkBudgetPolicy(t *testing.T, label string, p sched.BudgetPolicy) {
	t.Helper()
	if p.TokensPerMinute == 0 || p.RequestsPerMinute == 0 || len(p.Rules) > MaxRateLimitModelRules {
		t.Fatalf("%s: accepted %+v", label, p)
	}
	ids := map[string]bool{}
	matchers := map[sched.ModelRule]bool{}
	for _, r := range p.Rules {
		m := sched.ModelRule{Prefix: r.Prefix, Value: r.Value}
		if r.TokensPerMinute == 0 || r.RequestsPerMinute == 0 || !isIdentifier(r.ID) || ids[r.ID] ||
			r.Value == "" || strings.TrimSpace(r.Value) != r.Value || matchers[m] {
			t.Fatalf("%s: accepted rule %+v", label, r)
		}
		ids[r.ID], matchers[m] = true, true
		if got := p.Rule(r.Value); got == nil || got.Value != r.Value {
			t.Fatalf("%s: Rule(%q) = %+v", label, r.Value, got)
		}
	}
}
