package extproc

import (
	"net/netip"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate/tollgate/extproc/answer"
	"github.com/tollgate/tollgate/extproc/fleet"
)

func subsetMetadata(v *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		subsetNamespace: {Fields: map[string]*structpb.Value{subsetKey: v}},
	}}
}

func listValue(entries ...any) *structpb.Value {
	l, err := structpb.NewList(entries)
	if err != nil {
		panic(err)
	}
	return structpb.NewListValue(l)
}

// TestSubsetOf covers the forms of the hint: the GIE picker's list
// (pkg/epp/requestcontrol/candidates.go:113-141 at 1748e829) and the
// lightweight picker's comma-separated string or list of such strings
// (pkg/lwepp/handlers/request.go:51-80), entries trimmed. Unlike the GIE
// picker, which drops every port, an entry with a port admits only that
// port: several workers may share an address.
func TestSubsetOf(t *testing.T) {
	w := netip.MustParseAddrPort
	for _, c := range []struct {
		name      string
		md        *corev3.Metadata
		none      bool
		reject    string
		admits    []netip.AddrPort
		notAdmits []netip.AddrPort
	}{
		{name: "no metadata", md: nil, none: true},
		{name: "other namespace", md: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb": {}}}, none: true},
		{name: "namespace without the key", md: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{subsetNamespace: {}}}, none: true},
		{name: "list", md: subsetMetadata(listValue("10.0.0.1:8000", " 10.0.0.2:9000 ")),
			admits: []netip.AddrPort{w("10.0.0.1:8000"), w("10.0.0.2:9000")}, notAdmits: []netip.AddrPort{w("10.0.0.1:8001"), w("10.0.0.3:8000")}},
		{name: "comma string", md: subsetMetadata(structpb.NewStringValue("10.0.0.1:8000, 10.0.0.2 ,")),
			admits: []netip.AddrPort{w("10.0.0.1:8000"), w("10.0.0.2:1"), w("10.0.0.2:8000")}, notAdmits: []netip.AddrPort{w("10.0.0.1:9")}},
		{name: "list of comma strings", md: subsetMetadata(listValue("10.0.0.1:8000,10.0.0.3:8000")),
			admits: []netip.AddrPort{w("10.0.0.3:8000")}},
		{name: "ipv6 forms", md: subsetMetadata(listValue("[fd00::1]:8000", "fd00::2", "[fd00::3]")),
			admits: []netip.AddrPort{w("[fd00::1]:8000"), w("[fd00::2]:7"), w("[fd00::3]:7")}, notAdmits: []netip.AddrPort{w("[fd00::1]:7")}},
		{name: "mapped ipv4", md: subsetMetadata(listValue("::ffff:10.0.0.1")), admits: []netip.AddrPort{w("10.0.0.1:8000")}},
		{name: "hostnames admit nothing", md: subsetMetadata(listValue("gpu-0:8000", "10.0.0.1:8000")),
			admits: []netip.AddrPort{w("10.0.0.1:8000")}},
		{name: "empty list", md: subsetMetadata(listValue()), reject: "is empty"},
		{name: "blank string", md: subsetMetadata(structpb.NewStringValue(" ,, ")), reject: "is empty"},
		{name: "number", md: subsetMetadata(structpb.NewNumberValue(3)), reject: "must be a list of strings"},
		{name: "non-string entry", md: subsetMetadata(listValue("10.0.0.1:8000", 12345.0)), reject: "is not a string"},
		{name: "too many", md: subsetMetadata(structpb.NewStringValue(strings.Repeat("10.0.0.1,", MaxSubsetEntries+1))), reject: "more than 4096 entries"},
		{name: "long entry", md: subsetMetadata(structpb.NewStringValue(strings.Repeat("1", maxSubsetEntryBytes+1))), reject: "longer than 256 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, rej := subsetOf(c.md)
			switch {
			case c.reject != "":
				if rej == nil || rej.Reason != answer.ReasonNoEndpoints || !strings.Contains(rej.Message, c.reject) {
					t.Fatalf("got %v %v, want a 503 containing %q", s, rej, c.reject)
				}
				return
			case rej != nil:
				t.Fatalf("rejected: %v", rej.Message)
			case c.none:
				if s != nil {
					t.Fatalf("got subset %v, want none", s)
				}
				return
			}
			for _, ap := range c.admits {
				if !s.admits(ap) {
					t.Errorf("%v not admitted by %v", ap, s)
				}
			}
			for _, ap := range c.notAdmits {
				if s.admits(ap) {
					t.Errorf("%v admitted by %v", ap, s)
				}
			}
		})
	}
}

func TestWorkerSetAllowed(t *testing.T) {
	ws, err := fleet.NewSet([]fleet.Worker{{ID: "a", Address: "10.0.0.1:8000"}, {ID: "b", Address: "10.0.0.1:8001"}, {ID: "c", Address: "10.0.0.2:8000"}})
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{"10.0.0.1": "a,b", "10.0.0.1:8001,10.0.0.2:8000": "b,c", "10.0.0.9": ""} {
		s, rej := subsetOf(subsetMetadata(structpb.NewStringValue(in)))
		if rej != nil {
			t.Fatal(rej.Message)
		}
		if got := strings.Join(ws.Allowed(s.admits), ","); got != want {
			t.Errorf("allowed(%q) = %q, want %q", in, got, want)
		}
	}
}

// The served endpoint moves the booking only to an endpoint tollgate
// offered, and only once the request holds one (GIE lwepp
// pkg/lwepp/handlers/response.go:36-50 at 1748e829 reads the same key).
func TestExchange_FollowsTheServedEndpoint(t *testing.T) {
	served := func(addr string) *extprocv3.ProcessingRequest {
		m := respHeaders(false)
		m.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			lbNamespace: {Fields: map[string]*structpb.Value{servedKey: structpb.NewStringValue(addr)}}}}
		return m
	}
	for _, c := range []struct {
		name, addr string
		want       []string
	}{
		{"the target itself", "10.0.0.7:8000", nil},
		{"an offered fallback", " 10.0.0.9:8000 ", []string{"7 w2/0"}},
		{"an endpoint never offered", "10.0.0.99:8000", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			x, env, _ := newTestExchange(t, testConfig(nil))
			feed(t, x, reqHeaders(proto{req: modeBuffered, resp: modeStreamed}, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
			st := dispatched(false)
			st.decision.target.Fallbacks = []fleet.Target{{Worker: "w1", Address: "10.0.0.8:8000"}, {Worker: "w2", Address: "10.0.0.9:8000"}}
			tell(x, t0, st)
			if got := kinds(x.message(t0, served(c.addr)).send); !cmp.Equal(got, []string{"resp_headers"}) {
				t.Fatalf("response headers answered %v", got)
			}
			if !cmp.Equal(c.want, env.servedAt) {
				t.Fatalf("served reports %v, want %v", env.servedAt, c.want)
			}
		})
	}
}
