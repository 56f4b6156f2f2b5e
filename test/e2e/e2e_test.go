package e2e

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/extproc/request/tokenize"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/test/envoysim"
	"github.com/tollgate/tollgate/test/mockworker"
)

func TestAdmissionAndRouting(t *testing.T) {
	for _, m := range bodyModes {
		t.Run(m.name, inBubble(func(t *testing.T) {
			s := newStack(t, options{mode: m.req, workers: 2})
			seen := map[string]bool{}
			for i := range 6 {
				r := s.do(chat(strings.Repeat("conversation ", 20+i*7)))
				expectStatus(t, r, http.StatusOK, "")
				if r.LocalReply || r.Endpoint == "" {
					t.Fatalf("request %d not routed: %+v", i, r)
				}
				if got := r.Upstream.Header.Get("X-Gateway-Destination-Endpoint"); got != r.Endpoint {
					t.Errorf("upstream header %q, endpoint %q", got, r.Endpoint)
				}
				if got := r.Metadata["envoy.lb"].GetFields()["x-gateway-destination-endpoint"].GetStringValue(); got != r.Endpoint {
					t.Errorf("envoy.lb metadata %q, endpoint %q", got, r.Endpoint)
				}
				if !strings.Contains(string(r.Body), "data: [DONE]") {
					t.Errorf("body %q", r.Body)
				}
				seen[r.Endpoint] = true
			}
			for _, w := range s.workers {
				if w.Stats().Finished == 0 {
					t.Logf("worker %s got no request (selection is by load and cache)", w.Addr())
				}
			}
			// Requests outside admission are routed, not counted.
			r := s.do(envoysim.Request{Method: http.MethodGet, Path: "/v1/models"})
			expectStatus(t, r, http.StatusOK, "")
			if r.Endpoint == "" {
				t.Fatal("GET /v1/models was not routed")
			}
			st := s.waitStats("settled", func(sched.Stats) bool { return true })
			if got := st.Admits[sched.PriorityDefault][sched.OutcomeAdmitted]; got != 6 {
				t.Errorf("admitted %d, want 6 (GET not counted)", got)
			}
		}))
	}
}

func TestSpoofedDestinationNeverSurvives(t *testing.T) {
	for _, m := range bodyModes {
		t.Run(m.name, inBubble(func(t *testing.T) {
			s := newStack(t, options{mode: m.req})
			r := s.do(chat("hello", "X-Gateway-Destination-Endpoint", "127.0.0.1:1"))
			expectStatus(t, r, http.StatusOK, "")
			want := s.workers[0].Addr()
			if r.Endpoint != want || r.Upstream.Header.Get("X-Gateway-Destination-Endpoint") != want {
				t.Fatalf("endpoint %q header %q, want %q", r.Endpoint, r.Upstream.Header.Values("X-Gateway-Destination-Endpoint"), want)
			}
			if n := len(r.Upstream.Header.Values("X-Gateway-Destination-Endpoint")); n != 1 {
				t.Errorf("%d destination values upstream", n)
			}
		}))
	}
}

// TestRejections checks every answer a client can get instead of a route.
func TestRejections(t *testing.T) {
	for _, m := range bodyModes {
		t.Run(m.name, func(t *testing.T) {
			testRejections(t, m)
		})
	}
}

