package extproc

import (
	"testing"

	"github.com/tollgate/tollgate/extproc/fleet"
)

// BenchmarkExchange_BufferedRequest measures the shell's per-request work
// in a stream goroutine: headers, a chat body (JSON, tokenizing, hashing,
// prefix lookup), the route, and the response path.
func BenchmarkExchange_BufferedRequest(b *testing.B) {
	cfg := testConfig(nil)
	p := newTestDeps(b, cfg)
	env := &fakeEnv{dest: fleet.Target{Worker: "w0", Address: "10.0.0.7:8000"}, destOK: true}
	p0 := proto{req: modeBuffered, resp: modeStreamed}
	hdr := reqHeaders(p0, "POST", "/v1/chat/completions", false, "x-smg-priority", "interactive")
	body := reqBody(chatBody, true)
	rh, rb := respHeaders(false), respBody(`data: {"usage":{"prompt_tokens":12}}`+"\n\ndata: [DONE]\n\n", true)
	b.ReportAllocs()
	for b.Loop() {
		env.submits, env.notes = env.submits[:0], env.notes[:0]
		x := newExchange(p, env, cfg.Logger, 1)
		x.message(t0, hdr)
		x.message(t0, body)
		tell(x, t0, dispatched(false))
		x.message(t0, rh)
		x.message(t0, rb)
		x.close(t0, errClientGone)
	}
}
