package extproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/sched"
)

// feed sends msgs to x at t0 and returns the kinds of every reply; it
// fails the test if any message ends the exchange.
func feed(t *testing.T, x *exchange, msgs ...*extprocv3.ProcessingRequest) []string {
	t.Helper()
	var out []string
	for _, m := range msgs {
		s := x.message(t0, m)
		if s.end {
			body := ""
			if len(s.send) > 0 {
				body = string(s.send[len(s.send)-1].GetImmediateResponse().GetBody())
			}
			t.Fatalf("message ended the exchange: %v %v %s", kinds(s.send), s.err, body)
		}
		out = append(out, kinds(s.send)...)
	}
	return out
}

func TestExchange_BufferedAdmission(t *testing.T) {
	x, env, _ := newTestExchange(t, testConfig(nil))
	p := proto{req: modeBuffered, resp: modeStreamed}

	s := x.message(t0, reqHeaders(p, "POST", "/v1/chat/completions", false, "x-dynamo-meta-policy-class", " premium "))
	if diff := cmp.Diff([]string{"req_headers"}, kinds(s.send)); diff != "" {
		t.Fatalf("headers reply (-want +got):\n%s", diff)
	}
	if got := s.send[0].GetRequestHeaders().GetResponse().GetHeaderMutation(); got != nil {
		t.Fatalf("headers reply carries a mutation %v; BUFFERED routes in the body reply", got)
	}
	s = x.message(t0.Add(time.Millisecond), reqBody(chatBody, true))
	if len(s.send) != 0 || s.end {
		t.Fatalf("body reply %v sent before the decision", kinds(s.send))
	}
	if len(env.submits) != 1 {
		t.Fatalf("submits = %d, want 1", len(env.submits))
	}
	r := env.submits[0]
	if r.ID != 7 || r.Model != "llama" || r.Class != "premium" || r.ISL == 0 || r.Priority != sched.PriorityDefault {
		t.Fatalf("submitted %+v", r)
	}
	if !x.waiting() {
		t.Fatal("exchange not waiting after submit")
	}
	// Queued: exactly one bare override, for the whole budget.
	s = tell(x, t0.Add(2*time.Millisecond), queued)
	if diff := cmp.Diff([]string{"override 5m10s"}, kinds(s.send)); diff != "" {
		t.Fatalf("queued (-want +got):\n%s", diff)
	}
	if s = tell(x, t0.Add(3*time.Millisecond), queued); len(s.send) != 0 {
		t.Fatalf("second queued notice sent %v", kinds(s.send))
	}
	s = tell(x, t0.Add(time.Second), dispatched(true))
	if diff := cmp.Diff([]string{"req_body+route"}, kinds(s.send)); diff != "" {
		t.Fatalf("dispatch (-want +got):\n%s", diff)
	}
	m := decoded(s.send[0])
	mut := m.GetRequestBody().GetResponse().GetHeaderMutation()
	if diff := cmp.Diff(map[string]string{headerDestination: "10.0.0.7:8000"}, headerMap(mut)); diff != "" {
		t.Errorf("set headers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{headerUpstreamRank, headerPrefiller}, mut.GetRemoveHeaders()); diff != "" {
		t.Errorf("remove headers (-want +got):\n%s", diff)
	}
	for _, h := range mut.GetSetHeaders() {
		if !appendFalse(h) || h.GetHeader().GetValue() != "" {
			t.Errorf("header %s: append false %v value %q; want append=false and raw_value only", h.GetHeader().GetKey(), appendFalse(h), h.GetHeader().GetValue())
		}
	}
	lb := m.GetDynamicMetadata().GetFields()[lbNamespace].GetStructValue().GetFields()[headerDestination].GetStringValue()
	if lb != "10.0.0.7:8000" {
		t.Errorf("envoy.lb metadata = %q", lb)
	}

	// Response path: not preemptible (admission off), answered at once.
	if s = x.message(t0.Add(2*time.Second), respHeaders(false)); !cmp.Equal([]string{"resp_headers"}, kinds(s.send)) {
		t.Fatalf("response headers: %v", kinds(s.send))
	}
	x.message(t0.Add(2*time.Second), respBody("", false))
	if len(env.notes) != 0 {
		t.Fatalf("empty chunk reported %v", env.notes)
	}
	x.message(t0.Add(2*time.Second), respBody(`data: {"choices":[{"text":"hi"}]}`+"\n\n", false))
	s = x.message(t0.Add(3*time.Second), respBody(`data: {"usage":{"prompt_tokens":12,"completion_tokens":3}}`+"\n\ndata: [DONE]\n\n", true))
	if !cmp.Equal([]string{"resp_body"}, kinds(s.send)) {
		t.Fatalf("response body: %v", kinds(s.send))
	}
	x.close(t0.Add(4*time.Second), errClientGone)
	if diff := cmp.Diff([]note{{evFirstToken, 7}, {evRelease, 7}}, env.notes, cmp.AllowUnexported(note{})); diff != "" {
		t.Errorf("notes (-want +got):\n%s", diff)
	}
}

// TestExchange_BodyModes drives an admission request through each body
// mode and checks where the route goes.
func TestExchange_BodyModes(t *testing.T) {
	big := `{"model":"llama","prompt":"` + strings.Repeat("x", 130_000) + `"}`
	tests := []struct {
		name        string
		p           proto
		path        string
		msgs        []*extprocv3.ProcessingRequest
		wantBefore  []string // replies before the decision
		wantRoute   []string // replies at the decision
		headersOnly bool
	}{
		{
			name:       "buffered",
			p:          proto{req: modeBuffered},
			msgs:       []*extprocv3.ProcessingRequest{reqBody(chatBody, true)},
			wantBefore: []string{"req_headers"},
			wantRoute:  []string{"req_body+route"},
		},
		{
			name:       "buffered with trailers",
			p:          proto{req: modeBuffered},
			msgs:       []*extprocv3.ProcessingRequest{reqBody(chatBody, false), reqTrailers()},
			wantBefore: []string{"req_headers"},
			wantRoute:  []string{"req_body+route", "req_trailers"},
		},
		{
			name:      "streamed with early body",
			p:         proto{req: modeStreamed, early: true},
			msgs:      []*extprocv3.ProcessingRequest{reqBody(chatBody[:20], false), reqBody(chatBody[20:], true)},
			wantRoute: []string{"req_headers+route", "req_body", "req_body"},
		},
		{
			name:      "streamed with early body and trailers",
			p:         proto{req: modeStreamed, early: true},
			msgs:      []*extprocv3.ProcessingRequest{reqBody(chatBody, false), reqTrailers()},
			wantRoute: []string{"req_headers+route", "req_body", "req_trailers"},
		},
		{
			name:        "streamed without early body decides at the headers",
			p:           proto{req: modeStreamed},
			wantRoute:   []string{"req_headers+route"},
			headersOnly: true,
		},
		{
			name:        "none decides at the headers",
			p:           proto{req: modeNone},
			wantRoute:   []string{"req_headers+route"},
			headersOnly: true,
		},
		{
			name:      "full duplex",
			p:         proto{req: modeDuplex, resp: modeDuplex},
			msgs:      []*extprocv3.ProcessingRequest{reqBody(chatBody[:30], false), reqBody(chatBody[30:], true)},
			wantRoute: []string{"req_headers+route", "req_body+stream:" + itoa(len(chatBody)) + ":eos"},
		},
		{
			name:      "full duplex re-streams in chunks of at most 62000 bytes",
			p:         proto{req: modeDuplex, resp: modeDuplex},
			msgs:      []*extprocv3.ProcessingRequest{reqBody(big[:100_000], false), reqBody(big[100_000:], true)},
			wantRoute: []string{"req_headers+route", "req_body+stream:62000", "req_body+stream:62000", "req_body+stream:" + itoa(len(big)-124_000) + ":eos"},
		},
		{
			name:      "full duplex with trailers",
			p:         proto{req: modeDuplex, resp: modeDuplex},
			msgs:      []*extprocv3.ProcessingRequest{reqBody(chatBody, false), reqTrailers()},
			wantRoute: []string{"req_headers+route", "req_body+stream:" + itoa(len(chatBody)), "req_trailers"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, env, _ := newTestExchange(t, testConfig(nil))
			path := tt.path
			if path == "" {
				path = "/v1/chat/completions"
				if len(tt.msgs) > 0 && strings.Contains(string(tt.msgs[0].GetRequestBody().GetBody()), `"prompt"`) {
					path = "/v1/completions"
				}
			}
			got := feed(t, x, reqHeaders(tt.p, "POST", path, false))
			got = append(got, feed(t, x, tt.msgs...)...)
			if diff := cmp.Diff(tt.wantBefore, got); diff != "" {
				t.Fatalf("replies before the decision (-want +got):\n%s", diff)
			}
			if len(env.submits) != 1 {
				t.Fatalf("submits = %d, want 1", len(env.submits))
			}
			if r := env.submits[0]; tt.headersOnly != (r.Model == "" && r.ISL == 0) {
				t.Errorf("submitted model %q isl %d; headers only = %v", r.Model, r.ISL, tt.headersOnly)
			}
			s := tell(x, t0, dispatched(false))
			if diff := cmp.Diff(tt.wantRoute, kinds(s.send)); diff != "" {
				t.Fatalf("replies at the decision (-want +got):\n%s", diff)
			}
			if tt.p.req == modeDuplex {
				var body bytes.Buffer
				for _, m := range s.send {
					body.Write(m.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody())
				}
				want := chatBody
				if len(tt.msgs) == 2 && len(tt.msgs[0].GetRequestBody().GetBody()) == 100_000 {
					want = big
				}
				if body.String() != want {
					t.Errorf("re-streamed body differs from the original (%d bytes, want %d)", body.Len(), len(want))
				}
			}
			if tt.headersOnly && tt.p.req == modeStreamed {
				// Chunks sent after the route are answered at once.
				if got := feed(t, x, reqBody("abc", false), reqBody("", true)); !cmp.Equal([]string{"req_body", "req_body"}, got) {
					t.Errorf("chunks after the route: %v", got)
				}
			}
		})
	}
}

func TestExchange_GetIsRoutedAtTheHeadersWithoutAdmission(t *testing.T) {
	for _, p := range []proto{{req: modeBuffered}, {req: modeStreamed, early: true}, {req: modeDuplex, resp: modeDuplex}, {req: modeNone}} {
		x, env, _ := newTestExchange(t, testConfig(nil))
		got := feed(t, x, reqHeaders(p, "GET", "/v1/models", true))
		if diff := cmp.Diff([]string{"req_headers+route"}, got); diff != "" {
			t.Errorf("mode %v (-want +got):\n%s", p.req, diff)
		}
		if len(env.submits) != 0 || !cmp.Equal([]string{""}, env.routes) {
			t.Errorf("mode %v: submits %d routes %q; want no admission, one route for any model", p.req, len(env.submits), env.routes)
		}
		x.close(t0, errClientGone)
		if len(env.notes) != 0 {
			t.Errorf("mode %v: notes %v for a request outside admission", p.req, env.notes)
		}
	}
}

func TestExchange_NonInferencePostRoutesByBodyModel(t *testing.T) {
	x, env, _ := newTestExchange(t, testConfig(nil))
	p := proto{req: modeBuffered}
	feed(t, x, reqHeaders(p, "POST", "/v1/tokenize", false))
	got := feed(t, x, reqBody(`{"model":"mistral","prompt":"x"}`, true))
	if diff := cmp.Diff([]string{"req_body+route"}, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if !cmp.Equal([]string{"mistral"}, env.routes) || len(env.submits) != 0 {
		t.Fatalf("routes %q submits %d", env.routes, len(env.submits))
	}
	// Its response is passed through with no accounting.
	if got := feed(t, x, respHeaders(false), respBody("x", true)); !cmp.Equal([]string{"resp_headers", "resp_body"}, got) {
		t.Errorf("response: %v", got)
	}
	if len(env.notes) != 0 {
		t.Errorf("notes %v", env.notes)
	}
}

func TestExchange_NoWorkerForNonInferenceRequest(t *testing.T) {
	x, env, _ := newTestExchange(t, testConfig(nil))
	env.destOK = false
	s := x.message(t0, reqHeaders(proto{req: modeBuffered}, "GET", "/v1/models", true))
	ir := immediateOf(t, s)
	if ir.GetStatus().GetCode() != 503 || !s.end {
		t.Fatalf("status %v end %v", ir.GetStatus().GetCode(), s.end)
	}
	if _, ok := headerMap(ir.GetHeaders())["retry-after"]; ok {
		t.Error("no-endpoints answer carries Retry-After")
	}
}

func TestExchange_EmptyPostBodyIs400(t *testing.T) {
	for _, p := range []proto{{req: modeBuffered}, {req: modeStreamed, early: true}, {req: modeDuplex, resp: modeDuplex}} {
		x, env, _ := newTestExchange(t, testConfig(nil))
		feed(t, x, reqHeaders(p, "POST", "/v1/chat/completions", false))
		s := x.message(t0, reqBody("", true))
		if ir := immediateOf(t, s); ir.GetStatus().GetCode() != 400 {
			t.Errorf("mode %v: status %d, want 400", p.req, ir.GetStatus().GetCode())
		}
		if len(env.submits) != 0 {
			t.Errorf("mode %v: an empty body was submitted", p.req)
		}
	}
	// A POST whose headers end the stream has an empty body too.
	x, _, _ := newTestExchange(t, testConfig(nil))
	if ir := immediateOf(t, x.message(t0, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", true))); ir.GetStatus().GetCode() != 400 {
		t.Errorf("body-less POST: status %d, want 400", ir.GetStatus().GetCode())
	}
}

func TestExchange_BodyOverLimitIs413(t *testing.T) {
	cfg := testConfig(func(c *Config) { c.MaxBodyBytes = 100 })
	for _, p := range []proto{{req: modeBuffered}, {req: modeStreamed, early: true}, {req: modeDuplex, resp: modeDuplex}} {
		x, env, _ := newTestExchange(t, cfg)
		feed(t, x, reqHeaders(p, "POST", "/v1/chat/completions", false))
		var s step
		if p.req == modeBuffered {
			s = x.message(t0, reqBody(strings.Repeat("a", 101), true))
		} else {
			feed(t, x, reqBody(strings.Repeat("a", 60), false))
			s = x.message(t0, reqBody(strings.Repeat("a", 41), false))
		}
		ir := immediateOf(t, s)
		if ir.GetStatus().GetCode() != 413 || len(env.submits) != 0 {
			t.Errorf("mode %v: status %d submits %d", p.req, ir.GetStatus().GetCode(), len(env.submits))
		}
		var e struct {
			Error struct{ Message, Type, Code string }
		}
		if err := json.Unmarshal(ir.GetBody(), &e); err != nil || !strings.Contains(e.Error.Message, "100 bytes") || e.Error.Type != "invalid_request_error" {
			t.Errorf("mode %v: body %s (%v)", p.req, ir.GetBody(), err)
		}
	}
}

func TestExchange_MalformedPinHeaderIs400(t *testing.T) {
	x, env, _ := newTestExchange(t, testConfig(nil))
	s := x.message(t0, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false, "x-dynamo-dp-rank", "two"))
	ir := immediateOf(t, s)
	if ir.GetStatus().GetCode() != 400 || len(env.submits) != 0 {
		t.Fatalf("status %d submits %d", ir.GetStatus().GetCode(), len(env.submits))
	}
	if !bytes.Contains(ir.GetBody(), []byte(`"param":"x-dynamo-dp-rank"`)) {
		t.Errorf("body %s does not name the header", ir.GetBody())
	}
}

func TestExchange_PinFromHeadersAndBody(t *testing.T) {
	x, env, _ := newTestExchange(t, testConfig(nil))
	feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/completions", false, "x-worker-instance-id", "w3"))
	feed(t, x, reqBody(`{"model":"llama","prompt":"hi","nvext":{"dp_rank":2}}`, true))
	want := &sched.Pin{Worker: "w3", Rank: 2, HasRank: true}
	if diff := cmp.Diff(want, env.submits[0].Pin); diff != "" {
		t.Errorf("pin (-want +got):\n%s", diff)
	}
}

func TestExchange_SpoofedDestinationIsOverwritten(t *testing.T) {
	x, _, _ := newTestExchange(t, testConfig(nil))
	feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false, headerDestination, "203.0.113.66:22"))
	feed(t, x, reqBody(chatBody, true))
	s := tell(x, t0, dispatched(false))
	routed := false
	for _, h := range decoded(s.send[0]).GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == headerDestination {
			if string(h.GetHeader().GetRawValue()) != "10.0.0.7:8000" || !appendFalse(h) {
				t.Fatalf("destination %q append false %v", h.GetHeader().GetRawValue(), appendFalse(h))
			}
			routed = true
		}
	}
	if !routed {
		t.Fatal("the reply carries no destination")
	}
}

