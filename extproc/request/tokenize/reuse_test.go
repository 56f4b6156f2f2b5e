package tokenize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/tollgate/tollgate/test/tokref"
)

// localityAlphabet is what the split-locality and reuse tests build texts
// from: the classes the split patterns tell apart, and the runes where
// their matches read past their ends (whitespace runs with and without
// newlines, contractions that fail after two runes, upper and lower case
// runs for o200k, marks, multi-byte spaces and digits).
var localityAlphabet = []string{
	"a", "b", "Z", "Q", "é", "ß", "ǅ", "ʰ", "の", "中文", "한", "Ω", "ω", "\u0301", "\u0903",
	"1", "23", "4567", "٣", "½", "Ⅻ",
	" ", " ", " ", "  ", "\t", "\n", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\v", "\f", "\u0085",
	"'", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "'r", "'l", "'v",
	".", ",", "!", "\"", "/", "-", "(", "😀", "×", "¢", "_",
}

// randomText is n pieces of the alphabet, some repeated into runs.
func randomText(r *rand.Rand, n int, extra ...string) string {
	var sb strings.Builder
	for range n {
		var s string
		if len(extra) > 0 && r.IntN(8) == 0 {
			s = extra[r.IntN(len(extra))]
		} else {
			s = localityAlphabet[r.IntN(len(localityAlphabet))]
		}
		for k := 1 + max(0, r.IntN(8)-5); k > 0; k-- {
			sb.WriteString(s)
		}
	}
	return sb.String()
}

// spaces are the whitespace runes the split patterns treat differently:
// newlines, other ASCII spaces, multi-byte spaces and NEL.
var spaces = []string{" ", " ", "\t", "\n", "\r", "\u3000", "\u00a0", "\u0085", "\u2028", "\v"}

// spacyText is randomText with long mixed whitespace runs, where the
// split patterns read furthest past the ends of their matches.
func spacyText(r *rand.Rand, n int, extra ...string) string {
	var sb strings.Builder
	for range n {
		if r.IntN(5) < 2 {
			for k := 1 + r.IntN(8); k > 0; k-- {
				sb.WriteString(spaces[r.IntN(len(spaces))])
			}
			continue
		}
		sb.WriteString(randomText(r, 1, extra...))
	}
	return sb.String()
}

// splitEnds returns the ends of the pieces p cuts s into.
func splitEnds(p *pattern, s string) []int {
	var ws workspace
	var ends []int
	for _, sp := range p.spans(&ws, s, false) {
		ends = append(ends, sp.end)
	}
	return ends
}

// localityViolation checks the claim resume points inside a segment rest
// on (reuse.go) for one text s: the pieces after a piece boundary are
// those of the text from there; and for other texts that share a prefix
// with s (random ones, or those given), the pieces of s up to the end of
// piece i are theirs too when piece i+lag is not the last and ends
// utf8.UTFMax bytes or more before the shared prefix does.
func localityViolation(p *pattern, s string, lag int, r *rand.Rand, others ...string) string {
	ends := splitEnds(p, s)
	for i, e := range ends[:max(0, len(ends)-1)] {
		rest := splitEnds(p, s[e:])
		for j, re := range rest {
			if i+1+j >= len(ends) || ends[i+1+j] != e+re {
				return fmt.Sprintf("the pieces of %q from %d are not those of the whole", s, e)
			}
		}
	}
	check := func(t string) string {
		x := 0
		for x < min(len(s), len(t)) && s[x] == t[x] {
			x++
		}
		got := splitEnds(p, t)
		for i := range ends {
			k := i + lag
			if k >= len(ends)-1 || ends[k]+utf8.UTFMax > x {
				break
			}
			if i >= len(got) || got[i] != ends[i] {
				return fmt.Sprintf("lag %d: %q and %q share %d bytes, but piece %d ends at %d in the first and not the second (ends %v and %v)",
					lag, s, t, x, i, ends[i], ends, got)
			}
		}
		return ""
	}
	for _, t := range others {
		if v := check(t); v != "" {
			return v
		}
	}
	if r == nil {
		return ""
	}
	for x := 0; x <= len(s); x++ {
		for range 3 {
			var tail string
			if x < len(s) && !utf8.RuneStart(s[x]) {
				// Finish the cut rune with other continuation bytes.
				var b []byte
				for k := x; k < len(s) && !utf8.RuneStart(s[k]); k++ {
					b = append(b, byte(0x80+r.IntN(64)))
				}
				tail = string(b)
			}
			t := s[:x] + tail + randomText(r, r.IntN(4))
			if !utf8.ValidString(t) {
				continue
			}
			if v := check(t); v != "" {
				return v
			}
		}
	}
	return ""
}

