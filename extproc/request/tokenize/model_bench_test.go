package tokenize

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/test/tokref"
)

// benchModels are the real model tokenizers of the reference check
// (test/tokref, installed by npm), largest vocabulary last.
var benchModels = []struct{ name, pkg, template string }{
	{"llama2", "tokenizer-llama2", "llama2.jinja"},
	{"deepseek-v3", "tokenizer-deepseek_v3", ""},
	{"llama3.1", "tokenizer-llama3_1", ""},
	{"qwen3", "tokenizer-qwen3", ""},
	{"gpt-oss", "tokenizer-gptoss", ""},
	{"gemma3", "tokenizer-gemma3", ""},
}

// chatMessages is a conversation of about size bytes of English text: a
// system prompt and alternating user and assistant turns of ~1 KiB.
func chatMessages(size int) []byte {
	text := englishText(7, size)
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	msgs := []msg{{"system", text[:512]}}
	rest := text[512:size]
	for i := 0; len(rest) > 0; i++ {
		n := min(1024, len(rest))
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, msg{role, rest[:n]})
		rest = rest[n:]
	}
	if msgs[len(msgs)-1].Role == "assistant" {
		msgs[len(msgs)-1].Role = "user"
		if msgs[len(msgs)-2].Role == "user" {
			msgs = msgs[:len(msgs)-1]
		}
	}
	out, _ := json.Marshal(msgs)
	return out
}

// BenchmarkModel measures real model tokenizers: completions (encode with
// special tokens), chat (template render + encode) and the render alone,
// on 10 KiB of text. MB/s counts the prompt text, not the JSON around it.
func BenchmarkModel(b *testing.B) {
	const size = 10 << 10
	text := englishText(42, size)[:size]
	messages := chatMessages(size)
	for _, m := range benchModels {
		b.Run(m.name+"/completions", func(b *testing.B) {
			tok, err := LoadHFDir(tokref.Model(b, m.pkg, m.template))
			if err != nil {
				b.Fatal(err)
			}
			var buf []uint32
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				buf, _ = tok.Encode(m.name, text, buf[:0])
			}
		})
		b.Run(m.name+"/chat", func(b *testing.B) {
			tok, err := LoadHFDir(tokref.Model(b, m.pkg, m.template))
			if err != nil {
				b.Fatal(err)
			}
			if !tok.HasChatTemplate() {
				b.Skip("no chat template")
			}
			var buf []uint32
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if buf, _, err = tok.EncodeChat(b.Context(), m.name, messages, nil, buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(m.name+"/render", func(b *testing.B) {
			tok, err := LoadHFDir(tokref.Model(b, m.pkg, m.template))
			if err != nil {
				b.Fatal(err)
			}
			if !tok.HasChatTemplate() {
				b.Skip("no chat template")
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tok.chat.Render(messages, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// worstBodies are the most expensive 8 MiB conversations found for the
// shipped templates: short system messages (DeepSeek V3 concatenates
// them), one-character turns (the most messages), one 8 MiB word (one
// piece for the BPE merges), and plain English.
func worstBodies() map[string][]byte {
	const size = 8 << 20
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	marshal := func(msgs []msg) []byte {
		out, _ := json.Marshal(msgs)
		return out
	}
	var turns []msg
	for i := 0; i < size/30; i++ {
		turns = append(turns, msg{[]string{"user", "assistant"}[i%2], "x"})
	}
	return map[string][]byte{
		"system":   systemFlood(size / 60),
		"turns":    marshal(turns[:len(turns)-1]),
		"one_word": marshal([]msg{{"user", strings.Repeat("a", size-64)}}),
		"english":  marshal([]msg{{"user", englishText(3, size-64)[:size-64]}}),
	}
}

// BenchmarkChatWorstCase renders and tokenizes the worst 8 MiB bodies for
// each shipped template, as serve does: within the render budget, which
// stops DeepSeek V3's system messages. Run it with -benchtime=1x; peak
// memory needs a process per body (B/op counts every allocation).
func BenchmarkChatWorstCase(b *testing.B) {
	bodies := worstBodies()
	for _, m := range benchModels {
		if m.name == "gpt-oss" {
			continue // no chat template
		}
		for _, shape := range []string{"system", "turns", "one_word", "english"} {
			b.Run(m.name+"/"+shape, func(b *testing.B) {
				tok, err := LoadHFDir(tokref.Model(b, m.pkg, m.template))
				if err != nil {
					b.Fatal(err)
				}
				msgs := bodies[shape]
				b.SetBytes(int64(len(msgs)))
				b.ReportAllocs()
				for b.Loop() {
					_, _, err = tok.EncodeChat(b.Context(), m.name, msgs, nil, nil)
				}
				if err != nil {
					b.Logf("%.100s", err)
				}
				b.StopTimer()
				_, cost, _ := tok.chat.RenderContext(b.Context(), msgs, nil)
				b.ReportMetric(float64(cost.Steps)/float64(len(msgs)), "steps/B")
				b.ReportMetric(float64(cost.Bytes)/float64(len(msgs)), "work-bytes/B")
			})
		}
	}
}

// BenchmarkLongSegment encodes a 400 KiB text, one segment, with the real
// byte-level model tokenizers: its pieces encoded inline or by a helper
// while the next window is pre-tokenized (encode.go's pipeline), or inline
// with a prefix id cache recording each text, new each time, as serve
// encodes an unseen prompt.
func BenchmarkLongSegment(b *testing.B) {
	const size = 400 << 10
	text := englishText(7, size)[:size]
	for _, m := range benchModels {
		if m.name != "qwen3" && m.name != "llama3.1" {
			continue
		}
		for _, mode := range []string{"inline", "pipelined", "recorded"} {
			b.Run(m.name+"/"+mode, func(b *testing.B) {
				tok, err := LoadHFDir(tokref.Model(b, m.pkg, m.template))
				if err != nil {
					b.Fatal(err)
				}
				if mode == "recorded" {
					AttachReuseCache(tok, NewReuseCache(DefaultReuseCacheBytes))
				}
				ctx := helperContext(mode == "pipelined")
				var buf []uint32
				b.SetBytes(size)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					s := text
					if mode == "recorded" {
						i++
						s = fmt.Sprintf("%08d", i) + text[8:]
					}
					if buf, _, err = tok.EncodeContext(ctx, m.name, s, buf[:0]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
