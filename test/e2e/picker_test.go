package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/test/envoysim"
	"github.com/tollgate/tollgate/test/mockworker"
)

// subsetHint is the data plane's endpoint subset in the metadata_context
// of the request: envoy.lb.subset_hint / x-gateway-destination-endpoint-subset.
func subsetHint(v *structpb.Value) map[string]*structpb.Struct {
	return map[string]*structpb.Struct{"envoy.lb.subset_hint": {Fields: map[string]*structpb.Value{
		"x-gateway-destination-endpoint-subset": v,
	}}}
}

func subsetList(entries ...string) *structpb.Value {
	vs := make([]*structpb.Value, len(entries))
	for i, e := range entries {
		vs[i] = structpb.NewStringValue(e)
	}
	return structpb.NewListValue(&structpb.ListValue{Values: vs})
}

// TestSubsetHints replays the endpoint picker protocol's subset vectors in
// every body mode: the hermetic suite of the Gateway API Inference
// Extension's picker (test/integration/epp/hermetic_test.go:239-272 at
// 1748e829: best of the subset, a single member despite its load, no
// member known → 503), its candidate tests (pkg/epp/requestcontrol/
// candidates_test.go:72-106: empty list → none), and the lightweight
// picker's string form (pkg/lwepp/handlers/request.go:51-80: a
// comma-separated string, entries trimmed).
func TestSubsetHints(t *testing.T) {
	for _, m := range bodyModes {
		t.Run(m.name, inBubble(func(t *testing.T) {
			s := newStack(t, options{mode: m.req, workers: 3})
			addr := func(i int) string { return s.list[i].Address }
			with := func(md map[string]*structpb.Struct, content string) envoysim.Request {
				r := chat(content)
				r.MetadataContext = md
				return r
			}
			// Member of the subset every time, although the others are idle.
			for i := range 4 {
				r := s.do(with(subsetHint(subsetList(addr(1), addr(2))), strings.Repeat("subset ", 10+i)))
				expectStatus(t, r, http.StatusOK, "")
				if r.Endpoint != addr(1) && r.Endpoint != addr(2) {
					t.Fatalf("request %d routed to %s outside the subset {%s, %s}", i, r.Endpoint, addr(1), addr(2))
				}
			}
			// A single member, as a comma-separated string with blanks.
			r := s.do(with(subsetHint(structpb.NewStringValue(" "+addr(2)+" , ,")), "single member"))
			expectStatus(t, r, http.StatusOK, "")
			if r.Endpoint != addr(2) {
				t.Fatalf("routed to %s, want the only member %s", r.Endpoint, addr(2))
			}
			// List entries may themselves be comma-separated.
			r = s.do(with(subsetHint(subsetList(addr(0)+", 192.168.1.99:8000")), "nested list"))
			expectStatus(t, r, http.StatusOK, "")
			if r.Endpoint != addr(0) {
				t.Fatalf("routed to %s, want %s", r.Endpoint, addr(0))
			}
			// An entry without a port admits every port of its address: the
			// mock workers all listen on one.
			host, _, err := net.SplitHostPort(addr(0))
			if err != nil {
				t.Fatal(err)
			}
			r = s.do(with(subsetHint(subsetList(host)), "address only"))
			expectStatus(t, r, http.StatusOK, "")
			// Outside admission too (GET /v1/models).
			get := envoysim.Request{Method: http.MethodGet, Path: "/v1/models", MetadataContext: subsetHint(subsetList(addr(1)))}
			if r := s.do(get); r.Status != http.StatusOK || r.Endpoint != addr(1) {
				t.Fatalf("GET with a subset: %d to %s, want 200 to %s", r.Status, r.Endpoint, addr(1))
			}

			for _, c := range []struct {
				name string
				md   map[string]*structpb.Struct
				want string
			}{
				{"no member is a known worker", subsetHint(subsetList("192.168.1.99:8000")), "no endpoint in the request's endpoint subset"},
				{"another address, no port", subsetHint(subsetList("198.51.100.2")), "no endpoint in the request's endpoint subset"},
				{"a known address on another port", subsetHint(subsetList(host + ":1")), "no endpoint in the request's endpoint subset"},
				{"empty list", subsetHint(subsetList()), "endpoint subset hint"},
				{"empty string", subsetHint(structpb.NewStringValue(" , ")), "endpoint subset hint"},
				{"not a list", subsetHint(structpb.NewNumberValue(1)), "invalid endpoint subset hint"},
			} {
				r := s.do(with(c.md, "unserved "+c.name))
				expectStatus(t, r, http.StatusServiceUnavailable, "no_endpoints")
				if !r.LocalReply || !strings.Contains(string(r.Body), c.want) {
					t.Fatalf("%s: body %q lacks %q", c.name, r.Body, c.want)
				}
				get.MetadataContext = c.md
				if r := s.do(get); r.Status != http.StatusServiceUnavailable {
					t.Fatalf("%s: GET answered %d, want 503", c.name, r.Status)
				}
			}
			// Other namespaces, or the namespace without the key, leave
			// every worker eligible.
			other := map[string]*structpb.Struct{"envoy.lb.subset_hint": {Fields: map[string]*structpb.Value{"other": subsetList("192.168.1.99:8000")}}}
			expectStatus(t, s.do(with(other, "no key")), http.StatusOK, "")
		}))
	}
}

