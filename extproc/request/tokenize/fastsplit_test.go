package tokenize

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

var fastPatterns = []string{
	gpt2Pattern, cl100kPattern, qwen2Pattern, o200kPattern,
	deepseekDigitsPattern, deepseekCJKPattern, deepseekWordPattern,
}

// checkFastSplit compares the hand-written matchers with the regexp engine
// on s, and DeepSeek V3's fused pre-tokenizer with its Sequence run by the
// regexp engine.
func checkFastSplit(t *testing.T, s string) {
	t.Helper()
	for _, expr := range fastPatterns {
		p := mustPattern(expr)
		if p.fast == nil {
			t.Fatalf("no fast matcher for %s", expr)
		}
		var ws workspace
		want := slices.Clone(p.regexpSpans(&ws, s, false))
		got := p.spans(&ws, s, false)
		if !slices.Equal(got, want) {
			t.Fatalf("pattern %s on %q:\nfast   %v\nregexp %v", expr, s, pieces(s, got), pieces(s, want))
		}
	}
	checkDeepSeekPT(t, s)
}

// deepseekRegexpPT is DeepSeek V3's pre-tokenizer as a Sequence on the
// regexp engine.
var deepseekRegexpPT = func() sequencePT {
	split := func(expr string) *splitPT {
		p := mustPattern(expr)
		p.fast = nil
		return &splitPT{re: p, behavior: isolated}
	}
	return sequencePT{
		split(deepseekDigitsPattern), split(deepseekCJKPattern), split(deepseekWordPattern),
		&byteLevelPT{},
	}
}()

func checkDeepSeekPT(t *testing.T, s string) {
	t.Helper()
	p := piece{s: s, first: true}
	var ws, ws2 workspace
	want := deepseekRegexpPT.split(&ws, nil, p)
	got := deepseekPT{dsClassTable()}.split(&ws2, nil, p)
	if !slices.Equal(got, want) {
		t.Fatalf("DeepSeek V3 pre-tokenizer on %q:\nfused  %q\nregexp %q", s, pieceTexts(got), pieceTexts(want))
	}
}

func pieceTexts(ps []piece) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.s)
	}
	return out
}

func pieces(s string, spans []span) []string {
	var out []string
	for _, sp := range spans {
		out = append(out, s[sp.start:sp.end])
	}
	return out
}

var splitAlphabet = []string{
	"a", "Z", "é", "ß", "中", "ǅ", "ʰ", "\u0301", "5", "٣", "Ⅻ", "½", " ", "  ", "\t", "\n", "\r\n", "\r",
	"\u00a0", "\u3000", "\u2028", "\u0085", "\u200b", "'", "'s", "'S", "'re", "'RE", "'ll", "'Ll", "'ve", "'d",
	"'m", "'t", "'x", ".", ",", "!?", "—", "😀", "$", "\x00", "\xff", "/", "ſ", "İ", "K",
	"Hello", "WORLD", "camelCase", "ǈ", "ᾈ", "ـ", "ا", "ह", "\u0903", "\u20dd", "x\u0301", "A\u0301b", "ʼ", "'D",
	// DeepSeek V3: its CJK ranges at and around their ends, with the
	// marks, symbols, punctuation and unassigned code points inside them.
	"\u4dff", "\u4e00", "一二", "\u9fa5", "\u9fa6", "\u9fff", "\u303f", "\u3040", "\u3041", "ひらがな", "\u3096",
	"\u3097", "\u3099", "\u309a", "\u309b", "\u309c", "\u309d", "\u309f", "\u30a0", "\u30a1", "カタカナ", "\u30fb",
	"\u30fc", "\u30ff", "\u3100", "\u31f0", "\uff66", "\u3007", "\u3001", "\u3002", "「", "」", "\uff01", "\uff11",
	// DeepSeek V3: numbers of every kind, runs longer than 3, ASCII
	// punctuation before ASCII and other letters, symbols and controls.
	"1234567", "12", "٣٤٥٦", "²", "\U0001d7ce", ".com", "_foo", "#x", "$HOME", "`a", "~Z", "@user", "\\n", "'é",
	"-\u0301", "€", "^", "+", "©", "™", "\u00ad", "\u200d", "\u2060", "\x7f", "\x1b", "\ufeff", "\U000e0001",
	"\ue000", "\U0010ffff", "\ufffd", "\u0378", " \u0301", "1\u0301", "1a", "\t\u0301x", "\u00a0a", "\u2028a",
	"\r\n\r\n", " \r\n ", "\n\n\n", ".\r\n", " .\n", "\xe4\xb8", "\xed\xa0\x80", "\x80", "\xc0\xaf", "\xe0\x80\xaf", "\xe0\x81\x81", "\xc1\xbf", "\xf0\x9f\x98",
}

func TestFastSplitMatchesRegexp(t *testing.T) {
	checkFastSplit(t, paragraph)
	checkFastSplit(t, englishText(3, 4000))
	r := rand.New(rand.NewPCG(11, 12))
	n := 2000
	if raceEnabled {
		n = 200
	}
	for range n {
		var sb strings.Builder
		for range 1 + r.IntN(12) {
			sb.WriteString(splitAlphabet[r.IntN(len(splitAlphabet))])
		}
		checkFastSplit(t, sb.String())
	}
}

func FuzzFastSplit(f *testing.F) {
	for _, s := range append(splitAlphabet, paragraph, "  \n\n  x", "a  b", "x'S'd", "12345 678",
		"DeepSeek-V3 的 MoE 有671B参数，其中37B被激活。ひらがなとカタカナ、漢字。", "x = f(a[1], b) // 注释\r\n\treturn") {
		f.Add(s)
	}
	f.Fuzz(checkFastSplit)
}