// TestSplitLocality holds the split patterns that resume points may cut
// inside (localPattern) to the reach reuse.go assumes, on the regexp
// engine and on the hand-written matchers, and shows that a shorter lag
// would not do.
func TestSplitLocality(t *testing.T) {
	n := 600
	if testing.Short() || raceEnabled {
		n = 100
	}
	// What piece i reads can reach into piece i+2: "\n" is decided by the
	// rune after " \u3000" (NEL continues the whitespace run); and in
	// GPT-2's pattern, the first "\u3000" by the rune after the second.
	cl100kFamily := [2]string{"\n \u3000¢", "\n \u3000\u0085\n"}
	gpt2 := [2]string{"a\u3000\u3000¢", "a\u3000\u3000\u0085x"}
	for _, c := range []struct {
		expr string
		// needs is a text and another that shares its start, which
		// need a lag of more than lag.
		needs [2]string
		lag   int
	}{
		{gpt2Pattern, gpt2, 0},
		{cl100kPattern, cl100kFamily, 1},
		{qwen2Pattern, cl100kFamily, 1},
		{o200kPattern, cl100kFamily, 1},
	} {
		for _, engine := range []string{"fast", "regexp"} {
			p := mustPattern(c.expr)
			if !localPattern(p) {
				t.Fatalf("localPattern(%.20q) is false", c.expr)
			}
			if engine == "regexp" {
				p.fast = nil
			} else if p.fast == nil {
				t.Fatalf("%.20q has no hand-written matcher", c.expr)
			}
			if localityViolation(p, c.needs[0], c.lag, nil, c.needs[1]) == "" {
				t.Errorf("%s %.20q: %q and %q do not need a lag over %d", engine, c.expr, c.needs[0], c.needs[1], c.lag)
			}
			if v := localityViolation(p, c.needs[0], reusePieceLag, nil, c.needs[1]); v != "" {
				t.Errorf("%s %.20q: %s", engine, c.expr, v)
			}
			r := rand.New(rand.NewPCG(7, uint64(len(c.expr))))
			for range n {
				if v := localityViolation(p, randomText(r, 2+r.IntN(12)), reusePieceLag, r); v != "" {
					t.Fatalf("%s %.20q: %s", engine, c.expr, v)
				}
			}
		}
	}
}

func TestPiecewise(t *testing.T) {
	for _, c := range []struct {
		spec string
		want bool
	}{
		{"tiktoken:cl100k_base", true},
		{"tiktoken:o200k_base", true},
		{"tiktoken:r50k_base", true},
		{"hf:testdata/gpt2-style.json", true},
		{"hf:testdata/llama3-style.json", true},
		{"hf:testdata/llama2-style.json", false}, // normalizer
	} {
		tk := mustNew(t, c.spec).(*BPE)
		if got := piecewise(tk.normalize, tk.pre); got != c.want {
			t.Errorf("%s: piecewise %v, want %v", c.spec, got, c.want)
		}
	}
	for _, raw := range []string{
		`{"type":"ByteLevel","add_prefix_space":true}`,
		`{"type":"Split","pattern":{"Regex":"\\s+"},"behavior":"Isolated"}`,
		`{"type":"Digits","individual_digits":true}`,
		`{"type":"Metaspace","replacement":"▁"}`,
		`{"type":"Sequence","pretokenizers":[{"type":"Digits"},{"type":"ByteLevel"}]}`,
	} {
		pt, _, err := newPreTokenizer(json.RawMessage(raw))
		if err != nil {
			t.Fatal(err)
		}
		if piecewise(nil, pt) {
			t.Errorf("%s: piecewise", raw)
		}
	}
}