func testRejections(t *testing.T, m bodyMode) {
	headersOnly := m.name == "streamed" // Envoy sends no body before the headers reply.
	t.Run("400 unparsable body", inBubble(func(t *testing.T) {
		if headersOnly {
			t.Skip("the body is not seen in STREAMED mode without early body sending")
		}
		s := newStack(t, options{mode: m.req})
		r := s.do(post("/v1/chat/completions", []byte(`{"model": "llama", "messages": [`)))
		expectStatus(t, r, http.StatusBadRequest, "")
		if e := errorBody(t, r); e["type"] != "invalid_request_error" {
			t.Errorf("error %v", e)
		}
		r = s.do(post("/v1/chat/completions", []byte{}))
		expectStatus(t, r, http.StatusBadRequest, "")
	}))
	t.Run("413 body over the limit", inBubble(func(t *testing.T) {
		if headersOnly {
			t.Skip("the body is not seen in STREAMED mode without early body sending")
		}
		s := newStack(t, options{mode: m.req, config: func(c *extproc.Config) { c.MaxBodyBytes = 2048 }})
		r := s.do(completion(strings.Repeat("x", 4096)))
		expectStatus(t, r, http.StatusRequestEntityTooLarge, "")
	}))
	t.Run("401 bad tenant key", inBubble(func(t *testing.T) {
		s := newStack(t, options{mode: m.req, config: func(c *extproc.Config) { c.Tenancy = tenancy(t, "default") }})
		expectStatus(t, s.do(chat("hi")), http.StatusUnauthorized, "unauthorized")
		expectStatus(t, s.do(chat("hi", "Authorization", "Bearer wrong")), http.StatusUnauthorized, "unauthorized")
		expectStatus(t, s.do(chat("hi", "Authorization", "Bearer key-a")), http.StatusOK, "")
	}))
	t.Run("431 headers too large", inBubble(func(t *testing.T) {
		s := newStack(t, options{mode: m.req, config: func(c *extproc.Config) { c.MaxHeaderBytes = 4096 }})
		r := s.do(chat("hi", "X-Padding", strings.Repeat("p", 5000)))
		expectStatus(t, r, http.StatusRequestHeaderFieldsTooLarge, "request_headers_too_large")
	}))
	t.Run("400 malformed pin", inBubble(func(t *testing.T) {
		s := newStack(t, options{mode: m.req})
		r := s.do(chat("hi", "X-Dynamo-Dp-Rank", "first"))
		expectStatus(t, r, http.StatusBadRequest, "")
		if e := errorBody(t, r); e["param"] != "x-dynamo-dp-rank" {
			t.Errorf("error %v", e)
		}
	}))
	t.Run("503 pin to an unknown worker", inBubble(func(t *testing.T) {
		s := newStack(t, options{mode: m.req})
		for _, tc := range []struct{ rank, msg string }{
			{"", "Pinned worker w9 is not eligible: no ready worker with that id serves the model"},
			{"0", "Pinned worker w9 dp_rank 0 is not eligible: worker w9 is unavailable"},
		} {
			h := []string{"X-Dynamo-Worker-Instance-Id", "w9"}
			if tc.rank != "" {
				h = append(h, "X-Dynamo-Dp-Rank", tc.rank)
			}
			r := s.do(chat("hi", h...))
			expectStatus(t, r, http.StatusServiceUnavailable, "pinned_worker_not_eligible")
			if e := errorBody(t, r); e["message"] != tc.msg {
				t.Errorf("message %q, want %q", e["message"], tc.msg)
			}
			if r.Header.Get("Retry-After") != "" {
				t.Error("Retry-After on an invalid pin")
			}
		}
	}))
	t.Run("404 model no worker serves", inBubble(func(t *testing.T) {
		if headersOnly {
			t.Skip("the model is in the body, which STREAMED mode without early body sending does not show")
		}
		s := newStack(t, options{mode: m.req})
		body := []byte(`{"model":"mistral","prompt":"hi"}`)
		r := s.do(post("/v1/completions", body))
		// OpenAI's answer (and vLLM's): a retry cannot help.
		expectStatus(t, r, http.StatusNotFound, "")
		e := errorBody(t, r)
		if e["type"] != "invalid_request_error" || e["code"] != "model_not_found" || e["param"] != "model" ||
			e["message"] != "The model `mistral` does not exist." || r.Header.Get("Retry-After") != "" || r.Header.Get("X-Smg-Error-Code") != "" {
			t.Errorf("error %v retry-after %q", e, r.Header.Get("Retry-After"))
		}
	}))
	t.Run("429 queue full", inBubble(func(t *testing.T) {
		prio := priorityConfig(30 * time.Second)
		prio.Classes[sched.PriorityDefault].QueueSize = 0
		s := newStack(t, options{mode: m.req, maxRunning: 1, hold: always, config: func(c *extproc.Config) { c.Sched.Priority = prio }})
		first := s.async(context.Background(), chat("first"))
		s.parked(1)
		r := s.do(chat("second"))
		expectStatus(t, r, http.StatusTooManyRequests, "scheduler_queue_full")
		if r.Header.Get("Retry-After") != "2" {
			t.Errorf("Retry-After %q", r.Header.Get("Retry-After"))
		}
		s.gate.Open()
		expectStatus(t, s.await(first).r, http.StatusOK, "")
	}))
	t.Run("503 queue timeout", inBubble(func(t *testing.T) {
		s := newStack(t, options{mode: m.req, maxRunning: 1, hold: always,
			config: func(c *extproc.Config) { c.Sched.Priority = priorityConfig(300 * time.Millisecond) }})
		first := s.async(context.Background(), chat("first"))
		s.parked(1)
		r := s.do(chat("second"))
		expectStatus(t, r, http.StatusServiceUnavailable, "scheduler_queue_timeout")
		if r.Header.Get("Retry-After") != "2" {
			t.Errorf("Retry-After %q", r.Header.Get("Retry-After"))
		}
		s.gate.Open()
		expectStatus(t, s.await(first).r, http.StatusOK, "")
	}))
	t.Run("529 policy class queue limit", inBubble(func(t *testing.T) {
		if headersOnly {
			t.Skip("prompt length 0 without the body never makes a worker prefill-busy")
		}
		zero := uint64(0)
		profile := &sched.Profile{Synthetic: true, Classes: []sched.ClassSpec{{
			Name: "default", Quantum: 1, BusyThreshold: &zero, RequestLimitPerWorker: &zero,
		}}}
		s := newStack(t, options{mode: m.req, hold: always, config: func(c *extproc.Config) { c.Sched.Policy.Fallback = profile }})
		first := s.async(context.Background(), chat(strings.Repeat("busy ", 40)))
		s.parked(1)
		r := s.do(chat("second"))
		if r.Status != 529 {
			t.Fatalf("status %d body %q", r.Status, r.Body)
		}
		want := `{"message":"router policy class \"default\" queue requests limit reached (current=0, limit=0)","type":"Overloaded","code":529,"details":{"policy_class":"default","limit_kind":"requests","current":0,"limit":0}}`
		if string(r.Body) != want {
			t.Errorf("body\n%s\nwant\n%s", r.Body, want)
		}
		s.gate.Open()
		expectStatus(t, s.await(first).r, http.StatusOK, "")
	}))
}

