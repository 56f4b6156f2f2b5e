package tokenize

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

var setOfflineLoader sync.Once

// referenceTiktoken returns tiktoken-go's encoder for encoding, loading
// ranks from the embedded files only.
func referenceTiktoken(t testing.TB, encoding string) *tiktoken.Tiktoken {
	t.Helper()
	setOfflineLoader.Do(func() { tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader()) })
	enc, err := tiktoken.GetEncoding(encoding)
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// TestTiktokenMatchesReference holds NewTiktoken to tiktoken-go, the
// reference Go port, on prose and on random strings.
func TestTiktokenMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	texts := []string{paragraph, englishText(8, 6000), "<|endoftext|> <|fim_prefix|>", ""}
	for range 200 {
		var sb strings.Builder
		for range 1 + r.IntN(16) {
			sb.WriteString(splitAlphabet[r.IntN(len(splitAlphabet))])
			if r.IntN(3) == 0 {
				sb.WriteString(englishWords[r.IntN(len(englishWords))])
			}
		}
		texts = append(texts, sb.String())
	}
	encodings := []string{"cl100k_base", "o200k_base"}
	if raceEnabled {
		encodings = encodings[:1]
	}
	for _, encoding := range encodings {
		t.Run(encoding, func(t *testing.T) {
			ref := referenceTiktoken(t, encoding)
			ours := mustNew(t, "tiktoken:"+encoding)
			for _, s := range texts {
				want := ref.EncodeOrdinary(s)
				got, n := ours.Encode("m", s, nil)
				if n != len(want) || !slices.EqualFunc(got, want, func(a uint32, b int) bool { return int(a) == b }) {
					t.Fatalf("Encode(%q):\n got %v\nwant %v", s, got, want)
				}
			}
		})
	}
}

// BenchmarkTiktokenReference measures tiktoken-go on the same prompts as
// BenchmarkEncode, for comparison.
func BenchmarkTiktokenReference(b *testing.B) {
	for _, encoding := range []string{"cl100k_base", "o200k_base"} {
		enc := referenceTiktoken(b, encoding)
		for _, size := range []int{10 << 10, 100 << 10} {
			text := englishText(42, size)[:size]
			b.Run(encoding+"/"+map[int]string{10 << 10: "10KiB", 100 << 10: "100KiB"}[size], func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				b.ReportAllocs()
				for b.Loop() {
					enc.EncodeOrdinary(text)
				}
			})
		}
	}
}