// TestScanMatchesSplit holds addedVocab.scan, which encoding uses, to
// addedVocab.split, with tokens that strip and match whole words only.
func TestScanMatchesSplit(t *testing.T) {
	a := newAddedVocab([]hfAddedToken{
		{ID: 1, Content: "<s>"}, {ID: 2, Content: "<|eot|>"}, {ID: 3, Content: "<|e"},
		{ID: 4, Content: "ab", SingleWord: true}, {ID: 5, Content: "[L]", LStrip: true},
		{ID: 6, Content: "[R]", RStrip: true}, {ID: 7, Content: "[B]", LStrip: true, RStrip: true},
		{ID: 8, Content: "\n\n"},
	})
	extra := []string{"<s>", "<|eot|>", "<|e", "ab", "[L]", "[R]", "[B]", "<|", "[", "ab"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		s := randomText(r, r.IntN(12), extra...)
		var want, got []string
		splitOracle(a, s, func(seg string, first bool) { want = append(want, fmt.Sprintf("%q %v", seg, first)) },
			func(id uint32) { want = append(want, fmt.Sprint(id)) })
		a.scan(s, 0, 0, func(_, from, end int) { got = append(got, fmt.Sprintf("%q %v", s[from:end], from == 0)) },
			func(id uint32, _ int) { got = append(got, fmt.Sprint(id)) })
		if !slices.Equal(got, want) {
			t.Fatalf("%q: scan %v, split %v", s, got, want)
		}
	}
}

// spacyTokenizers caches spacyTokenizer's files by name.
var spacyTokenizers sync.Map

// reuseCase is a tokenizer with a prefix cache and one without.
type reuseCase struct {
	name   string
	cached *BPE
	fresh  *BPE
	extra  []string // added tokens and fragments of them
}

func (rc *reuseCase) check(t testing.TB, text string, special bool) {
	t.Helper()
	rc.checkContext(t, context.Background(), text, special)
}

// checkContext is check with the cached encode under ctx.
func (rc *reuseCase) checkContext(t testing.TB, ctx context.Context, text string, special bool) {
	t.Helper()
	got, _, err := rc.cached.encode(ctx, text, []uint32{7}, special)
	if err != nil {
		t.Fatal(err)
	}
	want, _, _ := rc.fresh.encode(context.Background(), text, []uint32{7}, special)
	if !slices.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes: the cached encode differs from a fresh one at id %d of %d/%d\ntext %.300q", rc.name, len(text), i, len(got), len(want), text)
	}
}

// addedFragments lists t's added tokens and a prefix of each.
func addedFragments(t *BPE) []string {
	var out []string
	if t.added == nil {
		return nil
	}
	for _, toks := range t.added.byFirst {
		for _, tok := range toks {
			out = append(out, tok.content, tok.content[:len(tok.content)/2+1])
		}
	}
	return out
}

// newReuseCase pairs spec's tokenizer with a copy that has a cache with
// checkpoints every chunk bytes, for texts of minBytes or more.
func newReuseCase(t testing.TB, spec string, maxBytes int64, chunk, minBytes int) *reuseCase {
	t.Helper()
	fresh := mustNew(t, spec).(*BPE)
	return newReuseCaseOf(spec, copyBPE(fresh), fresh, maxBytes, chunk, minBytes)
}

// copyBPE is another tokenizer with t's (immutable) parts and no cache.
func copyBPE(t *BPE) *BPE {
	c := &BPE{exact: t.exact, added: t.added, normalize: t.normalize, pre: t.pre, model: t.model, prefix: t.prefix, suffix: t.suffix}
	c.initPools()
	return c
}