// TestNoProtocolConfig is a data plane that does not announce its modes
// (Envoy before 1.34): with the matching --assume-request-body-mode every
// mode is routed and, in FULL_DUPLEX_STREAMED, gets its body back whole.
// The peers' pickers run FULL_DUPLEX_STREAMED on every Envoy (GIE
// pkg/epp/handlers/server.go at 1748e829 never reads protocol_config).
func TestNoProtocolConfig(t *testing.T) {
	for _, m := range bodyModes {
		t.Run(m.name, inBubble(func(t *testing.T) {
			s := newStack(t, options{mode: m.req,
				config: func(c *extproc.Config) {
					c.AssumedProtocol = &extprocv3.ProtocolConfiguration{RequestBodyMode: m.req, ResponseBodyMode: extprocfilterv3.ProcessingMode_STREAMED}
				},
				sim: func(c *envoysim.Config) {
					c.OmitProtocolConfig = true
					c.SendBodyWithoutWaitingForHeaderResponse = false
				}})
			req := chat(strings.Repeat("no protocol config ", 4000)) // > one 62 kB re-streamed chunk
			r := s.do(req)
			expectStatus(t, r, http.StatusOK, "")
			if r.Endpoint == "" || r.Upstream == nil {
				t.Fatalf("not routed: %+v", r)
			}
			if string(r.Upstream.Body) != string(req.Body) {
				t.Fatalf("upstream body %d bytes, want the %d sent", len(r.Upstream.Body), len(req.Body))
			}
			if !strings.Contains(string(r.Body), "data: [DONE]") {
				t.Errorf("response body %q", r.Body)
			}
		}))
	}
}

// TestNoProtocolConfigWrongAssumption shows why the flag exists: a
// full-duplex data plane taken for the default BUFFERED one never gets
// its request through.
func TestNoProtocolConfigWrongAssumption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStack(t, options{mode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			sim: func(c *envoysim.Config) { c.OmitProtocolConfig = true }})
		r := s.do(chat("wrong assumption"))
		if r.Status == http.StatusOK {
			t.Fatalf("a full-duplex stream read as BUFFERED was served: %+v", r)
		}
	})
}

// TestFallbackEndpoints: with --fallback-endpoints the picker names the
// next-best worker after the chosen one (the protocol's "first preferred"
// list, docs/proposals/004-endpoint-picker-protocol/README.md:48-66 at
// 1748e829), the data plane retries it when the first cannot be reached,
// and reports the served endpoint (README.md:82-96), to which tollgate
// moves the booking.
func TestFallbackEndpoints(t *testing.T) {
	for _, m := range bodyModes {
		t.Run(m.name, inBubble(func(t *testing.T) {
			s := newStack(t, options{mode: m.req, workers: 2, deadWorkers: []int{0},
				hold:   func(mockworker.RequestInfo) bool { return true },
				config: func(c *extproc.Config) { c.Sched.Fallbacks = 1 },
				sim: func(c *envoysim.Config) {
					c.Route.Fallbacks, c.Route.ReportServed = true, true
				}})
			dead, live := s.list[0].Address, s.list[1].Address
			// A request on the dead worker holds nothing once moved; keep
			// sending until one chose it first.
			for i := range 20 {
				ch := s.async(context.Background(), chat(fmt.Sprintf("fallback %d %s", i, strings.Repeat("x", i))))
				s.parked(1)
				st := s.waitStats("booked on the serving worker", func(st sched.Stats) bool {
					for _, r := range st.Ranks {
						if r.Worker == "w0" && r.ActiveRequests != 0 {
							return false
						}
					}
					return true
				})
				for _, r := range st.Ranks {
					if r.Worker == "w1" && r.ActiveRequests != 1 {
						t.Fatalf("w1 books %d requests while serving one", r.ActiveRequests)
					}
				}
				s.gate.Release(1)
				res := s.await(ch)
				if res.err != nil {
					t.Fatal(res.err)
				}
				expectStatus(t, res.r, http.StatusOK, "")
				if res.r.Endpoint != live {
					t.Fatalf("served by %s, want %s", res.r.Endpoint, live)
				}
				if got := res.r.Upstream.Header.Get("X-Gateway-Destination-Endpoint"); got == dead+","+live {
					return // the dead worker was first, the fallback served
				} else if got != live+","+dead {
					t.Fatalf("endpoint list %q, want both workers", got)
				}
			}
			t.Fatal("the dead worker was never chosen first in 20 requests")
		}))
	}
}