func TestExchange_MultiRankWorkerGetsTheRankHeader(t *testing.T) {
	x, _, _ := newTestExchange(t, testConfig(nil))
	feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false))
	feed(t, x, reqBody(chatBody, true))
	st := dispatched(false)
	st.decision.target.Rank, st.decision.target.MultiRank = 3, true
	mut := decoded(tell(x, t0, st).send[0]).GetRequestBody().GetResponse().GetHeaderMutation()
	want := map[string]string{headerDestination: "10.0.0.7:8000", headerUpstreamRank: "3"}
	if diff := cmp.Diff(want, headerMap(mut)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	keys := []string{}
	for _, h := range mut.GetSetHeaders() {
		keys = append(keys, h.GetHeader().GetKey())
	}
	if !cmp.Equal([]string{headerUpstreamRank, headerDestination}, keys) {
		t.Errorf("set headers not sorted: %v", keys)
	}
}

// TestExchange_SchedulerRejections checks that every scheduler outcome is
// answered with its row, and that nothing is reported for a rejected
// request (it holds nothing).
func TestExchange_SchedulerRejections(t *testing.T) {
	tests := []struct {
		a      sched.Action
		status int32
	}{
		{sched.Action{Outcome: sched.OutcomeQueueFull}, 429},
		{sched.Action{Outcome: sched.OutcomeQueueTimeout, Queued: true, Wait: time.Second}, 503},
		{sched.Action{Outcome: sched.OutcomeClassLimit, PolicyClass: "premium", LimitKind: sched.LimitRequests, LimitCurrent: 4, LimitValue: 4}, 529},
		{sched.Action{Outcome: sched.OutcomeNoEndpoints, Model: "llama", Message: "no endpoints available to route work: no ready worker serves the model"}, 503},
		{sched.Action{Outcome: sched.OutcomePinInvalid, Message: "Pinned worker w9 dp_rank 0 is not eligible: worker w9 is unavailable"}, 503},
		{sched.Action{Outcome: sched.OutcomeShutdown}, 503},
	}
	for _, tt := range tests {
		x, env, _ := newTestExchange(t, testConfig(nil))
		feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false))
		feed(t, x, reqBody(chatBody, true))
		s := tell(x, t0, rejected(tt.a))
		if ir := immediateOf(t, s); int32(ir.GetStatus().GetCode()) != tt.status || !s.end {
			t.Errorf("outcome %d: status %d end %v, want %d", tt.a.Outcome, ir.GetStatus().GetCode(), s.end, tt.status)
		}
		x.close(t0, errClientGone)
		if len(env.notes) != 0 {
			t.Errorf("outcome %d: notes %v", tt.a.Outcome, env.notes)
		}
	}
}