func newReuseCaseOf(name string, cached, fresh *BPE, maxBytes int64, chunk, minBytes int) *reuseCase {
	c := NewReuseCache(maxBytes)
	c.chunk, c.minBytes = chunk, minBytes
	cached.SetReuseCache(c)
	return &reuseCase{name: name, cached: cached, fresh: fresh, extra: addedFragments(fresh)}
}

// stripTokens is llama3-style with added tokens that strip whitespace
// and match whole words only.
func stripTokens(t testing.TB) []byte {
	data, err := os.ReadFile("testdata/llama3-style.json")
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	added := f["added_tokens"].([]any)
	for i, tok := range []hfAddedToken{
		{Content: "<L>", LStrip: true}, {Content: "<R>", RStrip: true},
		{Content: "<B>", LStrip: true, RStrip: true}, {Content: "ab", SingleWord: true},
	} {
		tok.ID = 600 + i
		added = append(added, tok)
	}
	f["added_tokens"] = added
	out, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// reuseSpecs are the tokenizers the reuse tests run on: each kind of
// pre-tokenizer and normalizer, with and without added tokens.
var reuseSpecs = []string{
	"hf:testdata/gpt2-style.json",
	"hf:testdata/llama3-style.json",
	"hf:testdata/llama2-style.json",
	"tiktoken:cl100k_base",
	"tiktoken:o200k_base",
	"tiktoken:r50k_base",
}

// spacyTokenizer is a byte-level BPE with the split pattern, trained on
// spacyText, so that its merges join whitespace runs, contractions and the
// other spans whose pieces a resume point could get wrong: cut elsewhere,
// such spans encode to other ids. It has added tokens, a long one among
// them, and, with strip set, tokens that strip whitespace; or, without
// added set, none: then resume points come closest to the checkpoints.
func spacyTokenizer(t testing.TB, pattern string, added, strip bool) []byte {
	t.Helper()
	r := rand.New(rand.NewPCG(8, 8))
	corpus := spacyText(r, 6000) + englishText(8, 8<<10)
	v := &vocabulary{}
	for _, c := range byteAlphabet() {
		v.add(c)
	}
	merges := trainBPE(regexWords(corpus, pattern), runes, 1500)
	for _, m := range merges {
		v.add(m[0] + m[1])
	}
	var tokens []hfAddedToken
	if added {
		tokens = []hfAddedToken{
			{Content: "<|eot_id|>"}, {Content: "<|start_header_id|>"},
			{Content: "<|a rather long special token, with words in it|>"},
		}
	}
	if strip {
		tokens = append(tokens, hfAddedToken{Content: "<L>", LStrip: true}, hfAddedToken{Content: "<R>", RStrip: true},
			hfAddedToken{Content: "<B>", LStrip: true, RStrip: true}, hfAddedToken{Content: "ab", SingleWord: true})
	}
	for i := range tokens {
		tokens[i].ID = len(v.tokens) + i
	}
	pre := `{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}`
	if pattern != gpt2Pattern {
		pre = `{"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": ` + jsonText(pattern) +
			`}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]}`
	}
	return tokenizerJSON(tokens, "null", pre, "null", "null", map[string]any{"type": "BPE"}, v, merges, true)
}

func reuseCases(t testing.TB, maxBytes int64, chunk, minBytes int) []*reuseCase {
	var cases []*reuseCase
	for _, spec := range reuseSpecs {
		cases = append(cases, newReuseCase(t, spec, maxBytes, chunk, minBytes))
	}
	fresh, err := ParseHF(stripTokens(t))
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, newReuseCaseOf("llama3-style with strip tokens", copyBPE(fresh), fresh, maxBytes, chunk, minBytes))
	for _, c := range []struct {
		name, pattern string
		added, strip  bool
	}{
		{"spacy-gpt2", gpt2Pattern, false, false},
		{"spacy-cl100k", cl100kPattern, false, false},
		{"spacy-o200k", o200kPattern, false, false},
		{"spacy-cl100k with strip tokens", cl100kPattern, false, true},
		{"spacy-cl100k with added tokens", cl100kPattern, true, true},
	} {
		data, ok := spacyTokenizers.Load(c.name)
		if !ok {
			data, _ = spacyTokenizers.LoadOrStore(c.name, spacyTokenizer(t, c.pattern, c.added, c.strip))
		}
		fresh, err := ParseHF(data.([]byte))
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, newReuseCaseOf(c.name, copyBPE(fresh), fresh, maxBytes, chunk, minBytes))
	}
	return cases
}