// TestConformanceEndpointSelection replays the conformance suite's
// test-only selection (pkg/epp/framework/plugins/scheduling/test/filter/
// request_header_based_filter.go:66-130 and filter_test.go at 1748e829:
// "IP" or "IP:port" entries, an exact port when given, nothing matched →
// no candidate): honoured only with --test-endpoint-selection, and
// narrowing the data plane's subset, never widening it.
func TestConformanceEndpointSelection(t *testing.T) {
	for _, m := range bodyModes {
		t.Run(m.name, inBubble(func(t *testing.T) {
			s := newStack(t, options{mode: m.req, workers: 3,
				config: func(c *extproc.Config) { c.TestEndpointSelection = true }})
			addr := func(i int) string { return s.list[i].Address }
			for i := range 3 {
				r := s.do(chat(fmt.Sprintf("steer %d", i), "test-epp-endpoint-selection", "192.168.1.9, "+addr(i)))
				expectStatus(t, r, http.StatusOK, "")
				if r.Endpoint != addr(i) {
					t.Fatalf("steered to %s, served by %s", addr(i), r.Endpoint)
				}
			}
			r := s.do(chat("nothing known", "test-epp-endpoint-selection", "192.168.1.9:8000"))
			expectStatus(t, r, http.StatusServiceUnavailable, "no_endpoints")
			r = s.do(chat("blank", "test-epp-endpoint-selection", " , "))
			expectStatus(t, r, http.StatusServiceUnavailable, "no_endpoints")
			// With a subset: the header narrows it; outside it, 503.
			req := chat("narrowed", "test-epp-endpoint-selection", addr(1))
			req.MetadataContext = subsetHint(subsetList(addr(0), addr(1)))
			if r := s.do(req); r.Status != http.StatusOK || r.Endpoint != addr(1) {
				t.Fatalf("narrowed subset: %d to %s, want 200 to %s", r.Status, r.Endpoint, addr(1))
			}
			req = chat("widened", "test-epp-endpoint-selection", addr(2))
			req.MetadataContext = subsetHint(subsetList(addr(0), addr(1)))
			expectStatus(t, s.do(req), http.StatusServiceUnavailable, "no_endpoints")
		}))
	}
	// Without the flag the header is ignored: naming no known endpoint
	// does not stop the request.
	t.Run("without the flag", inBubble(func(t *testing.T) {
		s := newStack(t, options{workers: 2})
		r := s.do(chat("ignored", "test-epp-endpoint-selection", "192.168.1.9:8000"))
		expectStatus(t, r, http.StatusOK, "")
	}))
}