func TestExchange_UnauthorizedTenantIs401(t *testing.T) {
	x, env, _ := newTestExchange(t, testConfig(func(c *Config) { c.Tenancy = tenancyWithKey(t) }))
	s := x.message(t0, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false, "authorization", "Bearer wrong"))
	if ir := immediateOf(t, s); ir.GetStatus().GetCode() != 401 || len(env.submits) != 0 {
		t.Fatalf("status %d", ir.GetStatus().GetCode())
	}
	x, _, _ = newTestExchange(t, testConfig(func(c *Config) { c.Tenancy = tenancyWithKey(t) }))
	if got := feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false, "authorization", "Bearer s3cret")); !cmp.Equal([]string{"req_headers"}, got) {
		t.Fatalf("valid key: %v", got)
	}
	if x.who.Tenant != "auth:acme" {
		t.Errorf("tenant %q", x.who.Tenant)
	}
}

func TestExchange_HeadersTooLarge(t *testing.T) {
	x, _, _ := newTestExchange(t, testConfig(func(c *Config) { c.MaxHeaderBytes = 200 }))
	s := x.message(t0, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false, "x-big", strings.Repeat("v", 200)))
	if ir := immediateOf(t, s); ir.GetStatus().GetCode() != 431 {
		t.Fatalf("status %d, want 431", ir.GetStatus().GetCode())
	}
	var kv []string
	for i := range 65 {
		kv = append(kv, "x-dynamo-meta-k"+itoa(i), "v")
	}
	x, _, _ = newTestExchange(t, testConfig(nil))
	s = x.message(t0, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false, kv...))
	if ir := immediateOf(t, s); ir.GetStatus().GetCode() != 431 || !bytes.Contains(ir.GetBody(), []byte("more than 64")) {
		t.Fatalf("status %d body %s", ir.GetStatus().GetCode(), ir.GetBody())
	}
}

