package tokenize

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
)

var update = flag.Bool("update", false, "regenerate the tokenizer.json fixtures in testdata")

// llama3Pattern is the Split pattern of Llama 3's tokenizer.json.
const llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// fixture describes one generated tokenizer.json.
type fixture struct {
	file   string
	merges int
	build  func(f fixture) []byte
}

var fixtures = []fixture{
	{"gpt2-style.json", 400, buildGPT2Style},
	{"llama3-style.json", 300, buildLlama3Style},
	{"llama2-style.json", 300, buildLlama2Style},
}

// trainingCorpus is the text every fixture is trained on.
func trainingCorpus() string { return englishText(1, 48<<10) }

// TestFixturesUpToDate regenerates every fixture and compares it with the
// file in testdata, so the fixtures are reproducible from this code; run
// with -update to rewrite them.
func TestFixturesUpToDate(t *testing.T) {
	for _, f := range fixtures {
		got := f.build(f)
		path := filepath.Join("testdata", f.file)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -run TestFixturesUpToDate -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go test -run TestFixturesUpToDate -update", path)
		}
	}
}

// trainBPE learns merges over words (each a list of initial symbols, with
// its count): repeatedly the most frequent adjacent pair, ties broken by
// the pair's text, as a plain BPE trainer does.
func trainBPE(words map[string]int, split func(string) []string, n int) [][2]string {
	var names []string
	ids := map[string]int32{}
	intern := func(s string) int32 {
		id, ok := ids[s]
		if !ok {
			id = int32(len(names))
			ids[s] = id
			names = append(names, s)
		}
		return id
	}
	type word struct {
		syms  []int32
		count int
	}
	keys := make([]string, 0, len(words))
	for w := range words {
		keys = append(keys, w)
	}
	slices.Sort(keys)
	ws := make([]word, 0, len(keys))
	for _, k := range keys {
		var syms []int32
		for _, s := range split(k) {
			syms = append(syms, intern(s))
		}
		ws = append(ws, word{syms, words[k]})
	}
	var merges [][2]string
	counts := map[uint64]int{}
	for len(merges) < n {
		clear(counts)
		for _, w := range ws {
			for i := 0; i+1 < len(w.syms); i++ {
				counts[uint64(w.syms[i])<<32|uint64(w.syms[i+1])] += w.count
			}
		}
		var best uint64
		bestCount := 0
		text := func(p uint64) string { return names[p>>32] + " " + names[uint32(p)] }
		for p, c := range counts {
			if c > bestCount || (c == bestCount && text(p) < text(best)) {
				best, bestCount = p, c
			}
		}
		if bestCount < 2 {
			break
		}
		left, right := int32(best>>32), int32(uint32(best))
		merges = append(merges, [2]string{names[left], names[right]})
		merged := intern(names[left] + names[right])
		for i := range ws {
			syms := ws[i].syms
			out := syms[:0]
			for j := 0; j < len(syms); j++ {
				if j+1 < len(syms) && syms[j] == left && syms[j+1] == right {
					out = append(out, merged)
					j++
				} else {
					out = append(out, syms[j])
				}
			}
			ws[i].syms = out
		}
	}
	return merges
}

func runes(s string) []string { return strings.Split(s, "") }

// regexWords counts the pieces a pattern cuts text into, in byte-alphabet
// form.
func regexWords(text, pattern string) map[string]int {
	re := regexp2.MustCompile(pattern, regexp2.None)
	counts := map[string]int{}
	m, _ := re.FindStringMatch(text)
	for m != nil {
		counts[string(appendByteLevel(nil, m.String()))]++
		m, _ = re.FindNextMatch(m)
	}
	return counts
}

// byteAlphabet lists the 256 byte characters in GPT-2's id order.
func byteAlphabet() []string {
	var printable, rest []string
	for b := range 256 {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			printable = append(printable, string(byteRune[b]))
		} else {
			rest = append(rest, string(byteRune[b]))
		}
	}
	return append(printable, rest...)
}

// vocabulary assigns ids in order: base symbols, then merge results.
type vocabulary struct {
	tokens []string
	ids    map[string]int
}

func (v *vocabulary) add(tok string) {
	if v.ids == nil {
		v.ids = map[string]int{}
	}
	if _, ok := v.ids[tok]; !ok {
		v.ids[tok] = len(v.tokens)
		v.tokens = append(v.tokens, tok)
	}
}

