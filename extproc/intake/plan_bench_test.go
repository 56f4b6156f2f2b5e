package intake

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/extproc/request/openai"
)

// planHeaders is a typical admission request's header map: pseudo-headers,
// the usual client headers, and the policy inputs a tenant sends.
func planHeaders() []string {
	return []string{
		":method", "POST", ":path", "/v1/chat/completions", ":authority", "gateway.example",
		":scheme", "https", "content-type", "application/json", "accept", "text/event-stream",
		"user-agent", "openai-python/1.40.0", "x-request-id", "5f0c6b1e-7d1a-4c2b-9d3e-0a1b2c3d4e5f",
		"x-forwarded-for", "198.51.100.7", "x-smg-priority", "interactive",
		"x-dynamo-meta-policy-class", "premium", "x-dynamo-worker-instance-id", "w0",
	}
}

// BenchmarkPlan measures the planning path of one admission request in a
// stream goroutine: the identity and priority from the headers, the
// body's JSON, tokenizing, hashing and the prefix lookup.
func BenchmarkPlan(b *testing.B) {
	p := newTestPlanner(b, Config{})
	h := headers(planHeaders()...)
	body := []byte(chatBody)
	b.ReportAllocs()
	for b.Loop() {
		who, rej := p.Identify(h, "198.51.100.7:41000", true)
		if rej != nil {
			b.Fatal(rej)
		}
		if _, rej := p.Build(b.Context(), t0, 1, openai.KindChatCompletions, h, who, body, false, nil); rej != nil {
			b.Fatal(rej)
		}
	}
}

// modelBody is a 16 KiB chat body whose model comes last, as some clients
// write it.
func modelBody() []byte {
	return []byte(`{"messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 1365) + `"}],"stream":true,"model":"llama"}`)
}

// BenchmarkModelOf measures reading the model of a request outside
// admission.
func BenchmarkModelOf(b *testing.B) {
	body := modelBody()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if ModelField(body).Name != "llama" {
			b.Fatal("no model")
		}
	}
}

// BenchmarkRewriteModel measures a model rewrite of a request body.
func BenchmarkRewriteModel(b *testing.B) {
	body := modelBody()
	table := &rewriteRules{exact: map[string][]RewriteTarget{"llama": {{Model: "llama-v2", Weight: 1}}}}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, ok := rewriteModel(body, table, func(uint64) uint64 { return 0 }); !ok {
			b.Fatal("not rewritten")
		}
	}
}