func TestExchange_ClientGoneWhileQueuedCancelsOnce(t *testing.T) {
	x, env, _ := newTestExchange(t, testConfig(nil))
	feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false))
	feed(t, x, reqBody(chatBody, true))
	tell(x, t0, queued)
	x.close(t0.Add(time.Second), errClientGone)
	x.close(t0.Add(time.Second), errClientGone)
	if diff := cmp.Diff([]note{{evRelease, 7}}, env.notes, cmp.AllowUnexported(note{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestExchange_DoneOrCancelExactlyOnce covers every way an admitted
// request's stream can end.
func TestExchange_DoneOrCancelExactlyOnce(t *testing.T) {
	tests := []struct {
		name string
		msgs []*extprocv3.ProcessingRequest
		want eventKind
	}{
		{"no response observed", nil, evRelease},
		{"response completed", []*extprocv3.ProcessingRequest{respHeaders(false), respBody("x", true)}, evRelease},
		{"response completed by trailers", []*extprocv3.ProcessingRequest{respHeaders(false), respBody("x", false), respTrailers()}, evRelease},
		{"header-only response", []*extprocv3.ProcessingRequest{respHeaders(true)}, evRelease},
		{"response cut short", []*extprocv3.ProcessingRequest{respHeaders(false), respBody("x", false)}, evRelease},
		{"no body yet", []*extprocv3.ProcessingRequest{respHeaders(false)}, evRelease},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, env, _ := newTestExchange(t, testConfig(nil))
			feed(t, x, reqHeaders(proto{req: modeBuffered, resp: modeStreamed}, "POST", "/v1/chat/completions", false))
			feed(t, x, reqBody(chatBody, true))
			tell(x, t0, dispatched(false))
			feed(t, x, tt.msgs...)
			x.close(t0, errClientGone)
			x.close(t0, errClientGone)
			var got []eventKind
			for _, n := range env.notes {
				if n.kind != evFirstToken {
					got = append(got, n.kind)
				}
			}
			if diff := cmp.Diff([]eventKind{tt.want}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestExchange_QueueBudget checks that a queued request is answered before
// Envoy's timer fires: with the override, the deadline moves to the class
// queue timeout plus margin; without it, to message_timeout minus margin.
func TestExchange_QueueBudget(t *testing.T) {
	prio := sched.DefaultPriorityConfig() // default class: 60 s queue timeout
	t.Run("with override", func(t *testing.T) {
		x, env, _ := newTestExchange(t, testConfig(func(c *Config) { c.Sched.Priority = prio }))
		feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false))
		feed(t, x, reqBody(chatBody, true))
		if at, ok := x.deadline(); !ok || !at.Equal(t0.Add(900*time.Millisecond)) {
			t.Fatalf("deadline before the override %v %v", at, ok)
		}
		s := tell(x, t0.Add(10*time.Millisecond), queued)
		if !cmp.Equal([]string{"override 1m0.1s"}, kinds(s.send)) {
			t.Fatalf("override: %v", kinds(s.send))
		}
		at, _ := x.deadline()
		if want := t0.Add(10*time.Millisecond + 60*time.Second); !at.Equal(want) {
			t.Fatalf("deadline %v, want %v", at, want)
		}
		s = x.onExpire(at)
		if ir := immediateOf(t, s); ir.GetStatus().GetCode() != 503 || !bytes.Contains(ir.GetBody(), []byte("scheduler_queue_timeout")) {
			t.Fatalf("expiry answer %d %s", ir.GetStatus().GetCode(), ir.GetBody())
		}
		if !cmp.Equal([]note{{evRelease, 7}}, env.notes, cmp.AllowUnexported(note{})) {
			t.Errorf("notes %v", env.notes)
		}
	})
	t.Run("without override", func(t *testing.T) {
		x, env, _ := newTestExchange(t, testConfig(func(c *Config) { c.Sched.Priority = prio; c.EnvoyMaxMessageTimeout = -1 }))
		feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false))
		feed(t, x, reqBody(chatBody, true))
		if s := tell(x, t0, queued); len(s.send) != 0 {
			t.Fatalf("override sent while Envoy accepts none: %v", kinds(s.send))
		}
		at, ok := x.deadline()
		if !ok || !at.Equal(t0.Add(900*time.Millisecond)) {
			t.Fatalf("deadline %v %v", at, ok)
		}
		if ir := immediateOf(t, x.onExpire(at)); ir.GetStatus().GetCode() != 503 {
			t.Fatalf("status %d", ir.GetStatus().GetCode())
		}
		if len(env.notes) != 1 || env.notes[0].kind != evRelease {
			t.Errorf("notes %v", env.notes)
		}
	})
	t.Run("full duplex has no Envoy timer", func(t *testing.T) {
		x, _, _ := newTestExchange(t, testConfig(func(c *Config) { c.Sched.Priority = prio }))
		feed(t, x, reqHeaders(proto{req: modeDuplex, resp: modeDuplex}, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
		if s := tell(x, t0, queued); len(s.send) != 0 {
			t.Fatalf("override sent in FULL_DUPLEX_STREAMED: %v", kinds(s.send))
		}
		if _, ok := x.deadline(); ok {
			t.Fatal("deadline set in FULL_DUPLEX_STREAMED")
		}
	})
	t.Run("late queued notice still overrides once", func(t *testing.T) {
		x, _, _ := newTestExchange(t, testConfig(nil))
		feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
		s := x.onExpire(t0.Add(900 * time.Millisecond))
		if !cmp.Equal([]string{"override 5m10s"}, kinds(s.send)) {
			t.Fatalf("expiry before the queued notice: %v", kinds(s.send))
		}
		if s := tell(x, t0.Add(time.Second), queued); len(s.send) != 0 {
			t.Fatalf("second override %v", kinds(s.send))
		}
	})
}

func TestExchange_ShutdownWhileQueued(t *testing.T) {
	x, env, _ := newTestExchange(t, testConfig(nil))
	feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
	ir := immediateOf(t, x.onShutdown(t0))
	if ir.GetStatus().GetCode() != 503 || headerMap(ir.GetHeaders())["retry-after"] == "" {
		t.Fatalf("status %d headers %v", ir.GetStatus().GetCode(), headerMap(ir.GetHeaders()))
	}
	x.close(t0, errClientGone)
	if len(env.notes) != 0 {
		t.Errorf("notes %v after the dispatcher stopped", env.notes)
	}
	// A submit to a stopped dispatcher is answered the same way.
	x, env, _ = newTestExchange(t, testConfig(nil))
	env.submitErr = errStopped
	feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false))
	if ir := immediateOf(t, x.message(t0, reqBody(chatBody, true))); ir.GetStatus().GetCode() != 503 {
		t.Fatalf("status %d", ir.GetStatus().GetCode())
	}
	x.close(t0, errClientGone)
	if len(env.notes) != 0 {
		t.Errorf("notes %v after a submit to a stopped dispatcher", env.notes)
	}
}

// TestExchange_RouteWithoutTheDispatcher: a request outside admission
// whose route call fails is answered 503 when the dispatcher stopped, and
// not at all when the client left first.
func TestExchange_RouteWithoutTheDispatcher(t *testing.T) {
	x, env, _ := newTestExchange(t, testConfig(nil))
	env.routeErr = errStopped
	if ir := immediateOf(t, x.message(t0, reqHeaders(proto{req: modeBuffered}, "GET", "/v1/models", true))); ir.GetStatus().GetCode() != 503 {
		t.Fatalf("dispatcher stopped: status %d", ir.GetStatus().GetCode())
	}
	x, env, _ = newTestExchange(t, testConfig(nil))
	env.routeErr = context.Canceled
	s := x.message(t0, reqHeaders(proto{req: modeBuffered}, "GET", "/v1/models", true))
	if len(s.send) != 0 || !s.end || !errors.Is(s.err, errClientGone) {
		t.Fatalf("client gone: send %v end %v err %v", kinds(s.send), s.end, s.err)
	}
}

// TestExchange_SubmitAfterTheClientLeft: a submit that fails because the
// stream's context ended is a departure: nobody is answered, nothing is
// owed, and the stream ends as a client's normal end.
func TestExchange_SubmitAfterTheClientLeft(t *testing.T) {
	x, env, p := newTestExchange(t, testConfig(nil))
	env.submitErr = context.Canceled
	feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false))
	s := x.message(t0, reqBody(chatBody, true))
	if len(s.send) != 0 || !s.end || !errors.Is(s.err, errClientGone) {
		t.Fatalf("send %v end %v err %v", kinds(s.send), s.end, s.err)
	}
	x.close(t0, s.err)
	if len(env.notes) != 0 {
		t.Errorf("notes %v", env.notes)
	}
	if got := testutil.ToFloat64(p.metrics.rejections.WithLabelValues("server_shutting_down")); got != 0 {
		t.Errorf("a departure counted as %v shutdown rejections", got)
	}
}

