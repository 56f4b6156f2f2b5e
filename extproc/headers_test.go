package extproc

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/extproc/answer"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched/policy"
)

func headerMapOf(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

func TestParseHeaders_FirstValueWinsAndNamesFold(t *testing.T) {
	hm := headerMapOf(":method", "POST", ":path", "/v1/completions",
		"X-SMG-Priority", "interactive", "x-smg-priority", "bulk",
		"x-dynamo-meta-policy-class", "premium",
		"x-forwarded-for", "198.51.100.1", "x-forwarded-for", "203.0.113.9",
		"x-team", "red", "content-type", "application/json")
	hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: "authorization", Value: "Bearer k"}) // value, not raw_value
	h, rej := parseHeaders(hm, readHeaders("x-team"), 1<<16, DefaultMaxHeaderCount)
	if rej != nil {
		t.Fatal(rej)
	}
	want := map[string]string{"x-smg-priority": "interactive", "x-dynamo-meta-policy-class": "premium", "x-team": "red", "authorization": "Bearer k"}
	if diff := cmp.Diff(want, h.values); diff != "" {
		t.Errorf("values (-want +got):\n%s", diff)
	}
	if h.method != "POST" || h.path != "/v1/completions" || h.forwardedFor != "198.51.100.1, 203.0.113.9" {
		t.Errorf("method %q path %q xff %q", h.method, h.path, h.forwardedFor)
	}
}

// TestParseHeaders_KeepsWhatPolicyReads walks the policy's list of the
// headers it reads through parseHeaders as the planner sets it up: each
// one, sent in any case, reaches the policy's Lookup, so a header the
// policy starts reading cannot be dropped here unnoticed. Headers on no
// list are not kept.
func TestParseHeaders_KeepsWhatPolicyReads(t *testing.T) {
	cfg := testConfig(func(c *Config) {
		tenants, err := policy.NewTenants(policy.TenantOptions{TrustHeader: true, HeaderName: "X-Team"})
		if err != nil {
			t.Fatal(err)
		}
		c.Tenancy = &intake.Tenancy{Tenants: tenants}
	})
	p := newTestDeps(t, cfg)
	names := policy.RequestHeaders(p.planner.TenantHeader())
	if !slices.Contains(names, "x-team") {
		t.Fatalf("the configured tenant header is not on the policy's list %v", names)
	}
	var kv []string
	for i, name := range append(names, headerTestEndpointSelection) {
		if i%2 == 1 {
			name = strings.ToUpper(name)
		}
		kv = append(kv, name, "v"+itoa(i))
	}
	kv = append(kv, "x-unread", "u", "content-type", "application/json", policy.DefaultTenantHeader, "not the configured one")
	h, rej := parseHeaders(headerMapOf(kv...), p.keep, 1<<16, DefaultMaxHeaderCount)
	if rej != nil {
		t.Fatal(rej)
	}
	for i, name := range append(names, headerTestEndpointSelection) {
		if v, ok := h.lookup(name); !ok || v != "v"+itoa(i) {
			t.Errorf("the policy reads %s, parseHeaders kept %q, %v", name, v, ok)
		}
	}
	for _, name := range []string{"x-unread", "content-type", policy.DefaultTenantHeader} {
		if v, ok := h.lookup(name); ok {
			t.Errorf("kept %s = %q, which nothing reads", name, v)
		}
	}
	if len(h.values) != len(names)+1 {
		t.Errorf("kept %d headers, want %d: %v", len(h.values), len(names)+1, h.values)
	}
}

func TestParseHeaders_Limits(t *testing.T) {
	if _, rej := parseHeaders(headerMapOf("a", strings.Repeat("x", 100)), headerSet{}, 100, DefaultMaxHeaderCount); rej == nil || rej.Reason != answer.ReasonHeadersTooLarge {
		t.Errorf("101 bytes over a 100-byte limit: %v", rej)
	}
	if _, rej := parseHeaders(headerMapOf("a", strings.Repeat("x", 99)), headerSet{}, 100, DefaultMaxHeaderCount); rej != nil {
		t.Errorf("exactly 100 bytes: %v", rej)
	}
	var kv []string
	for i := range 64 {
		kv = append(kv, "x-dynamo-meta-k"+itoa(i), "v")
	}
	if _, rej := parseHeaders(headerMapOf(kv...), headerSet{}, 1<<20, 1000); rej != nil {
		t.Errorf("64 metadata entries: %v", rej)
	}
	if _, rej := parseHeaders(headerMapOf(append(kv, "x-dynamo-meta-extra", "v")...), headerSet{}, 1<<20, 1000); rej == nil {
		t.Error("65 metadata entries accepted")
	}
	big := strings.Repeat("v", 64<<10)
	if _, rej := parseHeaders(headerMapOf("x-dynamo-meta-a", big), headerSet{}, 1<<20, DefaultMaxHeaderCount); rej == nil || !strings.Contains(rej.Text(), "65536 bytes") {
		t.Errorf("metadata over 64 KiB: %v", rej)
	}
}