// jsonText encodes v without HTML escaping.
func jsonText(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// tokenizerJSON writes a tokenizer.json in the layout the reference
// library saves: vocab ordered by id, one merge per line.
func tokenizerJSON(added []hfAddedToken, normalizer, preTokenizer, postProcessor, decoder string,
	model map[string]any, v *vocabulary, merges [][2]string, pairMerges bool) []byte {
	var sb strings.Builder
	sb.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for i, a := range added {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString("\n    " + jsonText(map[string]any{
			"id": a.ID, "content": a.Content, "single_word": a.SingleWord, "lstrip": a.LStrip,
			"rstrip": a.RStrip, "normalized": a.Normalized, "special": a.Special}))
	}
	sb.WriteString("\n  ],\n  \"normalizer\": " + normalizer + ",\n  \"pre_tokenizer\": " + preTokenizer +
		",\n  \"post_processor\": " + postProcessor + ",\n  \"decoder\": " + decoder + ",\n  \"model\": {\n")
	keys := make([]string, 0, len(model))
	for k := range model {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		sb.WriteString("    " + jsonText(k) + ": " + jsonText(model[k]) + ",\n")
	}
	sb.WriteString("    \"vocab\": {")
	for i, tok := range v.tokens {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString("\n      " + jsonText(tok) + ": " + jsonText(i))
	}
	sb.WriteString("\n    },\n    \"merges\": [")
	for i, m := range merges {
		if i > 0 {
			sb.WriteByte(',')
		}
		if pairMerges {
			sb.WriteString("\n      " + jsonText([]string{m[0], m[1]}))
		} else {
			sb.WriteString("\n      " + jsonText(m[0]+" "+m[1]))
		}
	}
	sb.WriteString("\n    ]\n  }\n}\n")
	return []byte(sb.String())
}

func byteLevelModel(pattern string, n int) (*vocabulary, [][2]string) {
	v := &vocabulary{}
	for _, c := range byteAlphabet() {
		v.add(c)
	}
	merges := trainBPE(regexWords(trainingCorpus(), pattern), runes, n)
	for _, m := range merges {
		v.add(m[0] + m[1])
	}
	return v, merges
}

func buildGPT2Style(f fixture) []byte {
	v, merges := byteLevelModel(gpt2Pattern, f.merges)
	added := []hfAddedToken{{ID: len(v.tokens), Content: "<|endoftext|>", Normalized: true, Special: true}}
	byteLevel := `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}`
	return tokenizerJSON(added, "null", byteLevel, byteLevel, byteLevel, map[string]any{
		"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
		"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
	}, v, merges, false)
}

func buildLlama3Style(f fixture) []byte {
	v, merges := byteLevelModel(llama3Pattern, f.merges)
	base := len(v.tokens)
	added := []hfAddedToken{
		{ID: base, Content: "<|begin_of_text|>", Special: true},
		{ID: base + 1, Content: "<|end_of_text|>", Special: true},
		{ID: base + 2, Content: "<|eot_id|>", Special: true},
	}
	pre := `{"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": ` + jsonText(llama3Pattern) +
		`}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}`
	post := `{"type": "Sequence", "processors": [{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true}, ` +
		`{"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], ` +
		`"pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}], ` +
		`"special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [` + jsonText(base) + `], "tokens": ["<|begin_of_text|>"]}}}]}`
	dec := `{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}`
	return tokenizerJSON(added, "null", pre, post, dec, map[string]any{
		"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
		"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
	}, v, merges, true)
}

func buildLlama2Style(f fixture) []byte {
	v := &vocabulary{}
	for _, s := range []string{"<unk>", "<s>", "</s>"} {
		v.add(s)
	}
	for b := range 256 {
		v.add(fmt.Sprintf("<0x%02X>", b))
	}
	text := "▁" + strings.ReplaceAll(trainingCorpus(), " ", "▁")
	// Characters seen at least 3 times join the vocabulary, most frequent
	// first; rarer ones are left to byte fallback.
	chars := map[string]int{}
	for _, r := range text {
		chars[string(r)]++
	}
	var alphabet []string
	for c, n := range chars {
		if n >= 3 {
			alphabet = append(alphabet, c)
		}
	}
	slices.SortFunc(alphabet, func(a, b string) int {
		if chars[a] != chars[b] {
			return chars[b] - chars[a]
		}
		return strings.Compare(a, b)
	})
	for _, c := range alphabet {
		v.add(c)
	}
	words := map[string]int{}
	for _, w := range strings.SplitAfter(text, "▁") {
		// SplitAfter leaves the marker at the end; move it to the front.
		if w = strings.TrimSuffix(w, "▁"); w != "" {
			words["▁"+w]++
		}
	}
	known := func(s string) []string {
		var out []string
		for _, r := range s {
			if _, ok := v.ids[string(r)]; ok {
				out = append(out, string(r))
			} else {
				out = append(out, "\x00") // never merges
			}
		}
		return out
	}
	merges := trainBPE(words, known, f.merges)
	merges = slices.DeleteFunc(merges, func(m [2]string) bool { return strings.Contains(m[0]+m[1], "\x00") })
	for _, m := range merges {
		v.add(m[0] + m[1])
	}
	added := []hfAddedToken{
		{ID: 0, Content: "<unk>", Special: true},
		{ID: 1, Content: "<s>", Special: true},
		{ID: 2, Content: "</s>", Special: true},
	}
	norm := `{"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}`
	post := `{"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], ` +
		`"pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}], ` +
		`"special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}`
	dec := `{"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}`
	return tokenizerJSON(added, norm, "null", post, dec, map[string]any{
		"type": "BPE", "dropout": nil, "unk_token": "<unk>", "continuing_subword_prefix": nil,
		"end_of_word_suffix": nil, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
	}, v, merges, false)
}