// preemptible builds an admitted exchange of the default class (which
// interactive may preempt, so the scheduler marks its dispatch) in the
// given response mode.
func preemptible(t *testing.T, p proto) (*exchange, *fakeEnv) {
	t.Helper()
	x, env, _ := newTestExchange(t, testConfig(func(c *Config) { c.Sched.Priority = sched.DefaultPriorityConfig() }))
	feed(t, x, reqHeaders(p, "POST", "/v1/chat/completions", false))
	feed(t, x, reqBody(chatBody, true))
	d := dispatched(false)
	d.decision.action.Preemptible = true
	tell(x, t0, d)
	return x, env
}

func TestExchange_PreemptionWithHeldResponseHeaders(t *testing.T) {
	for _, p := range []proto{{req: modeBuffered, resp: modeStreamed, early: true}, {req: modeDuplex, resp: modeDuplex}} {
		x, env := preemptible(t, p)
		if got := feed(t, x, respHeaders(false), respBody("", false)); len(got) != 0 {
			t.Fatalf("resp mode %v: held response answered %v", p.resp, got)
		}
		s := tell(x, t0, preempted)
		ir := immediateOf(t, s)
		h := headerMap(ir.GetHeaders())
		if ir.GetStatus().GetCode() != 503 || h["x-smg-preempted"] != "true" || h["retry-after"] != "1" || h["x-smg-error-code"] != "scheduler_preempted" || !s.end {
			t.Errorf("resp mode %v: status %d headers %v end %v", p.resp, ir.GetStatus().GetCode(), h, s.end)
		}
		x.close(t0, errClientGone)
		if !cmp.Equal([]note{{evRelease, 7}}, env.notes, cmp.AllowUnexported(note{})) {
			t.Errorf("resp mode %v: notes %v", p.resp, env.notes)
		}
	}
}

