package tokenize

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

var fastPatterns = []string{gpt2Pattern, cl100kPattern, qwen2Pattern, o200kPattern}

// checkFastSplit compares the hand-written matchers with the regexp engine
// on s.
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
	for _, s := range append(splitAlphabet, paragraph, "  \n\n  x", "a  b", "x'S'd", "12345 678") {
		f.Add(s)
	}
	f.Fuzz(checkFastSplit)
}
