package bench

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// BenchModel is the model every benchmark request names.
const BenchModel = "bench-model"

// words is the vocabulary of generated prompts: plain ASCII English, so no
// JSON escaping is needed.
var words = strings.Fields(`the of and to a in is it you that he was for on are with as his they be
at one have this from or had by word but what some we can out other were all there when up use your
how said an each she which do their time if will way about many then them write would like so these
her long make thing see him two has look more day could go come did number sound no most people my
over know water than call first who may down side been now find any new work part take get place
made live where after back little only round man year came show every good me give our under name`)

// CompletionBodies returns n distinct OpenAI completion bodies of exactly
// size bytes each, for BenchModel with max_tokens 1. Every prompt starts
// with the same text for its first half, as prompts sharing a system
// preamble do, and differs after it; the result is deterministic.
func CompletionBodies(n, size int) ([][]byte, error) {
	return completionBodies(n, size, false)
}

// StreamCompletionBodies is CompletionBodies with "stream": true.
func StreamCompletionBodies(n, size int) ([][]byte, error) {
	return completionBodies(n, size, true)
}

func completionBodies(n, size int, stream bool) ([][]byte, error) {
	head, tail := `{"model":"`+BenchModel+`","max_tokens":1,"prompt":"`, `"}`
	if stream {
		head = `{"model":"` + BenchModel + `","max_tokens":1,"stream":true,"prompt":"`
	}
	room := size - len(head) - len(tail)
	if room < 64 || n <= 0 {
		return nil, fmt.Errorf("bench: cannot make %d bodies of %d bytes", n, size)
	}
	shared := prose(rand.New(rand.NewPCG(1, 1)), room/2)
	out := make([][]byte, n)
	for i := range out {
		own := fmt.Sprintf(" Request %d: ", i)
		rest := prose(rand.New(rand.NewPCG(2, uint64(i))), room-len(shared)-len(own))
		b := make([]byte, 0, size)
		b = append(b, head...)
		b = append(b, shared...)
		b = append(b, own...)
		b = append(b, rest...)
		b = append(b, tail...)
		if len(b) != size {
			return nil, fmt.Errorf("bench: body %d is %d bytes, want %d", i, len(b), size)
		}
		out[i] = b
	}
	return out, nil
}

// prose returns exactly n bytes of space-separated words.
func prose(r *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[r.IntN(len(words))])
	}
	return b.String()[:n]
}
