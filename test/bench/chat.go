package bench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// ChatPath is the route of the long-context benchmark's requests.
const ChatPath = "/v1/chat/completions"

// chatMessage is one message of an OpenAI chat request.
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatRequest is the body of a long-context request.
type chatRequest struct {
	Model     string        `json:"model"`
	MaxTokens int           `json:"max_tokens"`
	Messages  []chatMessage `json:"messages"`
}

// Sizes of the short turns of a LongChat conversation, in bytes of text.
const (
	earlierTurnBytes = 1024
	lastTurnBytes    = 256
)

// LongChat is a set of long chat conversations, as agents send them: a
// long system prompt, one earlier exchange, and a new last user turn on
// every pass. Conversation i with pass p is Body(i, p); two passes over
// the same conversations differ only in their last turn, so the second
// finds every earlier turn tokenized before.
//
// Each conversation's system prompt is its own from its first bytes
// ("Conversation <seed>-<i>."), so that no two conversations of a set, nor
// of sets with other seeds, share a prefix: the first pass over a set is
// cold. A LongChat is deterministic in its arguments and safe for
// concurrent use (it is read-only once built).
type LongChat struct {
	model   string
	seed    uint64
	earlier [][]chatMessage
}

// NewLongChat builds n conversations for model whose earlier turns (the
// system prompt and one exchange) hold about contextBytes bytes of text.
func NewLongChat(model string, n, contextBytes int, seed uint64) (*LongChat, error) {
	if n <= 0 || contextBytes < 4*earlierTurnBytes {
		return nil, fmt.Errorf("bench: cannot make %d conversations of %d bytes", n, contextBytes)
	}
	c := &LongChat{model: model, seed: seed, earlier: make([][]chatMessage, n)}
	for i := range c.earlier {
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		head := fmt.Sprintf("Conversation %d-%d. You are a careful assistant; the notes below are the context. ", seed, i)
		system := head + prose(r, contextBytes-2*earlierTurnBytes-len(head))
		c.earlier[i] = []chatMessage{
			{"system", system},
			{"user", prose(r, earlierTurnBytes)},
			{"assistant", prose(r, earlierTurnBytes)},
		}
	}
	return c, nil
}

// Len returns the number of conversations.
func (c *LongChat) Len() int { return len(c.earlier) }

// Body returns the chat request of conversation i on pass pass: its
// earlier turns and a last user turn of its own for that pass.
func (c *LongChat) Body(i, pass int) ([]byte, error) {
	r := rand.New(rand.NewPCG(c.seed^0x9e3779b97f4a7c15, uint64(i)<<8|uint64(pass&0xff)))
	head := fmt.Sprintf("Question %d of pass %d: ", i, pass)
	msgs := make([]chatMessage, 0, len(c.earlier[i])+1)
	msgs = append(msgs, c.earlier[i]...)
	msgs = append(msgs, chatMessage{"user", head + prose(r, lastTurnBytes-len(head))})
	return json.Marshal(chatRequest{Model: c.model, MaxTokens: 1, Messages: msgs})
}
