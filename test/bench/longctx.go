package bench

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/test/envoysim"
)

// LongServer is one ext_proc server of a long-context run.
type LongServer struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
}

// LongConfig configures RunLong.
type LongConfig struct {
	// Servers are measured in turn on every request, so that they see the
	// same bodies at nearly the same time; the order alternates.
	Servers []LongServer
	// Mode is the processing mode; the simulated Envoy has the shipped
	// filter's other settings.
	Mode Mode
	// ChunkBytes splits FULL_DUPLEX_STREAMED request bodies into chunks of
	// this size, as Envoy forwards them as they arrive; 0 sends one chunk.
	ChunkBytes int
	// Model is the body's model.
	Model string
	// ContextBytes is the text of each conversation's earlier turns.
	ContextBytes int
	// Requests is the number of conversations measured on each pass.
	Requests int
	// Warmup is the number of other conversations sent on both passes
	// first, unmeasured.
	Warmup int
	// Seed makes the conversations; runs with other seeds share nothing.
	Seed uint64
}

// LongResult is one long-context run: the unseen pass (every conversation
// new to the servers) and the seen pass (the same conversations, each with
// a new last turn).
type LongResult struct {
	Mode         Mode   `json:"mode"`
	Model        string `json:"model"`
	ContextBytes int    `json:"context_bytes"`
	// BodyBytes is the size of the first measured body.
	BodyBytes int        `json:"body_bytes"`
	Requests  int        `json:"requests"`
	Passes    []LongPass `json:"passes"`
}

// Names of the passes of a LongResult.
const (
	PassUnseen = "unseen"
	PassSeen   = "seen"
)

// LongPass is one pass over the conversations.
type LongPass struct {
	Name    string             `json:"name"`
	Servers []LongServerResult `json:"servers"`
}

// LongServerResult is one server's requests on one pass. Latency is the
// simulated Envoy's Timings.Decision: from the request headers to the end
// of request processing (the route, plus the echoed body in
// FULL_DUPLEX_STREAMED mode).
type LongServerResult struct {
	Name       string `json:"name"`
	Requests   int    `json:"requests"`
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// DecisionP50 and DecisionP99 are over the requests that got HTTP 200.
	DecisionP50 time.Duration `json:"decision_p50_ns"`
	DecisionP99 time.Duration `json:"decision_p99_ns"`
	// Decisions holds each conversation's latency in order, 0 for a
	// request that failed.
	Decisions []time.Duration `json:"decisions_ns"`
}

// Find returns the named pass's result for the named server.
func (r *LongResult) Find(pass, server string) (*LongServerResult, bool) {
	for i := range r.Passes {
		if r.Passes[i].Name != pass {
			continue
		}
		for j := range r.Passes[i].Servers {
			if s := &r.Passes[i].Servers[j]; s.Name == server {
				return s, true
			}
		}
	}
	return nil, false
}

// PairedDiffs returns, for each conversation both servers answered, the
// latency of a minus that of b on the named pass.
func (r *LongResult) PairedDiffs(pass, a, b string) []time.Duration {
	x, okA := r.Find(pass, a)
	y, okB := r.Find(pass, b)
	if !okA || !okB {
		return nil
	}
	var out []time.Duration
	for i := range min(len(x.Decisions), len(y.Decisions)) {
		if x.Decisions[i] > 0 && y.Decisions[i] > 0 {
			out = append(out, x.Decisions[i]-y.Decisions[i])
		}
	}
	return out
}

// RunLong sends every conversation to every server, one request at a time:
// the warm-up conversations on both passes, then the unseen pass, then the
// seen pass.
func RunLong(ctx context.Context, cfg LongConfig) (*LongResult, error) {
	if len(cfg.Servers) == 0 || cfg.Requests <= 0 || cfg.Warmup < 0 {
		return nil, errors.New("bench: a long-context run needs servers and a positive number of requests")
	}
	chats, err := NewLongChat(cfg.Model, cfg.Requests+cfg.Warmup, cfg.ContextBytes, cfg.Seed)
	if err != nil {
		return nil, err
	}
	sims := make([]*envoysim.Sim, len(cfg.Servers))
	defer func() {
		for _, s := range sims {
			if s != nil {
				_ = s.Close()
			}
		}
	}()
	for i, srv := range cfg.Servers {
		if sims[i], err = envoysim.New(simConfig(srv.Addr, cfg.Mode, 0, true, cfg.ChunkBytes)); err != nil {
			return nil, err
		}
	}
	first, err := chats.Body(0, 1)
	if err != nil {
		return nil, err
	}
	res := &LongResult{Mode: cfg.Mode, Model: cfg.Model, ContextBytes: cfg.ContextBytes, BodyBytes: len(first), Requests: cfg.Requests}
	// send sends conversation i of pass p to every server in turn and
	// returns each latency, 0 for a failure, and each failure.
	send := func(i, p int) ([]time.Duration, []error, error) {
		body, err := chats.Body(i, p)
		if err != nil {
			return nil, nil, err
		}
		lat, errs := make([]time.Duration, len(sims)), make([]error, len(sims))
		for k := range sims {
			j := (k + i) % len(sims)
			resp, err := sims[j].Do(ctx, envoysim.Request{
				Method: http.MethodPost,
				Path:   ChatPath,
				Host:   "gateway.bench",
				Header: http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(body))}},
				Body:   body,
			})
			if cerr := ctx.Err(); cerr != nil {
				return nil, nil, cerr
			}
			if errs[j] = outcome(resp, err); errs[j] == nil {
				lat[j] = resp.Timings.Decision
			}
		}
		return lat, errs, nil
	}
	for i := cfg.Requests; i < cfg.Requests+cfg.Warmup; i++ {
		for p := 1; p <= 2; p++ {
			if _, _, err := send(i, p); err != nil {
				return nil, err
			}
		}
	}
	for p, name := range []string{PassUnseen, PassSeen} {
		pass := LongPass{Name: name, Servers: make([]LongServerResult, len(cfg.Servers))}
		for j, srv := range cfg.Servers {
			pass.Servers[j] = LongServerResult{Name: srv.Name, Decisions: make([]time.Duration, cfg.Requests)}
		}
		for i := range cfg.Requests {
			lat, errs, err := send(i, p+1)
			if err != nil {
				return nil, err
			}
			for j := range pass.Servers {
				s := &pass.Servers[j]
				s.Requests++
				s.Decisions[i] = lat[j]
				if errs[j] != nil {
					s.Errors++
					if s.FirstError == "" {
						s.FirstError = errs[j].Error()
					}
				}
			}
		}
		for j := range pass.Servers {
			s := &pass.Servers[j]
			var ok []time.Duration
			for _, d := range s.Decisions {
				if d > 0 {
					ok = append(ok, d)
				}
			}
			s.DecisionP50, s.DecisionP99 = Percentile(ok, 50), Percentile(ok, 99)
		}
		res.Passes = append(res.Passes, pass)
	}
	return res, nil
}