func always(mockworker.RequestInfo) bool { return true }

// tenancy configures tenant keys key-a (tenant a) and key-b (tenant b)
// with the given default max class.
func tenancy(t *testing.T, defaultMax string) *intake.Tenancy {
	t.Helper()
	return &intake.Tenancy{Tenants: mustTenants(t, "a:key-a", "b:key-b"), DefaultMaxClass: defaultMax}
}

func TestClientCancelWhileQueuedThenCapacityFrees(t *testing.T) {
	for _, m := range bodyModes {
		t.Run(m.name, inBubble(func(t *testing.T) {
			s := newStack(t, options{mode: m.req, maxRunning: 1, hold: always,
				config: func(c *extproc.Config) { c.Sched.Priority = priorityConfig(30 * time.Second) }})
			first := s.async(context.Background(), chat("first"))
			s.parked(1)
			ctx, cancel := context.WithCancel(context.Background())
			second := s.async(ctx, chat("second"))
			s.queued(sched.PriorityDefault, 1)
			cancel()
			if res := s.await(second); !errors.Is(res.err, envoysim.ErrDisconnected) {
				t.Fatalf("cancelled client got %+v %v", res.r, res.err)
			}
			st := s.waitStats("second gone", func(st sched.Stats) bool { return st.QueueDepth[sched.PriorityDefault] == 0 })
			if got := st.Admits[sched.PriorityDefault][sched.OutcomeClientCancelled]; got != 1 {
				t.Errorf("client_cancelled %d, want 1", got)
			}
			s.gate.Open()
			expectStatus(t, s.await(first).r, http.StatusOK, "")
			// The cancelled request holds nothing: no slot, no booking.
			s.waitIdle()
			expectStatus(t, s.do(chat("third")), http.StatusOK, "")
		}))
	}
}

