package tokenize

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestWordSplitBridges: cutting a SentencePiece-style piece into words
// before each ▁ gives the ids of encoding it whole, also when a token
// bridges a ▁ (">▁</", as in Gemma 3) and the text spells it.
func TestWordSplitBridges(t *testing.T) {
	const tj = `{
  "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
  "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false},
  "model": {"type": "BPE", "vocab": {"▁": 0, "a": 1, "b": 2, ">": 3, "<": 4, "/": 5,
    ">▁": 6, "</": 7, ">▁</": 8, "▁a": 9, "ab": 10, "▁ab": 11, "▁▁": 12, "b>": 13},
    "merges": ["> ▁", "< /", ">▁ </", "▁ a", "a b", "▁a b", "▁ ▁", "b >"]}
}`
	split, err := ParseHF([]byte(tj))
	if err != nil {
		t.Fatal(err)
	}
	bridges := slices.Sorted(slices.Values(split.model.bridges))
	if !split.model.metaWords || !reflect.DeepEqual(bridges, []string{">▁", ">▁</"}) {
		t.Fatalf("metaWords %v bridges %q", split.model.metaWords, split.model.bridges)
	}
	whole, _ := ParseHF([]byte(tj))
	whole.model.metaWords = false
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", ">", "<", "/", " ", "> </", " "}
	for i := range 5000 {
		var sb strings.Builder
		for range 1 + r.IntN(30) {
			sb.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		text := sb.String()
		got, _ := split.Encode("m", text, nil)
		want, _ := whole.Encode("m", text, nil)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d %q: split %v, whole %v", i, text, got, want)
		}
	}
}