// TestExchange_PreemptionWithoutOutstandingMessage: Envoy accepts an
// unsolicited ImmediateResponse whenever processing is not complete
// (ext_proc.cc:1876-1899), so the victim gets SMG's full answer, not a gRPC
// error that only a CEL local-reply mapper could turn into it.
func TestExchange_PreemptionWithoutOutstandingMessage(t *testing.T) {
	x, env := preemptible(t, proto{req: modeBuffered, resp: modeStreamed, early: true})
	s := tell(x, t0, preempted)
	if !s.end || s.err != nil || len(s.send) != 1 {
		t.Fatalf("end %v err %v send %v", s.end, s.err, kinds(s.send))
	}
	ir := immediateOf(t, s)
	h := headerMap(ir.GetHeaders())
	if ir.GetStatus().GetCode() != 503 || h["x-smg-preempted"] != "true" || h["retry-after"] != "1" || h["x-smg-error-code"] != "scheduler_preempted" ||
		!strings.Contains(string(ir.GetBody()), `"code":"scheduler_preempted"`) {
		t.Errorf("status %d headers %v body %s", ir.GetStatus().GetCode(), h, ir.GetBody())
	}
	x.close(t0, errClientGone)
	if !cmp.Equal([]note{{evRelease, 7}}, env.notes, cmp.AllowUnexported(note{})) {
		t.Errorf("notes %v", env.notes)
	}
}