// TestModelRewrite: a static rewrite table serves "team-alias" as the workers'
// model. The rewritten name is what tollgate routes (the workers serve
// only the target) and what the worker receives, in every body mode that
// lets tollgate replace the body; BUFFERED carries a matching
// Content-Length (Envoy rejects a mismatch). The peers rewrite in the
// body the same way (GIE pkg/epp/handlers/request.go at 1748e829,
// generateRequestBodyResponses).
func TestModelRewrite(t *testing.T) {
	for _, m := range bodyModes {
		t.Run(m.name, inBubble(func(t *testing.T) {
			s := newStack(t, options{mode: m.req, workers: 2,
				config: func(c *extproc.Config) {
					c.ModelRewrites = map[string][]intake.RewriteTarget{"team-alias": {{Model: model, Weight: 1}}}
				},
				sim: func(c *envoysim.Config) {
					if m.req == extprocfilterv3.ProcessingMode_STREAMED {
						c.SendBodyWithoutWaitingForHeaderResponse = true // the chunks are held
					}
				}})
			body := []byte(`{"model":"team-alias","messages":[{"role":"user","content":"` + strings.Repeat("rewrite me ", 3000) + `"}],"stream":true,"max_tokens":4}`)
			r := s.do(post("/v1/chat/completions", body, "Content-Length", fmt.Sprint(len(body))))
			expectStatus(t, r, http.StatusOK, "")
			up := string(r.Upstream.Body)
			if !strings.Contains(up, `"model":"`+model+`"`) || strings.Contains(up, "team-alias") || !strings.Contains(up, strings.Repeat("rewrite me ", 3000)) {
				t.Fatalf("upstream body not rewritten whole: %.200s", up)
			}
			// The client sees its own name back in every chunk.
			if !strings.Contains(string(r.Body), `"model":"team-alias"`) || strings.Contains(string(r.Body), `"model":"`+model+`"`) {
				t.Fatalf("response names the rewritten model: %.300s", r.Body)
			}
			// A whole JSON answer too, with a length that fits the body.
			cb := []byte(`{"model":"team-alias","prompt":"complete me","max_tokens":4}`)
			r = s.do(post("/v1/completions", cb, "Content-Length", fmt.Sprint(len(cb))))
			expectStatus(t, r, http.StatusOK, "")
			var v struct{ Model string }
			if err := json.Unmarshal(r.Body, &v); err != nil || v.Model != "team-alias" {
				t.Fatalf("completion answer %q: model %q, %v", r.Body, v.Model, err)
			}
			if cl := r.Header.Get("Content-Length"); cl != "" && cl != fmt.Sprint(len(r.Body)) {
				t.Fatalf("Content-Length %s for a %d-byte body", cl, len(r.Body))
			}
			// A name outside the table passes unchanged.
			r = s.do(chat("not rewritten"))
			expectStatus(t, r, http.StatusOK, "")
			if !strings.Contains(string(r.Body), `"model":"`+model+`"`) {
				t.Fatalf("unrewritten response changed: %.200s", r.Body)
			}
		}))
	}
	// STREAMED decided on the headers alone never sees the body: nothing
	// is rewritten, and the worker refuses the unknown name.
	t.Run("streamed on the headers alone", inBubble(func(t *testing.T) {
		s := newStack(t, options{mode: extprocfilterv3.ProcessingMode_STREAMED, anyModel: true,
			config: func(c *extproc.Config) {
				c.ModelRewrites = map[string][]intake.RewriteTarget{"team-alias": {{Model: model, Weight: 1}}}
			}})
		r := s.do(post("/v1/chat/completions", []byte(`{"model":"team-alias","messages":[{"role":"user","content":"x"}]}`)))
		if strings.Contains(string(r.Upstream.Body), `"model":"`+model+`"`) {
			t.Fatal("rewritten although the decision came before the body")
		}
	}))
}

// TestModelRewriteWeighted: weighted targets split the requests; each
// request goes upstream under one of them (the mock workers serve only the
// test model and answer 404 for the other).
func TestModelRewriteWeighted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStack(t, options{workers: 2, anyModel: true,
			config: func(c *extproc.Config) {
				c.ModelRewrites = map[string][]intake.RewriteTarget{"team-alias": {{Model: model, Weight: 1}, {Model: "mistral", Weight: 1}}}
			}})
		seen := map[string]int{}
		for i := range 24 {
			body := []byte(fmt.Sprintf(`{"model":"team-alias","prompt":"split %d","max_tokens":2}`, i))
			r := s.do(post("/v1/completions", body))
			if r.Upstream == nil {
				t.Fatalf("request %d not routed: %d %s", i, r.Status, r.Body)
			}
			var up struct{ Model string }
			if err := json.Unmarshal(r.Upstream.Body, &up); err != nil {
				t.Fatal(err)
			}
			seen[up.Model]++
		}
		if len(seen) != 2 || seen[model] == 0 || seen["mistral"] == 0 {
			t.Fatalf("upstream models %v, want both targets (all 24 on one has probability 2^-23)", seen)
		}
	})
}

