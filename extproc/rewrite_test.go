package extproc

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/extproc/intake"
)

// The response keeps the client's name (GIE pkg/epp/handlers/server.go:
// 442-460 at 1748e829, rewriteModelName): both JSON spellings, in
// STREAMED, FULL_DUPLEX_STREAMED and BUFFERED responses; not when the
// response body is not sent (NONE).
func TestRestoreModel(t *testing.T) {
	x := &exchange{rewrittenFrom: "alias", rewrittenTo: "llama", respMode: modeStreamed}
	in := `data: {"model":"llama"}` + "\n\n" + `{"model": "llama","x":"llama"}`
	want := `data: {"model":"alias"}` + "\n\n" + `{"model": "alias","x":"llama"}`
	if got := string(x.restoreModel([]byte(in))); got != want {
		t.Fatalf("restoreModel = %s, want %s", got, want)
	}
	x.respMode = modeBuffered
	if got := string(x.restoreModel([]byte(in))); got != want {
		t.Fatalf("BUFFERED: restoreModel = %s, want %s", got, want)
	}
	r := x.bufferedResponseReply([]byte(in)).GetResponseBody().GetResponse()
	if got := string(r.GetBodyMutation().GetBody()); got != want {
		t.Fatalf("BUFFERED reply body %s, want %s", got, want)
	}
	if h := r.GetHeaderMutation().GetSetHeaders(); len(h) != 1 || h[0].GetHeader().GetKey() != "content-length" || string(h[0].GetHeader().GetRawValue()) != fmt.Sprint(len(want)) {
		t.Fatalf("BUFFERED reply headers %v, want content-length %d", h, len(want))
	}
	if r := x.bufferedResponseReply([]byte(`{"model":"other"}`)).GetResponseBody().GetResponse(); r.GetBodyMutation() != nil || r.GetHeaderMutation() != nil {
		t.Fatalf("BUFFERED reply to an unchanged body mutates: %v", r)
	}
	x.respMode = modeNone
	if got := string(x.restoreModel([]byte(in))); got != in {
		t.Fatalf("NONE response changed: %s", got)
	}
}

// TestExchange_RewriteBeforePricing: an admission request's body is read
// once; the rewrite applies to the parsed request, so the scheduler sees
// the new model and Envoy gets the rewritten body with the route.
func TestExchange_RewriteBeforePricing(t *testing.T) {
	x, env, p := newTestExchange(t, testConfig(nil))
	if _, err := p.planner.Rewrites().Set(intake.ModelRewriteRules{Exact: map[string][]intake.RewriteTarget{"llama": {{Model: "llama-3.1-8b", Weight: 1}}}}); err != nil {
		t.Fatal(err)
	}
	feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
	if len(env.submits) != 1 || env.submits[0].Model != "llama-3.1-8b" {
		t.Fatalf("submitted %+v, want model llama-3.1-8b", env.submits)
	}
	s := tell(x, t0, dispatched(false))
	body := s.send[0].GetRequestBody().GetResponse().GetBodyMutation().GetBody()
	if !strings.Contains(string(body), `"model":"llama-3.1-8b"`) || strings.Contains(string(body), `"model":"llama"`) {
		t.Errorf("forwarded body %s", body)
	}
}