func TestForwardedClient(t *testing.T) {
	tests := []struct {
		xff  string
		hops int
		want string
	}{
		{"", 0, ""},
		{"198.51.100.1", 0, "198.51.100.1"},
		{"198.51.100.1, 10.0.0.1", 1, "198.51.100.1"},
		{"198.51.100.1, 10.0.0.1", 0, "10.0.0.1"},
		{"10.0.0.1", 1, ""},
	}
	for _, tt := range tests {
		if got := forwardedClient(tt.xff, tt.hops); got != tt.want {
			t.Errorf("forwardedClient(%q, %d) = %q, want %q", tt.xff, tt.hops, got, tt.want)
		}
	}
}

// FuzzParseHeaders feeds arbitrary header lists: parsing never panics, an
// accepted list respects the limits, and only watched names are kept.
func FuzzParseHeaders(f *testing.F) {
	f.Add([]byte(":method\x00POST\x00:path\x00/v1/completions\x00x-smg-priority\x00 Interactive \x00"), 128)
	f.Add([]byte("X-Dynamo-Meta-Policy-Class\x00premium\x00authorization\x00Bearer \xff\x00x-forwarded-for\x00a, b, c"), 16)
	f.Add([]byte("x-dynamo-dp-rank\x00-1\x00x-worker-instance-id\x00\x00x-smg-tenant-id\x00t"), 0)
	f.Fuzz(func(t *testing.T, data []byte, limit int) {
		parts := bytes.Split(data, []byte{0})
		hm := &corev3.HeaderMap{}
		for i := 0; i+1 < len(parts); i += 2 {
			hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: string(parts[i]), RawValue: parts[i+1]})
		}
		limit = max(limit, 0)
		keep := readHeaders(policy.DefaultTenantHeader)
		h, rej := parseHeaders(hm, keep, limit, 1<<20)
		if rej != nil {
			if rej.Reason != answer.ReasonHeadersTooLarge || rej.Text() == "" {
				t.Fatalf("rejection %v", rej)
			}
			_ = rej.Immediate()
			return
		}
		if h.bytes > limit {
			t.Fatalf("accepted %d bytes over a limit of %d", h.bytes, limit)
		}
		for k := range h.values {
			if k != strings.ToLower(k) || !keep.has(k) {
				t.Fatalf("kept header %q", k)
			}
		}
		_ = forwardedClient(h.forwardedFor, limit%4)
	})
}

// FuzzExchangeRequest drives a whole request path with arbitrary headers
// and body: the exchange never panics and always either waits, routes or
// answers.
func FuzzExchangeRequest(f *testing.F) {
	f.Add([]byte("x-smg-priority\x00system\x00x-dynamo-dp-rank\x001"), []byte(chatBody), uint8(2))
	f.Add([]byte("x-dynamo-request-strict-priority\x00 7\x00x-dynamo-request-priority\x00-3"), []byte(`{"model":"m","prompt":[1,2,3]}`), uint8(4))
	f.Add([]byte("x-worker-instance-id\x00w 1"), []byte(`{`), uint8(1))
	f.Fuzz(func(t *testing.T, hdr, body []byte, mode uint8) {
		parts := bytes.Split(hdr, []byte{0})
		var kv []string
		for i := 0; i+1 < len(parts); i += 2 {
			kv = append(kv, string(parts[i]), string(parts[i+1]))
		}
		p := proto{req: []bodyMode{modeNone, modeStreamed, modeBuffered, modeDuplex}[mode%4], early: mode&4 != 0}
		x, _, _ := newTestExchange(t, testConfig(nil))
		s := x.message(t0, reqHeaders(p, "POST", "/v1/chat/completions", false, kv...))
		if !s.end && x.stage == stageBody {
			s = x.message(t0, reqBody(string(body), true))
		}
		if !s.end && x.waiting() {
			s = tell(x, t0, dispatched(false))
			if len(s.send) == 0 {
				t.Fatal("dispatch sent nothing")
			}
		}
		x.close(t0, errClientGone)
	})
}