// chatText is a conversation of about n bytes in a chat template's shape:
// turns of prose, code and odd runes between the tokenizer's added
// tokens.
func chatText(r *rand.Rand, n int, extra []string) string {
	var sb strings.Builder
	for turn := 0; sb.Len() < n; turn++ {
		if len(extra) > 0 {
			sb.WriteString(extra[r.IntN(len(extra))])
		}
		sb.WriteString([]string{"user", "assistant", "system", "tool"}[turn%4])
		sb.WriteString(":\n\n")
		switch r.IntN(4) {
		case 0:
			sb.WriteString(randomText(r, 5+r.IntN(60), extra...))
		case 1:
			sb.WriteString("```go\nfunc f(x int) int {\n\treturn x * 2 // it's   doubled\n}\n```\n")
		default:
			sb.WriteString(englishText(r.Uint64(), 50+r.IntN(1500)))
		}
		if len(extra) > 0 {
			sb.WriteString(extra[r.IntN(len(extra))])
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// TestReuseMatchesFresh encodes texts that extend, cut short or part
// from texts encoded before, with a cache, and holds the ids to a fresh
// encode's.
func TestReuseMatchesFresh(t *testing.T) {
	t.Parallel() // the long tests run beside the reference test's Node process
	rounds := 60
	if testing.Short() || raceEnabled {
		rounds = 15
	}
	for _, chunk := range []int{16, 61, 256} {
		for _, rc := range reuseCases(t, 1<<20, chunk, 0) {
			t.Run(fmt.Sprintf("%s/chunk%d", rc.name, chunk), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(chunk), 3))
				for round := range rounds {
					special := round%2 == 0
					var a string
					if round%3 == 0 {
						a = randomText(r, 20+r.IntN(300), rc.extra...)
					} else {
						a = chatText(r, 200+r.IntN(3000), rc.extra)
					}
					rc.check(t, a, special)
					d := r.IntN(len(a) + 1)
					// Cut inside an added token now and then.
					if len(rc.extra) > 0 && round%4 == 1 {
						if tok := rc.extra[r.IntN(len(rc.extra))]; len(tok) > 1 {
							if i := strings.Index(a, tok); i >= 0 {
								d = i + 1 + r.IntN(len(tok)-1)
							}
						}
					}
					for _, b := range []string{
						a,                                  // the same text
						a[:d],                              // shorter
						a[:d] + chatText(r, 100, rc.extra), // parting at d
						a + chatText(r, 300, rc.extra),     // one more turn
						a[:d] + randomText(r, 5, rc.extra...),
					} {
						rc.check(t, b, special)
						rc.check(t, b, !special)
					}
				}
				if s := rc.cached.reuse.Load().cache.Stats(); s.Hits == 0 || s.ReusedBytes == 0 {
					t.Errorf("no hits: %+v", s)
				}
			})
		}
	}
}

