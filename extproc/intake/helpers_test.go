package intake

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/sched/policy"
)

// chatBody is a small chat request.
const chatBody = `{"model":"llama","messages":[{"role":"user","content":"hello there, how are you doing today?"}],"stream":true}`

// t0 is the tests' clock.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newTestPlanner builds a planner of cfg, with the default tokenizer when
// cfg names none.
func newTestPlanner(t testing.TB, cfg Config) *Planner {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// headers is a header lookup over name, value pairs; names fold to lower
// case, and the first value of a name wins, as the shell's parse does.
func headers(kv ...string) policy.Lookup {
	m := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		name := strings.ToLower(kv[i])
		if _, ok := m[name]; !ok {
			m[name] = kv[i+1]
		}
	}
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// planRequest runs the planning path of a completions request over a
// header list and a body.
func planRequest(t testing.TB, p *Planner, body string, kv ...string) (*Plan, *Rejection) {
	t.Helper()
	h := headers(kv...)
	who, rej := p.Identify(h, "", true)
	if rej != nil {
		return nil, rej
	}
	return p.Build(t.Context(), t0, 1, openai.KindCompletions, h, who, []byte(body), false, nil)
}
