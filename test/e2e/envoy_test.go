package e2e

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/test/envoysim"
)

// metric returns the sample line of name{labels} from tollgate's /metrics,
// or "" when there is none.
func (s *stack) metric(name, labels string) string {
	s.t.Helper()
	rec := httptest.NewRecorder()
	s.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	prefix := name + " "
	if labels != "" {
		prefix = name + "{" + labels + "} "
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

// TestEnvoyOwnRepliesReachTheClient: since Envoy 1.37 its own local replies
// pass through ext_proc while processing is incomplete (ext_proc.cc:1351-1393,
// PR #41769). Here the connection manager's request_timeout answers a
// request held in tollgate's queue (504 once the whole request was received:
// conn_manager_impl.cc:1061-1077). A queued stream still receives, so on
// 1.37+ tollgate answers the reply's headers at once with CONTINUE: the
// client gets Envoy's own 504, not the 504 of Envoy's message timer
// (ext_proc.cc:2029-2053), and the queue place is freed at once. On 1.36
// the reply skips ext_proc and the side stream is reset; the place is
// freed too.
func TestEnvoyOwnRepliesReachTheClient(t *testing.T) {
	for _, m := range bodyModes {
		for _, v := range []envoysim.Version{envoysim.VersionLatest, envoysim.Version1_36} {
			t.Run(m.name+"/504 request timeout while queued/"+v.String(), inBubble(func(t *testing.T) {
				s := newStack(t, options{mode: m.req, maxRunning: 1, hold: always,
					config: func(c *extproc.Config) { c.Sched.Priority = priorityConfig(30 * time.Second) },
					sim: func(c *envoysim.Config) {
						c.Version = v
						c.RequestTimeout = 500 * time.Millisecond // disarmed once a request went upstream
					}})
				first := s.async(context.Background(), chat("first"))
				s.parked(1)
				second := s.async(context.Background(), chat("second"))
				s.queued(sched.PriorityDefault, 1)
				res := s.await(second)
				if res.err != nil {
					t.Fatal(res.err)
				}
				expectStatus(t, res.r, http.StatusGatewayTimeout, "")
				if string(res.r.Body) != "request timeout" || res.r.Details != "request_overall_timeout" || res.r.Header.Get("X-Smg-Error-Code") != "" {
					t.Errorf("client got %q details %q headers %v, want Envoy's own 504", res.r.Body, res.r.Details, res.r.Header)
				}
				st := s.waitStats("second gone", func(st sched.Stats) bool { return st.QueueDepth[sched.PriorityDefault] == 0 })
				if got := st.Admits[sched.PriorityDefault][sched.OutcomeClientCancelled]; got != 1 {
					t.Errorf("client_cancelled %d, want 1", got)
				}
				// 1.37+ sends the reply through tollgate's exchange.
				got, want := s.metric("tollgate_envoy_local_replies_total", `status="504"`), ""
				if v == envoysim.VersionLatest {
					want = "1"
				}
				if (want == "") != (got == "") || !strings.HasSuffix(got, want) {
					t.Errorf("tollgate_envoy_local_replies_total{status=504}: %q, want %q", got, want)
				}
				s.gate.Open()
				expectStatus(t, s.await(first).r, http.StatusOK, "")
				expectStatus(t, s.do(chat("third")), http.StatusOK, "")
			}))
		}
		t.Run(m.name+"/body over the listener buffer", inBubble(func(t *testing.T) {
			s := newStack(t, options{mode: m.req, sim: func(c *envoysim.Config) { c.BufferLimitBytes = 4096 }})
			r := s.do(completion(strings.Repeat("x", 8192)))
			if m.req != bodyModes[0].req {
				// STREAMED and FULL_DUPLEX_STREAMED bodies are never buffered
				// whole: over the limit Envoy applies back-pressure, no 413.
				expectStatus(t, r, http.StatusOK, "")
				return
			}
			// BUFFERED: the filter manager answers 413 itself
			// (filter_manager.cc:569-576) while tollgate holds nothing yet.
			expectStatus(t, r, http.StatusRequestEntityTooLarge, "")
			if string(r.Body) != "Payload Too Large" || r.Details != "request_payload_too_large" {
				t.Errorf("client got %q details %q, want Envoy's own 413", r.Body, r.Details)
			}
			if got := s.metric("tollgate_envoy_local_replies_total", `status="413"`); !strings.HasSuffix(got, " 1") {
				t.Errorf("tollgate_envoy_local_replies_total{status=413}: %q", got)
			}
			expectStatus(t, s.do(chat("next")), http.StatusOK, "")
		}))
		t.Run(m.name+"/router 503 after the route", inBubble(func(t *testing.T) {
			// The worker address refuses connections: the router's 503 is
			// sent through ext_proc in the routed stage; it is no first
			// token and the slot is freed.
			s := newStack(t, options{mode: m.req, maxRunning: 1, deadWorker: true,
				config: func(c *extproc.Config) { c.Sched.Priority = priorityConfig(30 * time.Second) }})
			for range 3 { // one slot: each must be free again for the next
				r := s.do(chat("hello"))
				expectStatus(t, r, http.StatusServiceUnavailable, "")
				if r.Details != "upstream_reset_before_response_started{connection_failure}" ||
					!strings.HasPrefix(string(r.Body), "upstream connect error") {
					t.Errorf("client got %q details %q, want Envoy's own 503", r.Body, r.Details)
				}
			}
			if n := s.sim.Stats().LocalRepliesProcessed; n != 3 {
				t.Errorf("local replies through ext_proc %d, want 3", n)
			}
		}))
	}
}

// TestClientAddressTenants: with the shipped filter settings
// (request_attributes: [source.address]) an unauthenticated client is the
// ip: tenant of its address. Without the attribute (Envoy sends only listed
// attributes, ext_proc.cc:1607-1621) every client would be anonymous;
// tollgate counts that.
func TestClientAddressTenants(t *testing.T) {
	for _, m := range bodyModes {
		t.Run(m.name, inBubble(func(t *testing.T) {
			s := newStack(t, options{mode: m.req})
			req := chat("hi", "X-Smg-Priority", "no-such-class")
			req.RemoteAddr = "198.51.100.7:40123"
			expectStatus(t, s.do(req), http.StatusOK, "")
			if got := s.metric("smg_scheduler_unknown_priority_value_total", `tenant="ip:198.51.100.7"`); !strings.HasSuffix(got, " 1") {
				t.Errorf("ip tenant not resolved: %q", got)
			}
			if got := s.metric("tollgate_client_address_missing_total", ""); !strings.HasSuffix(got, " 0") {
				t.Errorf("tollgate_client_address_missing_total: %q", got)
			}
		}))
	}
	t.Run("without the attribute", inBubble(func(t *testing.T) {
		s := newStack(t, options{sim: func(c *envoysim.Config) { c.RequestAttributes = nil }})
		req := chat("hi", "X-Smg-Priority", "no-such-class")
		req.RemoteAddr = "198.51.100.7:40123"
		expectStatus(t, s.do(req), http.StatusOK, "")
		if got := s.metric("smg_scheduler_unknown_priority_value_total", `tenant="anonymous"`); !strings.HasSuffix(got, " 1") {
			t.Errorf("tenant: %q", got)
		}
		if got := s.metric("tollgate_client_address_missing_total", ""); !strings.HasSuffix(got, " 1") {
			t.Errorf("tollgate_client_address_missing_total: %q", got)
		}
	}))
}