// TestReuseEveryCut encodes short random texts, then, for every offset,
// the text cut there with a new tail, from a cache with a checkpoint at
// every byte: the second encode resumes from the checkpoint where the two
// part, the hardest place.
func TestReuseEveryCut(t *testing.T) {
	t.Parallel() // the long tests run beside the reference test's Node process
	texts := 60
	if testing.Short() || raceEnabled {
		texts = 6
	}
	for _, rc := range reuseCases(t, 1<<20, 1, 0) {
		t.Run(rc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(4, 4))
			for range texts {
				a := spacyText(r, 5+r.IntN(30), rc.extra...)
				for d := 0; d <= len(a); d++ {
					c := NewReuseCache(1 << 20)
					c.chunk, c.minBytes = 1+r.IntN(3), 0
					rc.cached.SetReuseCache(c)
					rc.check(t, a, false)
					var tail string
					if d < len(a) && !utf8.RuneStart(a[d]) {
						tail = string(rune(0x80 + r.IntN(64)))[1:] // another continuation byte
					}
					rc.check(t, a[:d]+tail+spacyText(r, 1+r.IntN(4), rc.extra...), false)
				}
			}
		})
	}
}

// TestReuseConversation grows conversations turn by turn, as agentic
// clients send them, at the default chunk and minimum, and checks that
// the ids are right and almost every byte is reused.
func TestReuseConversation(t *testing.T) {
	size := 200 << 10
	if testing.Short() || raceEnabled {
		size = 60 << 10
	}
	for _, rc := range reuseCases(t, DefaultReuseCacheBytes, reuseChunk, reuseMinBytes) {
		t.Run(rc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, 5))
			conv := chatText(r, 20<<10, rc.extra)
			rc.check(t, conv, false)
			want := 0 // reused at least: all but the last chunk and segment
			for len(conv) < size {
				want += len(conv) - 6<<10
				conv += chatText(r, 8<<10, rc.extra)
				rc.check(t, conv, false)
			}
			s := rc.cached.reuse.Load().cache.Stats()
			if s.Misses != 1 || s.Entries != 1 || s.ReusedBytes < int64(want) {
				t.Errorf("stats %+v: want one miss, one entry, and %d bytes or more reused", s, want)
			}
		})
	}
}

// TestReuseRealModels runs the reuse check on the real tokenizers that
// test/tokref installs (skipped without them): NFC (Qwen 3), DeepSeek V3's
// pre-tokenizer and empty normalizer, Gemma's and Llama 2's.
func TestReuseRealModels(t *testing.T) {
	t.Parallel() // the long tests run beside the reference test's Node process
	if testing.Short() || raceEnabled {
		t.Skip("slow")
	}
	for _, m := range []string{"llama2", "deepseek_v3", "llama3_1", "qwen3", "gptoss", "gemma3"} {
		t.Run(m, func(t *testing.T) {
			fresh, err := LoadHFDir(tokref.Model(t, "tokenizer-"+m, ""))
			if err != nil {
				t.Fatal(err)
			}
			rc := newReuseCaseOf(m, copyBPE(fresh.BPE), fresh.BPE, 4<<20, 61, 0)
			var extra []string
			for _, s := range rc.extra {
				if !strings.HasPrefix(s, "<unused") && !strings.HasPrefix(s, "<|reserved") && len(extra) < 64 {
					extra = append(extra, s)
				}
			}
			rc.extra = extra
			r := rand.New(rand.NewPCG(9, 9))
			for range 30 {
				a := chatText(r, 200+r.IntN(4000), rc.extra)
				rc.check(t, a, false)
				d := r.IntN(len(a) + 1)
				for _, b := range []string{a, a[:d], a[:d] + chatText(r, 200, rc.extra), a + chatText(r, 500, rc.extra)} {
					rc.check(t, b, false)
				}
			}
		})
	}
}

