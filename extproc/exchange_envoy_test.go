package extproc

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate/tollgate/sched"
)

// respHeadersStatus is response_headers with the given :status.
func respHeadersStatus(code string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":status", RawValue: []byte(code)}, {Key: "content-type", RawValue: []byte("text/plain")}}}, EndOfStream: eos}}}
}

// TestExchange_EnvoyLocalReplyBeforeTheRoute mirrors Envoy >= 1.37, which
// sends its own local replies through ext_proc while processing is
// incomplete (ext_proc.cc:1351-1393, no local-reply check since PR #41769):
// the 413 for a BUFFERED body over the buffer limit
// (filter_manager.cc:569-576) arrives while tollgate holds nothing, the
// HCM's 504 (conn_manager_impl.cc:1061-1077) while the request is queued.
// tollgate must let the reply through with CONTINUE, free the request's
// place at once and end the stream cleanly, never answer with an error
// that would make Envoy replace its status with status_on_error.
func TestExchange_EnvoyLocalReplyBeforeTheRoute(t *testing.T) {
	tests := []struct {
		name   string
		p      proto
		before []*extprocv3.ProcessingRequest
		queued bool
		code   string
		duplex bool
	}{
		{"413 buffered body, nothing held", proto{req: modeBuffered, resp: modeStreamed},
			[]*extprocv3.ProcessingRequest{reqHeaders(proto{req: modeBuffered, resp: modeStreamed}, "POST", "/v1/chat/completions", false)}, false, "413", false},
		{"504 buffered, queued", proto{req: modeBuffered, resp: modeStreamed},
			[]*extprocv3.ProcessingRequest{reqHeaders(proto{req: modeBuffered, resp: modeStreamed}, "POST", "/v1/chat/completions", false), reqBody(chatBody, true)}, true, "504", false},
		{"504 streamed headers, queued", proto{req: modeStreamed, resp: modeStreamed},
			[]*extprocv3.ProcessingRequest{reqHeaders(proto{req: modeStreamed, resp: modeStreamed}, "POST", "/v1/chat/completions", false)}, true, "504", false},
		{"504 full duplex, queued", proto{req: modeDuplex, resp: modeStreamed},
			[]*extprocv3.ProcessingRequest{reqHeaders(proto{req: modeDuplex, resp: modeStreamed}, "POST", "/v1/chat/completions", false), reqBody(chatBody, false), reqTrailers()}, true, "504", false},
		{"504 full duplex response, queued", proto{req: modeDuplex, resp: modeDuplex},
			[]*extprocv3.ProcessingRequest{reqHeaders(proto{req: modeDuplex, resp: modeDuplex}, "POST", "/v1/chat/completions", false), reqBody(chatBody, true)}, true, "504", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, env, p := newTestExchange(t, testConfig(nil))
			got := feed(t, x, tc.before...)
			if tc.queued && slices.ContainsFunc(got, func(k string) bool { return strings.HasSuffix(k, "+route") }) {
				t.Fatalf("queued request routed: %v", got)
			}
			if tc.queued {
				tell(x, t0, queued)
				if !x.waiting() {
					t.Fatal("request not waiting")
				}
			}
			got = feed(t, x, respHeadersStatus(tc.code, false))
			if diff := cmp.Diff([]string{"resp_headers"}, got); diff != "" {
				t.Fatalf("headers reply (-want +got):\n%s", diff)
			}
			if x.waiting() {
				t.Error("still waiting for the scheduler after Envoy's reply")
			}
			if _, ok := x.deadline(); ok {
				t.Error("a deadline is left after Envoy's reply")
			}
			var want []note
			if tc.queued {
				want = []note{{evRelease, 7}} // the slot and queue place are freed now
			}
			if diff := cmp.Diff(want, env.notes, cmp.AllowUnexported(note{})); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
			// The scheduler's late decision changes nothing, and request
			// messages still in flight are not answered.
			if s := tell(x, t0, dispatched(true)); len(s.send) != 0 || s.end {
				t.Errorf("late dispatch answered %v", kinds(s.send))
			}
			for _, m := range []*extprocv3.ProcessingRequest{reqBody("x", true), reqTrailers()} {
				if s := x.message(t0, m); len(s.send) != 0 || s.end {
					t.Errorf("request message after Envoy's reply answered %v end %v", kinds(s.send), s.end)
				}
			}
			s := x.message(t0, respBody("Payload Too Large", true))
			wantBody := "resp_body"
			if tc.duplex {
				wantBody = "resp_body+stream:17:eos"
			}
			if diff := cmp.Diff([]string{wantBody}, kinds(s.send)); diff != "" || !s.end || s.err != nil {
				t.Fatalf("body reply %v end %v err %v (-want +got):\n%s", kinds(s.send), s.end, s.err, diff)
			}
			x.close(t0, nil)
			if diff := cmp.Diff(want, env.notes, cmp.AllowUnexported(note{})); diff != "" {
				t.Errorf("notes after close (-want +got):\n%s", diff)
			}
			if n := testutil.ToFloat64(p.metrics.envoyReplies.WithLabelValues(tc.code)); n != 1 {
				t.Errorf("tollgate_envoy_local_replies_total{status=%s} = %v; want 1", tc.code, n)
			}
		})
	}
}