// TestMessageTimeoutBudget: a request held longer than Envoy's
// message_timeout is answered by tollgate, never by Envoy's 504.
func TestMessageTimeoutBudget(t *testing.T) {
	t.Run("with the override", inBubble(func(t *testing.T) {
		// Envoy's 600 ms timer is shorter than the class timeout of 1 s;
		// without the override tollgate would answer at 500 ms.
		s := newStack(t, options{maxRunning: 1, hold: always, messageTimeout: 600 * time.Millisecond, maxMessageTimeout: 10 * time.Second,
			config: func(c *extproc.Config) { c.Sched.Priority = priorityConfig(time.Second) }})
		// Not streamed: the parked request sends no response headers that
		// tollgate would hold (and extend Envoy's timer for) meanwhile.
		first := s.async(context.Background(), completion("first"))
		s.parked(1)
		start := time.Now()
		r := s.do(chat("second"))
		expectStatus(t, r, http.StatusServiceUnavailable, "scheduler_queue_timeout")
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("answered after %v: the override should have kept it queued for the class timeout of 1 s", waited)
		}
		if st := s.sim.Stats(); st.OverrideMessageTimeoutReceived != 1 || st.MessageTimeouts != 0 || st.OverrideMessageTimeoutIgnored != 0 {
			t.Errorf("sim stats %+v", st)
		}
		s.gate.Open()
		expectStatus(t, s.await(first).r, http.StatusOK, "")
	}))
	t.Run("without the override", inBubble(func(t *testing.T) {
		// tollgate answers 500 ms before Envoy's 1 s timer fires: a margin
		// no scheduling delay on a loaded machine eats. Whether it beat
		// the timer is the simulated Envoy's verdict (a 504 and a counted
		// message timeout otherwise), not a wall-clock reading.
		s := newStack(t, options{maxRunning: 1, hold: always, messageTimeout: time.Second, maxMessageTimeout: -1,
			config: func(c *extproc.Config) {
				c.Sched.Priority = priorityConfig(30 * time.Second)
				c.EnvoyTimeoutMargin = 500 * time.Millisecond
			}})
		first := s.async(context.Background(), chat("first"))
		s.parked(1)
		r := s.do(chat("second"))
		expectStatus(t, r, http.StatusServiceUnavailable, "scheduler_queue_timeout")
		if st := s.sim.Stats(); st.MessageTimeouts != 0 || st.OverrideMessageTimeoutReceived != 0 {
			t.Errorf("sim stats %+v", st)
		}
		s.gate.Open()
		expectStatus(t, s.await(first).r, http.StatusOK, "")
	}))
	t.Run("full duplex has no timer to beat", inBubble(func(t *testing.T) {
		// The request phase has no timer, but the response phase does:
		// each response message must be answered within message_timeout,
		// so it is a second, not a budget a loaded machine can miss.
		s := newStack(t, options{mode: bodyModes[2].req, maxRunning: 1, hold: always, messageTimeout: time.Second,
			config: func(c *extproc.Config) { c.Sched.Priority = priorityConfig(30 * time.Second) }})
		first := s.async(context.Background(), chat("first"))
		s.parked(1)
		second := s.async(context.Background(), chat("second"))
		s.queued(sched.PriorityDefault, 1)
		time.Sleep(2 * time.Second) // Twice message_timeout, on the fake clock.
		s.queued(sched.PriorityDefault, 1)
		if st := s.sim.Stats(); st.MessageTimeouts != 0 {
			t.Errorf("sim stats %+v", st)
		}
		s.gate.Open()
		expectStatus(t, s.await(first).r, http.StatusOK, "")
		expectStatus(t, s.await(second).r, http.StatusOK, "")
	}))
}

