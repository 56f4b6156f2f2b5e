package tokenize

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
)

// TestLiteralSpans holds the string search of {"String": …} patterns to
// the regexp engine's matches of the quoted literal, and replaceAll to
// strings.ReplaceAll.
func TestLiteralSpans(t *testing.T) {
	lits := []string{" ", "▁", "ab", "a a", "\n\n", "の", "aa"}
	alphabet := []string{"a", "b", " ", "▁", "の", "\n", "é", "aa"}
	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		var sb strings.Builder
		for k := r.IntN(30); k > 0; k-- {
			sb.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		s := sb.String()
		for _, lit := range lits {
			re, err := newPattern(regexp2.Escape(lit))
			if err != nil {
				t.Fatal(err)
			}
			for _, invert := range []bool{false, true} {
				var ws workspace
				want := slices.Clone(re.regexpSpans(&ws, s, invert))
				if got := literalSpans(nil, s, lit, invert); !slices.Equal(got, want) {
					t.Fatalf("literalSpans(%q, %q, %v) = %v, want %v", s, lit, invert, got, want)
				}
			}
			if got, want := replaceAll(s, lit, "<>"), strings.ReplaceAll(s, lit, "<>"); got != want {
				t.Fatalf("replaceAll(%q, %q) = %q, want %q", s, lit, got, want)
			}
		}
	}
}