// TestReuseConcurrent grows conversations that share a system prompt from
// several goroutines, in a cache small enough to evict.
func TestReuseConcurrent(t *testing.T) {
	for _, spec := range []string{"hf:testdata/llama3-style.json", "hf:testdata/llama2-style.json"} {
		rc := newReuseCase(t, spec, 256<<10, 512, 2<<10)
		c := rc.cached.reuse.Load().cache
		system := chatText(rand.New(rand.NewPCG(1, 1)), 8<<10, rc.extra)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 7))
				conv := system
				for range 12 {
					conv += chatText(r, 2<<10, rc.extra)
					got, _ := rc.cached.Encode("m", conv, nil)
					want, _ := rc.fresh.Encode("m", conv, nil)
					if !slices.Equal(got, want) {
						t.Errorf("%s: goroutine %d: the cached encode differs", spec, g)
						return
					}
					if b := c.Stats().Bytes; b > c.maxBytes {
						t.Errorf("%s: the cache holds %d bytes, more than its %d", spec, b, c.maxBytes)
					}
				}
			})
		}
		wg.Wait()
		if s := c.Stats(); s.Hits == 0 || s.Evictions == 0 {
			t.Errorf("%s: %+v: want hits and evictions", spec, s)
		}
	}
}

// TestReuseBounds checks the size bound, LRU eviction and that an entry
// whose every checkpoint a longer text took is dropped.
func TestReuseBounds(t *testing.T) {
	rc := newReuseCase(t, "hf:testdata/gpt2-style.json", 300<<10, 1<<10, 4<<10)
	c := rc.cached.reuse.Load().cache
	r := rand.New(rand.NewPCG(2, 2))
	conv := chatText(r, 10<<10, rc.extra)
	rc.check(t, conv, true)
	conv += chatText(r, 1<<10, rc.extra)
	rc.check(t, conv, true)
	if s := c.Stats(); s.Entries != 1 || s.Evictions != 1 || s.Hits != 1 {
		t.Fatalf("after a conversation's second turn: %+v, want its first dropped", s)
	}
	// Unrelated texts: the oldest go first, the bound holds.
	var texts []string
	for i := range 40 {
		texts = append(texts, fmt.Sprintf("%d ", i)+englishText(uint64(i), 8<<10))
		rc.check(t, texts[i], true)
		if s := c.Stats(); s.Bytes > c.maxBytes {
			t.Fatalf("holds %d bytes, more than %d", s.Bytes, c.maxBytes)
		}
	}
	s := c.Stats()
	if s.Entries >= 40 || s.Entries < 5 {
		t.Fatalf("%+v: want some entries evicted and some kept", s)
	}
	hits := s.Hits
	rc.check(t, texts[39], true) // recent: kept
	rc.check(t, texts[0], true)  // oldest: evicted
	if got := c.Stats().Hits - hits; got != 1 {
		t.Fatalf("%d hits, want 1 (the recent text)", got)
	}
	// Too large for the cache: not kept.
	big := englishText(99, 200<<10)
	rc.check(t, big, true)
	rc.check(t, big, true)
	if got := c.Stats().Hits - hits; got != 1 {
		t.Fatalf("a text larger than a quarter of the cache was kept")
	}
	rc.cached.SetReuseCache(nil)
	rc.check(t, big, true)
}

// TestReuseCancel checks that a cancelled encode returns the context's
// error, whether it resumed or not, and is not kept.
func TestReuseCancel(t *testing.T) {
	rc := newReuseCase(t, "hf:testdata/llama3-style.json", 64<<20, 4<<10, 16<<10)
	c := rc.cached.reuse.Load().cache
	text := chatText(rand.New(rand.NewPCG(3, 3)), 600<<10, rc.extra)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ids, n, err := rc.cached.EncodeContext(ctx, "m", text, []uint32{1}); !errors.Is(err, context.Canceled) || n != 0 || len(ids) != 1 {
		t.Fatalf("cancelled: %d ids, n %d, err %v", len(ids), n, err)
	}
	if s := c.Stats(); s.Entries != 0 {
		t.Fatalf("a cancelled encode was kept: %+v", s)
	}
	rc.check(t, text[:400<<10], true)
	if _, _, err := rc.cached.EncodeContext(ctx, "m", text, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled after a hit: err %v", err)
	}
	if s := c.Stats(); s.Entries != 1 || s.Hits != 1 {
		t.Fatalf("%+v", s)
	}
	rc.check(t, text, true)
}