// TestPreemptionAsTheVictimSeesIt: a bulk request waiting at its worker for
// its first token is preempted by an interactive arrival; the victim gets
// SMG's full 503 as tollgate's ImmediateResponse and the preemptor runs.
// Envoy accepts an unsolicited ImmediateResponse whenever processing is not
// complete (ext_proc.cc:1876-1899): with no response yet it is a local
// reply; with the response headers held (the shipped
// send_body_without_waiting_for_header_response) it goes straight to the
// client (filter_manager.cc:541-547).
func TestPreemptionAsTheVictimSeesIt(t *testing.T) {
	for _, m := range bodyModes {
		for _, tc := range []struct {
			name   string
			victim envoysim.Request
			early  bool
		}{
			{"no response yet", completion("background job", "X-Smg-Priority", "bulk"), false},
			{"response headers held", chat("background job", "X-Smg-Priority", "bulk"), true},
		} {
			t.Run(m.name+"/"+tc.name, inBubble(func(t *testing.T) {
				bulkOnly := func(r mockworker.RequestInfo) bool { return r.Header.Get("X-Smg-Priority") == "bulk" }
				// A short message timer with a wide margin: holding the
				// victim's response headers shows as tollgate's override of
				// it after 300 ms, with 700 ms to spare on a loaded machine.
				s := newStack(t, options{mode: m.req, maxRunning: 1, hold: bulkOnly, messageTimeout: time.Second,
					config: func(c *extproc.Config) {
						c.EnvoyTimeoutMargin = 700 * time.Millisecond
						c.Sched.Priority = priorityConfig(30 * time.Second)
						c.Tenancy = &intake.Tenancy{DefaultMaxClass: "system"}
					}, sim: func(c *envoysim.Config) { c.SendBodyWithoutWaitingForHeaderResponse = tc.early }})
				victim := s.async(context.Background(), tc.victim)
				s.parked(1)
				if tc.early {
					// tollgate extends Envoy's timer for the held headers
					// when the 1 s timer has its 700 ms margin left.
					time.Sleep(300 * time.Millisecond)
					s.waitSim("victim's response headers held", func(st envoysim.Stats) bool { return st.OverrideMessageTimeoutReceived == 1 })
				}
				r := s.do(chat("urgent", "X-Smg-Priority", "interactive"))
				expectStatus(t, r, http.StatusOK, "")
				res := s.await(victim)
				if res.err != nil {
					t.Fatal(res.err)
				}
				expectStatus(t, res.r, http.StatusServiceUnavailable, "scheduler_preempted")
				if res.r.Reset || !res.r.LocalReply || res.r.Details != "tollgate_scheduler_preempted" ||
					res.r.Header.Get("X-Smg-Preempted") != "true" || res.r.Header.Get("Retry-After") != "1" {
					t.Errorf("victim reset %v local %v details %q headers %v", res.r.Reset, res.r.LocalReply, res.r.Details, res.r.Header)
				}
				if e := errorBody(t, res.r); e["message"] != "request preempted by higher-priority traffic" || e["type"] != "service_unavailable_error" {
					t.Errorf("victim body %v", e)
				}
				st := s.waitStats("settled", func(sched.Stats) bool { return true })
				if st.Preemptions[sched.PriorityBulk][sched.PriorityInteractive] != 1 {
					t.Errorf("preemptions %v", st.Preemptions)
				}
			}))
		}
	}
	// Without the flag (Envoy Gateway cannot set it), a streaming victim's
	// headers reached the client before its first token: Envoy can only
	// reset the stream.
	t.Run("headers already sent without the flag", inBubble(func(t *testing.T) {
		bulkOnly := func(r mockworker.RequestInfo) bool { return r.Header.Get("X-Smg-Priority") == "bulk" }
		s := newStack(t, options{maxRunning: 1, hold: bulkOnly, config: func(c *extproc.Config) {
			c.Sched.Priority = priorityConfig(30 * time.Second)
			c.Tenancy = &intake.Tenancy{DefaultMaxClass: "system"}
		}, sim: func(c *envoysim.Config) { c.SendBodyWithoutWaitingForHeaderResponse = false }})
		committed := make(chan struct{})
		req := chat("background job", "X-Smg-Priority", "bulk")
		req.DisconnectAt = func(st envoysim.Stage) bool {
			if st == envoysim.StageResponseCommitted {
				close(committed)
			}
			return false
		}
		victim := s.async(context.Background(), req)
		s.parked(1)
		<-committed // the victim's 200 headers reached the client
		expectStatus(t, s.do(chat("urgent", "X-Smg-Priority", "interactive")), http.StatusOK, "")
		res := s.await(victim)
		if res.err != nil || !res.r.Reset || res.r.Status != http.StatusOK {
			t.Fatalf("victim %+v %v, want a reset 200", res.r, res.err)
		}
	}))
}

func TestWorkerReloadRemovingPinnedWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStack(t, options{workers: 2, maxRunning: 1, hold: always,
			config: func(c *extproc.Config) { c.Sched.Priority = priorityConfig(30 * time.Second) }})
		a := s.async(context.Background(), chat("a"))
		b := s.async(context.Background(), chat("b"))
		s.parked(2)
		pinned := s.async(context.Background(), chat("pinned", "X-Dynamo-Worker-Instance-Id", "w1"))
		s.queued(sched.PriorityDefault, 1)

		path := filepath.Join(t.TempDir(), "workers.yaml")
		if err := os.WriteFile(path, []byte("workers:\n- {id: w0, address: \""+s.list[0].Address+"\", max_running_requests: 1, model: llama}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := fleet.NewFileWatcher(path, s.srv.SetWorkers, nil, 0).Reload(); err != nil {
			t.Fatal(err)
		}
		res := s.await(pinned)
		if res.err != nil {
			t.Fatal(res.err)
		}
		expectStatus(t, res.r, http.StatusServiceUnavailable, "pinned_worker_not_eligible")
		if e := errorBody(t, res.r); !strings.Contains(e["message"].(string), "w1") {
			t.Errorf("message %q", e["message"])
		}
		s.gate.Open()
		expectStatus(t, s.await(a).r, http.StatusOK, "")
		expectStatus(t, s.await(b).r, http.StatusOK, "")
		// New pins to the removed worker are refused at once.
		expectStatus(t, s.do(chat("again", "X-Dynamo-Worker-Instance-Id", "w1")), http.StatusServiceUnavailable, "pinned_worker_not_eligible")
	})
}

func TestGracefulShutdownWithQueuedRequests(t *testing.T) {
	for _, m := range bodyModes {
		t.Run(m.name, inBubble(func(t *testing.T) {
			s := newStack(t, options{mode: m.req, maxRunning: 1, hold: always,
				config: func(c *extproc.Config) { c.Sched.Priority = priorityConfig(30 * time.Second) }})
			running := s.async(context.Background(), chat("running"))
			s.parked(1)
			queued := s.async(context.Background(), chat("queued"))
			s.queued(sched.PriorityDefault, 1)
			drained := make(chan error, 1)
			go func() { drained <- s.srv.Drain(context.Background()) }()
			res := s.await(queued)
			if res.err != nil {
				t.Fatal(res.err)
			}
			expectStatus(t, res.r, http.StatusServiceUnavailable, "server_shutting_down")
			if res.r.Header.Get("Retry-After") == "" {
				t.Error("no Retry-After on the shutdown answer")
			}
			if s.srv.Ready() {
				t.Error("ready while draining")
			}
			synctest.Wait()
			select {
			case err := <-drained:
				t.Fatalf("drain returned %v with a request in flight", err)
			default:
			}
			s.gate.Open()
			expectStatus(t, s.await(running).r, http.StatusOK, "")
			if err := <-drained; err != nil {
				t.Fatal(err)
			}
		}))
	}
}

// TestPrefixAffinity: a conversation that continues goes back to the worker
// that holds its prefix, and the worker reports the cached tokens.
func TestPrefixAffinity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStack(t, options{workers: 3, config: func(c *extproc.Config) {
			tok, err := tokenize.New("estimate")
			if err != nil {
				t.Fatal(err)
			}
			c.Tokenizer = tok
		}})
		history := strings.Repeat("a long shared system prompt that every turn repeats. ", 40)
		first := s.do(completion(history))
		expectStatus(t, first, http.StatusOK, "")
		for i := range 3 {
			r := s.do(completion(history + strings.Repeat(" and one more turn", i+1)))
			expectStatus(t, r, http.StatusOK, "")
			if r.Endpoint != first.Endpoint {
				t.Errorf("turn %d went to %s, not %s which holds the prefix", i, r.Endpoint, first.Endpoint)
			}
		}
	})
}
