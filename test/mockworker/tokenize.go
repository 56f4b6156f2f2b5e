package mockworker

import "strings"

// BytesPerToken is the width of one token of the worker's tokenizer.
const BytesPerToken = 4

// Tokenize is the worker's deterministic stand-in for a real tokenizer: it
// cuts the UTF-8 bytes of text into consecutive BytesPerToken-byte pieces
// (the last piece may be shorter) and maps each piece to an id with FNV-1a.
// A text of b bytes therefore has ceil(b/4) tokens, and two texts that share
// a prefix of 4k bytes share their first k token ids, which is what the
// prefix cache needs.
func Tokenize(text string) []int {
	ids := make([]int, 0, (len(text)+BytesPerToken-1)/BytesPerToken)
	for i := 0; i < len(text); i += BytesPerToken {
		h := uint32(fnvOffset32)
		for j := i; j < min(i+BytesPerToken, len(text)); j++ {
			h ^= uint32(text[j])
			h *= fnvPrime32
		}
		ids = append(ids, int(h>>1)) // Ids stay non-negative in an int32.
	}
	return ids
}

// FNV-1a parameters (hash/fnv without its per-call allocation).
const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619
)

// ChatMessage is one message of a chat request.
type ChatMessage struct {
	Role    string
	Content string
}

// RenderChat is the worker's chat template: each message becomes
// "<|role|>\ncontent\n", followed by "<|assistant|>\n" as the generation
// prompt. A conversation that grows by appended messages keeps its rendered
// prefix, so its prompt tokens hit the prefix cache as with a real template.
func RenderChat(msgs []ChatMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|")
		b.WriteString(m.Role)
		b.WriteString("|>\n")
		b.WriteString(m.Content)
		b.WriteString("\n")
	}
	b.WriteString("<|assistant|>\n")
	return b.String()
}

// fillerWords are the words output tokens cycle through.
var fillerWords = [...]string{
	"lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit",
	"sed", "do", "eiusmod", "tempor", "incididunt", "ut", "labore", "et",
}

// FillerToken is the text of output token i (counting from 0): a space and
// the next filler word. Output is the same for every request.
func FillerToken(i int) string {
	return " " + fillerWords[i%len(fillerWords)]
}

// FillerText is the full text of n output tokens.
func FillerText(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(FillerToken(i))
	}
	return b.String()
}
