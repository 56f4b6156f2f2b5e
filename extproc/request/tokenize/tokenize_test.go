package tokenize

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var (
	loadOnce sync.Map // spec -> Tokenizer, so each test binary loads an encoding once
)

func mustNew(t testing.TB, spec string) Tokenizer {
	t.Helper()
	if tk, ok := loadOnce.Load(spec); ok {
		return tk.(Tokenizer)
	}
	tk, err := New(spec)
	if err != nil {
		t.Fatalf("New(%q): %v", spec, err)
	}
	loadOnce.Store(spec, tk)
	return tk
}

var exactSpecs = []string{
	"tiktoken:cl100k_base",
	"tiktoken:o200k_base",
	"hf:testdata/gpt2-style.json",
	"hf:testdata/llama3-style.json",
	"hf:testdata/llama2-style.json",
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		spec, name string
		exact      bool
	}{
		{"", "estimate", false},
		{"estimate", "estimate", false},
		{"tiktoken:cl100k_base", "tiktoken:cl100k_base", true},
		{"tiktoken:p50k_base", "tiktoken:p50k_base", true},
		{"hf:testdata/gpt2-style.json", "hf:testdata/gpt2-style.json", true},
	} {
		tk := mustNew(t, tc.spec)
		if tk.Name() != tc.name || tk.Exact() != tc.exact {
			t.Errorf("New(%q): name %q exact %v; want %q %v", tc.spec, tk.Name(), tk.Exact(), tc.name, tc.exact)
		}
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fixture, err := os.ReadFile("testdata/gpt2-style.json")
	if err != nil {
		t.Fatal(err)
	}
	// variant replaces one top-level section of the fixture.
	variant := func(name, key, value string) string {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(fixture, &m); err != nil {
			t.Fatal(err)
		}
		m[key] = json.RawMessage(value)
		b, _ := json.Marshal(m)
		return write(name, string(b))
	}
	for _, tc := range []struct{ spec, want string }{
		{"bert", `unknown tokenizer "bert": want estimate, tiktoken:<encoding> or hf:<model directory or tokenizer.json>`},
		{"Estimate", `unknown tokenizer "Estimate"`},
		{"tiktoken:foo", `unknown tiktoken encoding "foo": want one of [cl100k_base o200k_base p50k_base r50k_base]`},
		{"tiktoken:", `unknown tiktoken encoding ""`},
		{"hf:", `tokenizer "hf:": missing the path to a model directory or tokenizer.json (hf:<path>)`},
		{"hf:" + filepath.Join(dir, "missing.json"), "no such file or directory"},
		{"hf:" + dir, "tokenizer.json: no such file or directory"},
		{"hf:" + write("bad.json", "{not json"), "parse tokenizer.json: invalid character"},
		{"hf:" + write("nomodel.json", "{}"), "tokenizer.json has no model"},
		{"hf:" + write("wordpiece.json", `{"model":{"type":"WordPiece","vocab":{"a":0}}}`), `model type "WordPiece" is not supported (only BPE)`},
		{"hf:" + write("emptyvocab.json", `{"model":{"type":"BPE","vocab":{},"merges":[]}}`), "model has an empty vocab"},
		{"hf:" + write("badmerge.json", `{"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]}}`), `merge 0 ("a" "b") uses a token that is not in the vocab`},
		{"hf:" + write("badmerge2.json", `{"model":{"type":"BPE","vocab":{"a":0},"merges":["a b c"]}}`), `merge "a b c" is not two tokens separated by one space`},
		{"hf:" + write("badmerge3.json", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[["a"]]}}`), `does not have two tokens`},
		{"hf:" + write("unk.json", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[],"unk_token":"<unk>"}}`), `unk_token "<unk>" is not in the vocab`},
		{"hf:" + write("fallback.json", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[],"byte_fallback":true}}`), `byte_fallback is on but the vocab has no <0x00> token`},
		{"hf:" + write("suffix.json", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[],"end_of_word_suffix":"</w>"}}`), `end_of_word_suffix "</w>" is not supported`},
		{"hf:" + write("prefix.json", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[],"continuing_subword_prefix":"##"}}`), `continuing_subword_prefix "##" is not supported`},
		{"hf:" + write("negid.json", `{"model":{"type":"BPE","vocab":{"a":-1},"merges":[]}}`), `vocab token "a" has id -1`},
		{"hf:" + variant("pre.json", "pre_tokenizer", `{"type":"BertPreTokenizer"}`), `pre_tokenizer type "BertPreTokenizer" is not supported`},
		{"hf:" + variant("split.json", "pre_tokenizer", `{"type":"Split","pattern":{"Regex":"("},"behavior":"Isolated"}`), `pre_tokenizer Split: compile pattern "("`},
		{"hf:" + variant("split2.json", "pre_tokenizer", `{"type":"Split","pattern":{"Regex":"a"},"behavior":"Sideways"}`), `pre_tokenizer Split: unknown behavior "Sideways"`},
		{"hf:" + variant("split3.json", "pre_tokenizer", `{"type":"Split","behavior":"Isolated"}`), `pre_tokenizer Split: missing pattern`},
		{"hf:" + variant("seq.json", "pre_tokenizer", `{"type":"Sequence","pretokenizers":[{"type":"ByteLevel"},{"type":"Digits"}]}`), `step 1 follows ByteLevel; ByteLevel must come last`},
		{"hf:" + variant("meta.json", "pre_tokenizer", `{"type":"Metaspace","prepend_scheme":"sometimes"}`), `unknown prepend_scheme "sometimes"`},
		{"hf:" + variant("norm.json", "normalizer", `{"type":"Precompiled","precompiled_charsmap":"AAAA"}`), `normalizer type "Precompiled" is not supported`},
		{"hf:" + variant("post.json", "post_processor", `{"type":"Magic"}`), `post_processor type "Magic" is not supported`},
		{"hf:" + variant("post2.json", "post_processor", `{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<x>"}}],"special_tokens":{}}`), `special token "<x>" is not defined`},
		{"hf:" + variant("post3.json", "post_processor", `{"type":"RobertaProcessing","cls":["<s>"],"sep":["</s>",2]}`), `cls and sep must be [token, id] pairs`},
	} {
		tk, err := New(tc.spec)
		if err == nil {
			t.Errorf("New(%q) = %v, want an error containing %q", tc.spec, tk.Name(), tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q) error %q\nwant it to contain %q", tc.spec, err, tc.want)
		}
	}
}