// TestExchange_EnvoyLocalReplyEndsWithHeadersOrTrailers: a body-less reply
// ends with its headers; response trailers end one too.
func TestExchange_EnvoyLocalReplyEndsWithHeadersOrTrailers(t *testing.T) {
	pr := proto{req: modeBuffered, resp: modeStreamed}
	x, env, _ := newTestExchange(t, testConfig(nil))
	feed(t, x, reqHeaders(pr, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
	s := x.message(t0, respHeadersStatus("504", true))
	if !cmp.Equal([]string{"resp_headers"}, kinds(s.send)) || !s.end || s.err != nil {
		t.Fatalf("send %v end %v err %v", kinds(s.send), s.end, s.err)
	}
	x.close(t0, nil)
	if !cmp.Equal([]note{{evRelease, 7}}, env.notes, cmp.AllowUnexported(note{})) {
		t.Errorf("notes %v", env.notes)
	}

	x, _, _ = newTestExchange(t, testConfig(nil))
	feed(t, x, reqHeaders(pr, "POST", "/v1/chat/completions", false), respHeadersStatus("413", false), respBody("x", false))
	s = x.message(t0, respTrailers())
	if !cmp.Equal([]string{"resp_trailers"}, kinds(s.send)) || !s.end || s.err != nil {
		t.Fatalf("send %v end %v err %v", kinds(s.send), s.end, s.err)
	}
}

// TestExchange_NonWorkerResponseIsNoFirstToken: after the route, a
// router-made 503 (no healthy upstream, connect failure; Envoy >= 1.37 sends
// it through ext_proc) or a worker's error is not a first token, is never
// held for preemption, and its body does not feed the usage comparison.
func TestExchange_NonWorkerResponseIsNoFirstToken(t *testing.T) {
	for _, code := range []string{"503", "500", "429"} {
		x, env := preemptible(t, proto{req: modeBuffered, resp: modeStreamed, early: true})
		got := feed(t, x, respHeadersStatus(code, false),
			respBody(`{"usage":{"prompt_tokens":20,"completion_tokens":1}}`, false), respBody("upstream connect error", true))
		if diff := cmp.Diff([]string{"resp_headers", "resp_body", "resp_body"}, got); diff != "" {
			t.Errorf("%s: replies (-want +got):\n%s", code, diff)
		}
		x.close(t0, nil)
		if diff := cmp.Diff([]note{{evRelease, 7}}, env.notes, cmp.AllowUnexported(note{})); diff != "" {
			t.Errorf("%s: notes (-want +got):\n%s", code, diff)
		}
		if x.compared {
			t.Errorf("%s: usage compared", code)
		}
	}
}

// TestExchange_MissingSourceAddress: with --client-ip-source
// source-address, a request without the attribute (Envoy sends it only
// when request_attributes lists it, ext_proc.cc:1607-1621) is counted every
// time and logged once.
func TestExchange_MissingSourceAddress(t *testing.T) {
	var logs bytes.Buffer
	cfg := testConfig(func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	x, _, p := newTestExchange(t, cfg)
	for i := range 3 {
		x = newExchange(p, x.env, cfg.Logger, uint64(i))
		m := reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false)
		m.Attributes = nil
		feed(t, x, m)
		if x.who.Tenant != "anonymous" {
			t.Errorf("tenant %q", x.who.Tenant)
		}
	}
	if n := testutil.ToFloat64(p.metrics.sourceAddressMissing); n != 3 {
		t.Errorf("tollgate_client_address_missing_total = %v; want 3", n)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 || !strings.Contains(logs.String(), "request_attributes: [source.address]") {
		t.Errorf("logged %d times, want once at ERROR:\n%s", n, logs.String())
	}
	// With the attribute present nothing is counted.
	x = newExchange(p, x.env, cfg.Logger, 9)
	feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false))
	if n := testutil.ToFloat64(p.metrics.sourceAddressMissing); n != 3 {
		t.Errorf("counted a request that had the attribute: %v", n)
	}
	// x-forwarded-for mode never looks at it.
	cfg = testConfig(func(c *Config) { c.ClientIP = ClientIPForwardedFor })
	x, _, p = newTestExchange(t, cfg)
	m := reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false)
	m.Attributes = map[string]*structpb.Struct{}
	feed(t, x, m)
	if n := testutil.ToFloat64(p.metrics.sourceAddressMissing); n != 0 {
		t.Errorf("x-forwarded-for mode counted %v", n)
	}
}

// TestServer_EnvoyLocalReplyToAQueuedRequest runs the same through the
// stream loop: a queued stream still receives, so Envoy's own local reply
// (the HCM's 504 for stream_idle_timeout, conn_manager_impl.cc:1061-1077)
// is answered at once with CONTINUE, not after Envoy's message timer or
// tollgate's queue timeout, and the queue place is free before the reply's
// end. The stream ends cleanly at the reply's end.
func TestServer_EnvoyLocalReplyToAQueuedRequest(t *testing.T) {
	for _, resp := range []extprocfilterv3.ProcessingMode_BodySendMode{modeStreamed, modeDuplex} {
		t.Run(resp.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ts := startServer(t, Config{Sched: sched.Config{Priority: testPriority()}}, oneWorker)
				p := proto{req: modeBuffered, resp: resp}
				a, b := ts.admitThenQueue(p)
				ts.waitStats("b queued", func(s sched.Stats) bool { return s.QueueDepth[sched.PriorityDefault] == 1 })
				b.send(respHeadersStatus("504", false))
				if got := b.recvKinds(1); !cmp.Equal([]string{"resp_headers"}, got) {
					t.Fatalf("Envoy's reply headers answered %v", got)
				}
				ts.waitStats("b out of the queue", func(s sched.Stats) bool { return s.QueueDepth[sched.PriorityDefault] == 0 })
				b.send(respBody("upstream request timeout", true))
				b.recvKinds(1)
				if err := b.end(); !errors.Is(err, io.EOF) {
					t.Fatalf("b end %v, want a clean end", err)
				}
				a.finish()
				ts.waitIdle()
			})
		})
	}
}
