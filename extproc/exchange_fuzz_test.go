package extproc

import (
	"context"
	"strings"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched"
)

// FuzzExchange drives one request through random orders of Envoy's
// messages, the dispatcher's notices, deadlines, resets and the
// dispatcher's end, and checks after every step:
//
//   - the scheduler hears at most one Release, and a first token only
//     before it;
//   - every reply answers the oldest message of its direction still
//     waiting for one, of the same kind (ImmediateResponse and timer
//     overrides aside);
//   - after the stream ends nothing is owed: a request that reached the
//     scheduler was released exactly once, unless the scheduler rejected
//     it or is gone;
//   - nothing panics.
func FuzzExchange(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 0, 1, 1, 20, 21, 40, 41, 42, 43, 44, 45},
		{2, 1, 1, 1, 1, 20, 21, 22, 40, 41, 42, 43},
		{4, 4, 1, 1, 1, 20, 23, 60, 70, 41, 42, 43, 45},
		{1, 2, 1, 1, 21, 50, 51, 41, 42},
		{3, 3, 1, 1, 20, 21, 30, 31, 32, 33},
		{2, 4, 1, 1, 20, 21, 40, 41, 24, 42},
		{0, 1, 1, 0, 30, 41, 50, 52},
		{2, 1, 17, 1, 20, 21, 40, 41, 42, 43},
		{2, 1, 8, 0, 41, 42},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) < 4 || len(ops) > 64 {
			return
		}
		r := newExchangeRun(t, ops[0], ops[1], ops[2], ops[3])
		for _, op := range ops[4:] {
			if r.ended {
				break
			}
			r.do(op)
		}
		r.finish()
	})
}

var fuzzModes = [...]bodyMode{modeNone, modeStreamed, modeBuffered, extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL, modeDuplex}

// exchangeRun is one fuzzed request and the model of what it owes.
type exchangeRun struct {
	t   *testing.T
	x   *exchange
	env *fakeEnv
	p   proto
	now time.Time
	// pending lists, per direction, the kinds of Envoy's messages that wait
	// for a reply, oldest first.
	pending [2][]string
	// submitted: a submit reached the scheduler; settled: the scheduler
	// holds nothing for it by its own doing (a reject) or is gone.
	submitted, settled bool
	ended              bool
}

func newExchangeRun(t *testing.T, req, resp, flags, path byte) *exchangeRun {
	cfg := testConfig(func(c *Config) {
		c.Sched.Priority = sched.DefaultPriorityConfig()
		if flags&4 != 0 {
			c.EnvoyMaxMessageTimeout = 0
		}
	})
	x, env, _ := newTestExchange(t, cfg)
	r := &exchangeRun{t: t, x: x, env: env, now: t0,
		p: proto{req: fuzzModes[int(req)%len(fuzzModes)], resp: fuzzModes[int(resp)%len(fuzzModes)], early: flags&1 != 0}}
	if flags&2 != 0 {
		env.submitErr = context.Canceled
	}
	if flags&8 != 0 {
		env.routeErr = context.Canceled
	}
	if flags&16 != 0 {
		if _, err := x.deps.planner.Rewrites().Set(intake.ModelRewriteRules{Exact: map[string][]intake.RewriteTarget{"llama": {{Model: "llama-3", Weight: 1}}}}); err != nil {
			t.Fatal(err)
		}
	}
	method, route := "POST", "/v1/chat/completions"
	if path%4 == 0 {
		method, route = "GET", "/v1/models"
	}
	r.envoy(reqHeaders(r.p, method, route, method == "GET"), "req_headers")
	return r
}