// TestKnownIDs checks every exact tokenizer against the ids the reference
// implementations produce for the same strings (testdata/expected-ids.json).
func TestKnownIDs(t *testing.T) {
	data, err := os.ReadFile("testdata/expected-ids.json")
	if err != nil {
		t.Fatal(err)
	}
	var expected map[string]json.RawMessage
	if err := json.Unmarshal(data, &expected); err != nil {
		t.Fatal(err)
	}
	var strs []string
	if err := json.Unmarshal(expected["strings"], &strs); err != nil {
		t.Fatal(err)
	}
	for _, spec := range exactSpecs {
		t.Run(spec, func(t *testing.T) {
			var want [][]uint32
			if err := json.Unmarshal(expected[spec], &want); err != nil || len(want) != len(strs) {
				t.Fatalf("expected ids for %s: %v (%d of %d)", spec, err, len(want), len(strs))
			}
			tk := mustNew(t, spec)
			for i, s := range strs {
				got, n := tk.Encode("m", s, nil)
				if got == nil {
					got = []uint32{}
				}
				if n != len(got) {
					t.Errorf("%q: n = %d, %d ids", s, n, len(got))
				}
				if diff := cmp.Diff(want[i], got); diff != "" {
					t.Errorf("Encode(%q) (-want +got):\n%s", s, diff)
				}
			}
		})
	}
}

