package tokenize

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/test/tokref"
)

// benchTurns is a conversation of about size bytes of turns of about 2 KiB
// (prose, and now and then code), then nextTurns alternatives for the turn
// after it: an assistant reply and a new user message.
func benchTurns(size int) (turns []string, next [][2]string) {
	const nextTurns = 8
	for i := 0; size > 0; i++ {
		text := englishText(uint64(i), 2<<10)
		if i%5 == 4 {
			text += "\n```python\ndef f(x):\n    return [y * 2 for y in x if y % 3 != 0]\n```\n"
		}
		turns = append(turns, text)
		size -= len(text)
	}
	if len(turns)%2 == 0 { // end with a user turn
		turns = turns[:len(turns)-1]
	}
	for i := range nextTurns {
		next = append(next, [2]string{englishText(uint64(1000+i), 1<<10), englishText(uint64(2000+i), 1<<10)})
	}
	return turns, next
}

var benchRoles = [2]string{"user", "assistant"}

// llama3Chat renders turns as Llama 3's chat template does, with the
// generation prompt.
func llama3Chat(turns []string) string {
	var sb strings.Builder
	sb.WriteString("<|begin_of_text|>")
	for i, t := range turns {
		sb.WriteString("<|start_header_id|>" + benchRoles[i%2] + "<|end_header_id|>\n\n" + strings.TrimSpace(t) + "<|eot_id|>")
	}
	sb.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	return sb.String()
}

// chatJSON is turns as a chat request's messages.
func chatJSON(turns []string) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var msgs []msg
	for i, t := range turns {
		msgs = append(msgs, msg{benchRoles[i%2], t})
	}
	out, _ := json.Marshal(msgs)
	return out
}

// realLlama31 loads test/tokref's Llama 3.1 directory, or returns nil.
func realLlama31(b *testing.B) *HFModel {
	dir, ok := tokref.ModelDir("tokenizer-llama3_1")
	if !ok {
		return nil
	}
	m, err := LoadHFDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkReuse prices a chat whose earlier turns were encoded before:
// "cold" encodes conversation N+1 without a cache, "warm" with conversation
// N's ids cached (each iteration adds one of several different next
// turns, so each resumes where N ends). MB/s counts the whole text; the
// speedup metric is the cold median over the warm time. The "chat" cases
// render the real Llama 3.1 template as well (EncodeChat), as serve does.
func BenchmarkReuse(b *testing.B) {
	type tok struct {
		name string
		load func(b *testing.B) *BPE
	}
	llama31 := func(b *testing.B) *BPE {
		m := realLlama31(b)
		if m == nil {
			b.Skip("the real Llama 3.1 tokenizer needs `npm ci` in test/tokref")
		}
		return m.BPE
	}
	toks := []tok{
		{"llama3.1", llama31},
		{"cl100k_base", func(b *testing.B) *BPE { t, _ := NewTiktoken("cl100k_base"); return t }},
		{"llama3-style", func(b *testing.B) *BPE { t, _ := LoadHF("testdata/llama3-style.json"); return t }},
	}
	for _, size := range []int{100 << 10, 400 << 10} {
		turns, next := benchTurns(size)
		texts := make([]string, len(next))
		for i, n := range next {
			texts[i] = llama3Chat(append(slices.Clip(turns), n[0], n[1]))
		}
		prev := llama3Chat(turns)
		for _, tk := range toks {
			name := fmt.Sprintf("%s/%dKiB", tk.name, size>>10)
			b.Run(name+"/cold", func(b *testing.B) {
				t := tk.load(b)
				var buf []uint32
				b.SetBytes(int64(len(texts[0])))
				for b.Loop() {
					buf, _ = t.Encode("m", texts[0], buf[:0])
				}
				b.ReportMetric(float64(len(buf)), "tokens")
			})
			b.Run(name+"/warm", func(b *testing.B) {
				t := tk.load(b)
				cold := coldMedian(t, texts[0])
				want, _ := t.Encode("m", texts[1], nil)
				t.SetReuseCache(NewReuseCache(DefaultReuseCacheBytes))
				t.Encode("m", prev, nil)
				var buf []uint32
				b.SetBytes(int64(len(texts[0])))
				i := 0
				for b.Loop() {
					buf, _ = t.Encode("m", texts[i%len(texts)], buf[:0])
					i++
				}
				b.StopTimer()
				b.ReportMetric(float64(cold.Nanoseconds())/(float64(b.Elapsed().Nanoseconds())/float64(b.N)), "x-speedup")
				got, _ := t.Encode("m", texts[1], nil)
				if !slices.Equal(got, want) {
					b.Fatal("the warm encode differs from a cold one")
				}
			})
		}
		b.Run(fmt.Sprintf("llama3.1-chat/%dKiB", size>>10), func(b *testing.B) {
			m := realLlama31(b)
			if m == nil {
				b.Skip("the real Llama 3.1 tokenizer needs `npm ci` in test/tokref")
			}
			bodies := make([][]byte, len(next))
			for i, n := range next {
				bodies[i] = chatJSON(append(slices.Clip(turns), n[0], n[1]))
			}
			render := time.Now()
			if _, err := m.chat.Render(bodies[0], nil); err != nil {
				b.Fatal(err)
			}
			renderNs := time.Since(render).Nanoseconds()
			start := time.Now()
			if _, _, err := m.EncodeChat(b.Context(), "m", bodies[0], nil, nil); err != nil {
				b.Fatal(err)
			}
			coldNs := time.Since(start).Nanoseconds()
			m.SetReuseCache(NewReuseCache(DefaultReuseCacheBytes))
			if _, _, err := m.EncodeChat(b.Context(), "m", chatJSON(turns), nil, nil); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(bodies[0])))
			i := 0
			for b.Loop() {
				if _, _, err := m.EncodeChat(b.Context(), "m", bodies[i%len(bodies)], nil, nil); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.StopTimer()
			b.ReportMetric(float64(renderNs)/1e6, "render-ms")
			b.ReportMetric(float64(coldNs)/1e6, "cold-ms")
			b.ReportMetric(float64(coldNs)/(float64(b.Elapsed().Nanoseconds())/float64(b.N)), "x-speedup")
		})
	}
}

// coldMedian is the median of three encodes of text without a cache.
func coldMedian(t *BPE, text string) time.Duration {
	var d []time.Duration
	for range 3 {
		start := time.Now()
		t.Encode("m", text, nil)
		d = append(d, time.Since(start))
	}
	slices.Sort(d)
	return d[1]
}