// TestExchange_PreemptedRightAfterTheRoute: a victim chosen before any
// response gets SMG's answer as an unsolicited ImmediateResponse, which
// Envoy turns into its local reply (ext_proc.cc:1876-1899).
func TestExchange_PreemptedRightAfterTheRoute(t *testing.T) {
	x, env, _ := newTestExchange(t, testConfig(func(c *Config) { c.Sched.Priority = sched.DefaultPriorityConfig() }))
	feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
	if got := kinds(tell(x, t0, queued).send); len(got) != 1 || !strings.HasPrefix(got[0], "override") {
		t.Fatalf("queued: %v", got)
	}
	if got := kinds(tell(x, t0, dispatched(true)).send); !cmp.Equal([]string{"req_body+route"}, got) {
		t.Fatalf("dispatched: %v", got)
	}
	s := tell(x, t0, preempted)
	if ir := immediateOf(t, s); ir.GetStatus().GetCode() != 503 || headerMap(ir.GetHeaders())["x-smg-preempted"] != "true" {
		t.Fatalf("status %d", ir.GetStatus().GetCode())
	}
	if !cmp.Equal([]note{{evRelease, 7}}, env.notes, cmp.AllowUnexported(note{})) {
		t.Errorf("notes %v", env.notes)
	}
}