func TestReadableKnownIDs(t *testing.T) {
	for _, tc := range []struct {
		spec, text string
		want       []uint32
	}{
		{"tiktoken:cl100k_base", "hello world", []uint32{15339, 1917}},
		{"tiktoken:cl100k_base", "Hello world", []uint32{9906, 1917}},
		{"tiktoken:o200k_base", "Hello world", []uint32{13225, 2375}},
		// Special-token text is ordinary text to tiktoken here.
		{"tiktoken:cl100k_base", "<|endoftext|>", []uint32{27, 91, 8862, 728, 428, 91, 29}},
		{"hf:testdata/gpt2-style.json", "Hello world", []uint32{39, 491, 78, 390, 288}},
		{"hf:testdata/gpt2-style.json", "a<|endoftext|>b", []uint32{64, 656, 65}},
		// Llama 3 style: the template's <|begin_of_text|> (556) comes first.
		{"hf:testdata/llama3-style.json", "Hello world", []uint32{556, 39, 492, 78, 391, 288}},
		// Llama 2 style: <s> (1) first; 😀 is not in the vocab and falls
		// back to its four UTF-8 bytes, <0xF0> <0x9F> <0x98> <0x80>.
		{"hf:testdata/llama2-style.json", "😀", []uint32{1, 259, 243, 162, 155, 131}},
	} {
		got, _ := mustNew(t, tc.spec).Encode("m", tc.text, nil)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s Encode(%q) = %v, want %v", tc.spec, tc.text, got, tc.want)
		}
	}
}

func TestParagraphStable(t *testing.T) {
	for _, spec := range exactSpecs {
		tk := mustNew(t, spec)
		first, n := tk.Encode("m", paragraph, nil)
		if n != len(first) || n < len(paragraph)/8 || n > len(paragraph) {
			t.Errorf("%s: %d tokens for a %d-byte paragraph", spec, n, len(paragraph))
		}
		dst := []uint32{7, 7}
		again, n2 := tk.Encode("other-model", paragraph, dst)
		if n2 != n || !slices.Equal(again[:2], []uint32{7, 7}) || !slices.Equal(again[2:], first) {
			t.Errorf("%s: encoding again into dst gave %d ids, want the same %d after dst", spec, n2, n)
		}
		if tk.Observe("m", 100, 10); !tk.Exact() {
			t.Errorf("%s is not exact", spec)
		}
	}
}

func TestEstimator(t *testing.T) {
	e := NewEstimator()
	ids, n := e.Encode("m", paragraph, []uint32{1})
	if ids != nil || n != (len(paragraph)+3)/4 {
		t.Errorf("Encode = %v, %d; want nil, %d", ids, n, (len(paragraph)+3)/4)
	}
	if _, n := e.Encode("m", "", nil); n != 0 {
		t.Errorf("empty text: %d tokens", n)
	}
	if _, n := e.Encode("m", "abc", nil); n != 1 {
		t.Errorf("3 bytes: %d tokens, want 1", n)
	}
	// Converges to the observed ratio.
	for range 100 {
		e.Observe("code", 3000, 1000)
	}
	if r := e.BytesPerToken("code"); r < 2.99 || r > 3.01 {
		t.Errorf("after 100 samples at 3.0: ratio %v", r)
	}
	if r := e.BytesPerToken("m"); r != DefaultBytesPerToken {
		t.Errorf("another model moved to %v", r)
	}
	// Bounds and tiny samples.
	for range 200 {
		e.Observe("cjk", 1000, 5000)
		e.Observe("ws", 100000, 100)
	}
	if r := e.BytesPerToken("cjk"); r < MinBytesPerToken-1e-9 || r > MinBytesPerToken+0.01 {
		t.Errorf("cjk ratio %v, want the lower bound", r)
	}
	if r := e.BytesPerToken("ws"); r < MaxBytesPerToken-0.01 || r > MaxBytesPerToken+1e-9 {
		t.Errorf("ws ratio %v, want the upper bound", r)
	}
	e.Observe("tiny", 10, 3)
	e.Observe("tiny", 1000, 0)
	e.Observe("tiny", -5, 100)
	if r := e.BytesPerToken("tiny"); r != DefaultBytesPerToken {
		t.Errorf("tiny samples moved the ratio to %v", r)
	}
}

func TestEstimatorModelBound(t *testing.T) {
	e := NewEstimator()
	for i := range maxModels + 10 {
		e.Observe(fmt.Sprint("model-", i), 2000, 1000)
	}
	if len(e.models) != maxModels {
		t.Errorf("%d models tracked, bound %d", len(e.models), maxModels)
	}
	over := fmt.Sprint("model-", maxModels+5)
	if r := e.BytesPerToken(over); r == DefaultBytesPerToken || r != e.shared.load() {
		t.Errorf("a model over the bound reads %v, shared is %v", r, e.shared.load())
	}
}