// do applies one fuzzed input.
func (r *exchangeRun) do(op byte) {
	r.now = r.now.Add(time.Duration(op%8) * 50 * time.Millisecond)
	x := r.x
	switch op % 20 {
	case 0:
		r.envoy(reqBody(chatBody[:len(chatBody)/2], false), "req_body")
	case 1:
		r.envoy(reqBody(chatBody, true), "req_body")
	case 2:
		r.envoy(reqTrailers(), "req_trailers")
	case 3:
		r.envoy(respHeaders(false), "resp_headers")
	case 4:
		r.envoy(respHeadersStatus("503", op&32 != 0), "resp_headers")
	case 5:
		r.envoy(respBody("", false), "resp_body")
	case 6:
		r.envoy(respBody("tok", false), "resp_body")
	case 7:
		r.envoy(respBody(`{"usage":{"prompt_tokens":9}}`, true), "resp_body")
	case 8:
		r.envoy(respTrailers(), "resp_trailers")
	case 9, 10:
		r.notice(queued)
	case 11, 12:
		r.notice(dispatched(op&32 != 0))
	case 13:
		r.notice(rejected(sched.Action{Outcome: sched.OutcomeQueueFull, Priority: sched.PriorityDefault}))
	case 14:
		r.notice(preempted)
	case 15, 16:
		if at, ok := x.deadline(); ok {
			r.now = at
		}
		r.apply("expire", x.onExpire(r.now))
	case 17:
		if x.waiting() {
			r.settled = true // the dispatcher stopped: nothing can be released
		}
		r.apply("shutdown", x.onShutdown(r.now))
	case 18:
		r.close(errClientGone) // Envoy resets the stream
	case 19:
		r.envoy(reqHeaders(r.p, "POST", "/v1/completions", false), "req_headers") // out of place
	}
}

// envoy sends one of Envoy's messages; kind is the reply kind it waits for.
func (r *exchangeRun) envoy(m *extprocv3.ProcessingRequest, kind string) {
	dir := 0
	if strings.HasPrefix(kind, "resp") {
		dir = 1
		if r.x.stage != stageRouted && r.x.stage != stageEnvoyReply {
			// Envoy's own reply before the route: the request messages
			// it holds are never answered.
			r.pending[0] = nil
		}
	}
	r.pending[dir] = append(r.pending[dir], kind)
	envSubmits := len(r.env.submits)
	s := r.x.message(r.now, m)
	if len(r.env.submits) > envSubmits {
		r.submitted = true
	}
	r.apply(kind, s)
}

func (r *exchangeRun) notice(n notice) {
	if n.kind == noticeDecided && n.decision.action.Kind == sched.ActionReject && r.x.adm.waiting() {
		r.settled = true
	}
	r.apply(n.String(), r.x.onNotice(r.now, n, false))
}

// apply checks a step's replies against the waiting messages and ends the
// run when the step ends the stream.
func (r *exchangeRun) apply(input string, s step) {
	t := r.t
	for i, m := range s.send {
		k := kinds([]*extprocv3.ProcessingResponse{m})[0]
		switch {
		case k == "immediate":
			if i != len(s.send)-1 || !s.end {
				t.Fatalf("%s: immediate response not last or not ending: %v end %v", input, kinds(s.send), s.end)
			}
			continue
		case strings.HasPrefix(k, "override"):
			continue
		}
		kind, _, _ := strings.Cut(k, "+")
		dir := 0
		if strings.HasPrefix(kind, "resp") {
			dir = 1
		}
		p := r.pending[dir]
		if len(p) == 0 || p[0] != kind {
			t.Fatalf("%s: reply %s, but waiting for %v (sent %v)", input, k, p, kinds(s.send))
		}
		if r.p.req == modeDuplex && dir == 0 && kind == "req_body" {
			// The held FULL_DUPLEX body is re-streamed in chunks: the
			// chunks answer every body message.
			for len(p) > 0 && p[0] == "req_body" {
				p = p[1:]
			}
			r.pending[dir] = p
			continue
		}
		r.pending[dir] = p[1:]
	}
	r.checkNotes(input)
	if s.end {
		r.close(s.err)
	}
}

// close ends the stream and checks that nothing is owed.
func (r *exchangeRun) close(cause error) {
	if r.ended {
		return
	}
	r.ended = true
	r.x.close(r.now, cause)
	if r.x.adm.owes() {
		r.t.Fatalf("owes the scheduler after close (admission %s)", r.x.adm.state)
	}
	releases := r.checkNotes("close")
	want := 0
	if r.submitted && !r.settled {
		want = 1
	}
	if releases != want {
		r.t.Fatalf("%d releases after close, want %d (submitted %v settled %v): %v", releases, want, r.submitted, r.settled, r.env.notes)
	}
}

// finish closes a stream the inputs left open, as its reset would.
func (r *exchangeRun) finish() { r.close(errClientGone) }

// checkNotes checks what the scheduler heard and returns the releases.
func (r *exchangeRun) checkNotes(input string) int {
	releases := 0
	for _, n := range r.env.notes {
		if n.kind == evRelease {
			releases++
		} else if releases > 0 {
			r.t.Fatalf("%s: %v after the release: %v", input, n.kind, r.env.notes)
		}
	}
	if releases > 1 {
		r.t.Fatalf("%s: %d releases: %v", input, releases, r.env.notes)
	}
	return releases
}
