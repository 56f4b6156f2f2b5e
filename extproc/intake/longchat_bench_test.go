package intake

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/extproc/request/tokenize"
	"github.com/tollgate/tollgate/test/bench"
	"github.com/tollgate/tollgate/test/tokref"
)

// BenchmarkPlan_LongChat measures planning and recording the route of a
// 400 KiB agentic chat with Qwen 3's real tokenizer and chat template:
// "seen" when an earlier turn of the same conversation was planned and
// routed before (the prefix id cache holds its ids), "unseen" when nothing
// of it was; estimate_seen prices it with the estimate instead.
func BenchmarkPlan_LongChat(b *testing.B) {
	src := tokref.Model(b, "tokenizer-qwen3", "")
	for _, c := range []struct {
		name  string
		seen  bool
		specs []string
	}{{"seen", true, []string{"q=hf:" + src}}, {"unseen", false, []string{"q=hf:" + src}}, {"estimate_seen", true, nil}} {
		seen := c.seen
		b.Run(c.name, func(b *testing.B) {
			tok, err := tokenize.NewFromSpecs("estimate", c.specs)
			if err != nil {
				b.Fatal(err)
			}
			tokenize.AttachReuseCache(tok, tokenize.NewReuseCache(tokenize.DefaultReuseCacheBytes))
			p := newTestPlanner(b, Config{Tokenizer: tok})
			chats, err := bench.NewLongChat("q", 64, 400<<10, 1)
			if err != nil {
				b.Fatal(err)
			}
			if seen {
				for c := range chats.Len() {
					first, _ := chats.Body(c, 0)
					pl, rej := p.Build(b.Context(), t0, 1, openai.KindChatCompletions, headers(), Identity{}, first, false, nil)
					if rej != nil {
						b.Fatal(rej)
					}
					p.Routed(t0, "w0", pl)
				}
			}
			i := 0
			for b.Loop() {
				b.StopTimer()
				c := i % chats.Len()
				body, _ := chats.Body(c, i/chats.Len()+1)
				if !seen { // a conversation of its own
					body = bytes.Replace(body, []byte("Conversation "), []byte(fmt.Sprintf("Conversation %d ", i)), 1)
				}
				b.StartTimer()
				pl, rej := p.Build(b.Context(), t0, 1, openai.KindChatCompletions, headers(), Identity{}, body, false, nil)
				if rej != nil {
					b.Fatal(rej)
				}
				p.Routed(t0, "w0", pl)
				i++
			}
		})
	}
}