// TestEstimatorOnRealText calibrates the estimator from exact counts of
// English prose and checks its estimates on other prose.
func TestEstimatorOnRealText(t *testing.T) {
	exactTk := mustNew(t, "tiktoken:cl100k_base")
	e := NewEstimator()
	for seed := range uint64(40) {
		text := englishText(100+seed, 2000)
		_, n := exactTk.Encode("gpt", text, nil)
		e.Observe("gpt", len(text), n)
	}
	for seed := range uint64(5) {
		text := englishText(900+seed, 8000)
		_, want := exactTk.Encode("gpt", text, nil)
		_, got := e.Encode("gpt", text, nil)
		if diff := float64(got-want) / float64(want); diff < -0.05 || diff > 0.05 {
			t.Errorf("estimate %d vs exact %d (%.1f%%)", got, want, 100*diff)
		}
	}
}

// TestConcurrentUse encodes the same texts from eight goroutines at once,
// half of them with encode helpers; make race runs it under the race
// detector.
func TestConcurrentUse(t *testing.T) {
	specs := append([]string{"estimate"}, exactSpecs...)
	texts := []string{paragraph, englishText(5, 3000), "short", "", "<|endoftext|> 😀 中文"}
	defer setWindow(100)() // long texts in windows, encoded by helpers for odd goroutines
	for _, spec := range specs {
		tk := mustNew(t, spec)
		want := make([][]uint32, len(texts))
		for i, s := range texts {
			want[i], _ = tk.Encode("m", s, nil)
		}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				var buf []uint32
				ctx := helperContext(g%2 == 1)
				for k := range 30 {
					i := (g + k) % len(texts)
					var n int
					if ce, ok := tk.(interface {
						EncodeContext(context.Context, string, string, []uint32) ([]uint32, int, error)
					}); ok {
						buf, n, _ = ce.EncodeContext(ctx, "m", texts[i], buf[:0])
					} else {
						buf, n = tk.Encode("m", texts[i], buf[:0])
					}
					if !slices.Equal(buf, want[i]) && (want[i] != nil || len(buf) != 0) {
						t.Errorf("%s: goroutine %d got a different encoding of text %d", spec, g, i)
						return
					}
					if tk.Exact() && n != len(buf) {
						t.Errorf("%s: n %d != %d", spec, n, len(buf))
					}
					tk.Observe("m", 4000, 1000+g)
				}
			})
		}
		wg.Wait()
	}
}

// FuzzHFEncode checks that the tokenizer.json pipeline never panics, is
// deterministic and emits only ids it knows.
func FuzzHFEncode(f *testing.F) {
	for _, s := range []string{paragraph, "", " ", "<|endoftext|>", "<s>x</s>", "😀\xff\xfe", "a\r\n\tb", "▁▁x"} {
		f.Add(s)
	}
	tks := make([]*BPE, 0, 3)
	for _, spec := range exactSpecs[2:] {
		tks = append(tks, mustNew(f, spec).(*BPE))
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tk := range tks {
			a, n := tk.Encode("m", s, nil)
			b, _ := tk.Encode("m", s, nil)
			if n != len(a) || !slices.Equal(a, b) {
				t.Fatalf("nondeterministic or miscounted: %v vs %v (n %d)", a, b, n)
			}
			limit := uint32(len(tk.model.vocab) + 16)
			for _, id := range a {
				if id >= limit {
					t.Fatalf("id %d beyond the vocabulary", id)
				}
			}
		}
	})
}

func benchmarkEncode(b *testing.B, spec string, size int) {
	tk := mustNew(b, spec)
	text := englishText(42, size)[:size]
	var buf []uint32
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		buf, n = tk.Encode("m", text, buf[:0])
	}
	b.ReportMetric(float64(len(text))/float64(n), "bytes/token")
}

func BenchmarkEncode(b *testing.B) {
	for _, spec := range append([]string{"estimate"}, exactSpecs...) {
		for _, size := range []int{10 << 10, 100 << 10} {
			b.Run(fmt.Sprintf("%s/%dKiB", strings.TrimPrefix(strings.TrimPrefix(spec, "hf:testdata/"), "tiktoken:"), size>>10), func(b *testing.B) {
				benchmarkEncode(b, spec, size)
			})
		}
	}
}