// TestAttachReuseCache attaches one cache to a mapping's tokenizers.
func TestAttachReuseCache(t *testing.T) {
	a, err1 := New("hf:testdata/gpt2-style.json")
	b, err2 := New("hf:testdata/llama3-style.json")
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	m, err := NewMapping(a, map[string]Tokenizer{"b": b, "b2": b, "e": NewEstimator()})
	if err != nil {
		t.Fatal(err)
	}
	c := NewReuseCache(DefaultReuseCacheBytes)
	AttachReuseCache(m, c)
	text := englishText(4, 40<<10)
	for _, model := range []string{"a", "b", "b2", "e"} {
		m.Encode(model, text, nil)
	}
	// Two tokenizers, two entries; b2 shares b's.
	if s := c.Stats(); s.Entries != 2 || s.Hits != 1 || s.Misses != 2 {
		t.Fatalf("%+v", s)
	}
	if NewReuseCache(0) != nil {
		t.Fatal("NewReuseCache(0) is a cache")
	}
	if ReuseCacheOf(m) != c || ReuseCacheOf(b) != c {
		t.Fatal("ReuseCacheOf does not find the cache")
	}
	AttachReuseCache(m, nil)
	if a.(*BPE).reuse.Load() != nil || ReuseCacheOf(m) != nil {
		t.Fatal("not detached")
	}
}

// FuzzReuse encodes prefix+tailA, then prefix+tailB, with a cache, and
// holds the second to a fresh encode.
func FuzzReuse(f *testing.F) {
	for _, s := range [][3]string{
		{paragraph, " And more.", "\n\nOther"},
		{"Hello<|eot_id|>world  \n\n  x", "<|eot", "<|eot_id|>"},
		{"<s>[INST] hi [/INST]", " ok </s>", "</s><s>"},
		{"a 'll \n   \n\t  ", "x", "\n"},
		{"é中文😀 1234567 ", "'re", "'r"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	var cases []*reuseCase
	for _, rc := range reuseCases(f, 4<<20, 8, 0) {
		switch rc.name {
		case "hf:testdata/gpt2-style.json", "hf:testdata/llama3-style.json", "hf:testdata/llama2-style.json",
			"tiktoken:cl100k_base", "spacy-o200k", "spacy-cl100k with strip tokens":
			cases = append(cases, rc)
		}
	}
	f.Fuzz(func(t *testing.T, prefix, tailA, tailB string) {
		for _, rc := range cases {
			rc.check(t, prefix+tailA, true)
			rc.check(t, prefix+tailB, false)
		}
	})
}

// splitOracle is the added-token split as it was before scan made it
// resumable: text for each run of ordinary text and token for each added
// token, in order; first is true for a text run at the start of the
// input. TestScanMatchesSplit holds scan to it.
func splitOracle(a *addedVocab, s string, text func(seg string, first bool), token func(id uint32)) {
	if a == nil {
		text(s, true)
		return
	}
	segStart := 0
	for i := 0; i < len(s); i++ {
		cands := a.byFirst[s[i]]
		if len(cands) == 0 {
			continue
		}
		for _, t := range cands {
			if !strings.HasPrefix(s[i:], t.content) {
				continue
			}
			start, end := i, i+len(t.content)
			if t.singleWord && (isWordRuneBefore(s, start) || isWordRuneAt(s, end)) {
				continue
			}
			if t.lstrip {
				start = segStart + len(strings.TrimRightFunc(s[segStart:start], unicode.IsSpace))
			}
			if t.rstrip {
				end = len(s) - len(strings.TrimLeftFunc(s[end:], unicode.IsSpace))
			}
			if start > segStart {
				text(s[segStart:start], segStart == 0)
			}
			token(t.id)
			segStart = end
			i = end - 1
			break
		}
	}
	if segStart < len(s) {
		text(s[segStart:], segStart == 0)
	}
}