// TestModelRewriteBufferedResponse: with a BUFFERED response body the
// client's model name comes back in the whole body, and the response's
// Content-Length is set to the new length in the same reply (Envoy holds
// the headers in this mode and rejects a body whose length differs).
func TestModelRewriteBufferedResponse(t *testing.T) {
	for _, m := range bodyModes {
		t.Run(m.name, inBubble(func(t *testing.T) {
			s := newStack(t, options{mode: m.req, workers: 1,
				config: func(c *extproc.Config) {
					c.ModelRewrites = map[string][]intake.RewriteTarget{"a-much-longer-team-alias": {{Model: model, Weight: 1}}}
				},
				sim: func(c *envoysim.Config) {
					c.Mode.ResponseBodyMode = extprocfilterv3.ProcessingMode_BUFFERED
					if m.req == extprocfilterv3.ProcessingMode_STREAMED {
						c.SendBodyWithoutWaitingForHeaderResponse = true
					}
				}})
			for _, stream := range []bool{false, true} {
				body := []byte(fmt.Sprintf(`{"model":"a-much-longer-team-alias","prompt":"complete me","max_tokens":4,"stream":%t}`, stream))
				r := s.do(post("/v1/completions", body, "Content-Length", fmt.Sprint(len(body))))
				expectStatus(t, r, http.StatusOK, "")
				if !strings.Contains(string(r.Upstream.Body), `"model":"`+model+`"`) {
					t.Fatalf("upstream body not rewritten: %s", r.Upstream.Body)
				}
				if !strings.Contains(string(r.Body), `"model":"a-much-longer-team-alias"`) || strings.Contains(string(r.Body), `"model":"`+model+`"`) {
					t.Fatalf("stream=%t: response names the rewritten model: %.300s", stream, r.Body)
				}
				if !stream && r.Header.Get("Content-Length") == "" {
					t.Fatalf("a whole JSON answer lost its Content-Length")
				}
				if cl := r.Header.Get("Content-Length"); cl != "" && cl != fmt.Sprint(len(r.Body)) {
					t.Fatalf("stream=%t: Content-Length %s for a %d-byte body", stream, cl, len(r.Body))
				}
			}
		}))
	}
}

// TestModelRewriteObjects: rules installed at run time (as the pool's
// InferenceModelRewrite objects are) rewrite the requested model; the
// rewritten name is what tollgate routes and prices (the workers serve
// only it, and the cost-error series names it), the client gets its own
// name back in a BUFFERED response with a Content-Length that fits, the
// rule without matches serves every other name, and the --model-rewrite
// table wins for the names it sets.
func TestModelRewriteObjects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStack(t, options{workers: 2,
			config: func(c *extproc.Config) {
				c.ModelRewrites = map[string][]intake.RewriteTarget{"pinned": {{Model: "served-nowhere", Weight: 1}}}
			},
			sim: func(c *envoysim.Config) { c.Mode.ResponseBodyMode = extprocfilterv3.ProcessingMode_BUFFERED }})
		if _, err := s.srv.SetModelRewrites(intake.ModelRewriteRules{
			Exact: map[string][]intake.RewriteTarget{"team-alias": {{Model: model, Weight: 1}}, "pinned": {{Model: model, Weight: 1}}},
			Other: []intake.RewriteTarget{{Model: model, Weight: 1}},
		}); err != nil {
			t.Fatal(err)
		}
		for _, asked := range []string{"team-alias", "some-other-name"} {
			body := []byte(`{"model":"` + asked + `","prompt":"price me","max_tokens":4}`)
			r := s.do(post("/v1/completions", body, "Content-Length", fmt.Sprint(len(body))))
			expectStatus(t, r, http.StatusOK, "")
			var up, down struct{ Model string }
			if err := json.Unmarshal(r.Upstream.Body, &up); err != nil || up.Model != model {
				t.Fatalf("%s: upstream model %q (%v), want %s", asked, up.Model, err, model)
			}
			if err := json.Unmarshal(r.Body, &down); err != nil || down.Model != asked {
				t.Fatalf("%s: client sees model %q (%v) in %s", asked, down.Model, err, r.Body)
			}
			if cl := r.Header.Get("Content-Length"); cl != fmt.Sprint(len(r.Body)) {
				t.Fatalf("%s: Content-Length %q for a %d-byte body", asked, cl, len(r.Body))
			}
		}
		// The flag's rule wins: no worker serves its target.
		body := []byte(`{"model":"pinned","prompt":"x","max_tokens":4}`)
		if r := s.do(post("/v1/completions", body)); r.Upstream != nil || r.Status == http.StatusOK {
			t.Fatalf("pinned served (%d): the object's rule won over the flag's", r.Status)
		}
		rec := httptest.NewRecorder()
		s.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		m := rec.Body.String()
		if !strings.Contains(m, `tollgate_cost_estimate_error_ratio_count{model="`+model+`",tokenizer=`) || strings.Contains(m, `model="team-alias"`) {
			t.Fatalf("the cost was not estimated for the rewritten model:\n%s", grepLines(m, "tollgate_cost_estimate_error_ratio_count"))
		}
		for _, want := range []string{
			`tollgate_model_rewrites{match="any",source="inferencemodelrewrite"} 1`,
			`tollgate_model_rewrites{match="exact",source="flag"} 1`,
			`tollgate_model_rewrites{match="exact",source="inferencemodelrewrite"} 1`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

func grepLines(text, substr string) string {
	var out []string
	for l := range strings.Lines(text) {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