func TestExchange_FirstTokenEndsPreemptibility(t *testing.T) {
	x, env := preemptible(t, proto{req: modeBuffered, resp: modeStreamed, early: true})
	feed(t, x, respHeaders(false))
	got := feed(t, x, respBody("", false), respBody("tok", false))
	if diff := cmp.Diff([]string{"resp_headers", "resp_body", "resp_body"}, got); diff != "" {
		t.Fatalf("release (-want +got):\n%s", diff)
	}
	if s := tell(x, t0, preempted); s.end || len(s.send) != 0 {
		t.Fatalf("preemption after the first token acted: %v %v", kinds(s.send), s.err)
	}
	feed(t, x, respBody("more", true))
	x.close(t0, errClientGone)
	if diff := cmp.Diff([]note{{evFirstToken, 7}, {evRelease, 7}}, env.notes, cmp.AllowUnexported(note{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestExchange_ResponseHoldRespectsEnvoyTimer(t *testing.T) {
	x, _ := preemptible(t, proto{req: modeBuffered, resp: modeStreamed, early: true})
	feed(t, x, respHeaders(false))
	at, ok := x.deadline()
	if !ok || !at.Equal(t0.Add(900*time.Millisecond)) {
		t.Fatalf("deadline %v %v", at, ok)
	}
	if s := x.onExpire(at); !cmp.Equal([]string{"override 5m10s"}, kinds(s.send)) {
		t.Fatalf("first expiry: %v", kinds(s.send))
	}
	at, _ = x.deadline()
	if s := x.onExpire(at); !cmp.Equal([]string{"resp_headers"}, kinds(s.send)) {
		t.Fatalf("second expiry: %v", kinds(s.send))
	}
	if _, ok := x.deadline(); ok {
		t.Error("deadline left after the release")
	}
}

func TestExchange_ResponseNotHeldWhenProtocolForbids(t *testing.T) {
	for _, p := range []proto{{req: modeBuffered, resp: modeStreamed}, {req: modeBuffered, resp: modeBuffered}, {req: modeBuffered, resp: modeNone}} {
		x, _ := preemptible(t, p)
		if got := feed(t, x, respHeaders(false)); !cmp.Equal([]string{"resp_headers"}, got) {
			t.Errorf("resp mode %v early %v: %v", p.resp, p.early, got)
		}
	}
}

func TestExchange_FullDuplexResponseEcho(t *testing.T) {
	x, env, _ := newTestExchange(t, testConfig(nil))
	feed(t, x, reqHeaders(proto{req: modeDuplex, resp: modeDuplex}, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
	tell(x, t0, dispatched(false))
	got := feed(t, x, respHeaders(false), respBody("ab", false), respBody("c", true))
	if diff := cmp.Diff([]string{"resp_headers", "resp_body+stream:2", "resp_body+stream:1:eos"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]note{{evFirstToken, 7}, {evRelease, 7}}, env.notes, cmp.AllowUnexported(note{})); diff != "" {
		t.Errorf("notes (-want +got):\n%s", diff)
	}
}

func TestExchange_ProtocolErrors(t *testing.T) {
	x, _, _ := newTestExchange(t, testConfig(nil))
	if s := x.message(t0, reqBody("x", true)); !s.end || status.Code(s.err) != codes.FailedPrecondition {
		t.Errorf("body first: %v", s.err)
	}
	x, _, _ = newTestExchange(t, testConfig(nil))
	feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
	tell(x, t0, rejected(sched.Action{Outcome: sched.OutcomeQueueFull}))
	if s := x.message(t0, respHeaders(false)); !s.end || status.Code(s.err) != codes.FailedPrecondition {
		t.Errorf("response after an immediate response: %v", s.err)
	}
}

func TestExchange_UsageComparison(t *testing.T) {
	x, _, p := newTestExchange(t, testConfig(nil))
	feed(t, x, reqHeaders(proto{req: modeBuffered, resp: modeBuffered}, "POST", "/v1/completions", false),
		reqBody(`{"model":"llama","prompt":"`+strings.Repeat("abcd", 25)+`"}`, true))
	tell(x, t0, dispatched(false))
	feed(t, x, respHeaders(false), respBody(`{"usage":{"prompt_tokens":20,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens":1}}`, true))
	// The estimate is 25 tokens (100 bytes / 4): +25% against 20.
	if got := histogramSum(t, p.metrics, "tollgate_cost_estimate_error_ratio"); got != 0.25 {
		t.Errorf("cost error sum %v, want 0.25", got)
	}
	mfs, _ := p.metrics.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "tollgate_cost_estimate_error_ratio" {
			continue
		}
		labels := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["model"] != "llama" || labels["tokenizer"] != "estimate" {
			t.Errorf("cost error labels %v, want model llama, tokenizer estimate", labels)
		}
	}
}

// A split request names its prefill worker in x-prefiller-host-port; a
// whole one removes the header, so a client's value never reaches a worker.
func TestRouting_PrefillerHeader(t *testing.T) {
	split, _ := routing(&fleet.Target{Address: "10.0.0.7:8000", Prefiller: "10.0.0.9:8000"})
	if got := headerMap(split)[headerPrefiller]; got != "10.0.0.9:8000" || slices.Contains(split.GetRemoveHeaders(), headerPrefiller) {
		t.Errorf("split: set %v, removed %v", headerMap(split), split.GetRemoveHeaders())
	}
	whole, _ := routing(&fleet.Target{Address: "10.0.0.7:8000"})
	if _, set := headerMap(whole)[headerPrefiller]; set || !slices.Contains(whole.GetRemoveHeaders(), headerPrefiller) {
		t.Errorf("whole: set %v, removed %v", headerMap(whole), whole.GetRemoveHeaders())
	}
}
