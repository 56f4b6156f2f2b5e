package bench

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func TestLongChat(t *testing.T) {
	c, err := NewLongChat("m", 3, 20000, 7)
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != 3 {
		t.Fatalf("Len() = %d", c.Len())
	}
	type conv struct {
		Model     string        `json:"model"`
		MaxTokens int           `json:"max_tokens"`
		Messages  []chatMessage `json:"messages"`
	}
	decode := func(i, pass int) conv {
		t.Helper()
		b, err := c.Body(i, pass)
		if err != nil {
			t.Fatal(err)
		}
		var v conv
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("body %d/%d: %v", i, pass, err)
		}
		return v
	}
	first := map[byte]bool{}
	for i := range 3 {
		p1, p2 := decode(i, 1), decode(i, 2)
		if p1.Model != "m" || p1.MaxTokens != 1 || len(p1.Messages) != 4 {
			t.Fatalf("conversation %d: %+v", i, p1.Messages[0].Role)
		}
		n := 0
		for _, m := range p1.Messages[:3] {
			n += len(m.Content)
		}
		if n < 19000 || n > 20000 {
			t.Errorf("conversation %d: %d bytes of earlier turns, want about 20000", i, n)
		}
		// Both passes share every earlier turn and differ in the last.
		if !reflect.DeepEqual(p1.Messages[:3], p2.Messages[:3]) || p1.Messages[3] == p2.Messages[3] {
			t.Errorf("conversation %d: passes share %v, last turns %q / %q", i,
				reflect.DeepEqual(p1.Messages[:3], p2.Messages[:3]), p1.Messages[3].Content[:20], p2.Messages[3].Content[:20])
		}
		if p1.Messages[0].Role != "system" || p1.Messages[3].Role != "user" {
			t.Errorf("conversation %d: roles %s … %s", i, p1.Messages[0].Role, p1.Messages[3].Role)
		}
		// Conversations differ from their first bytes past "Conversation 7-".
		first[p1.Messages[0].Content[len("Conversation 7-")]] = true
	}
	if len(first) != 3 {
		t.Error("conversations share the start of their system prompts")
	}
	again, _ := NewLongChat("m", 1, 20000, 7)
	a, _ := again.Body(0, 1)
	b, _ := c.Body(0, 1)
	if !bytes.Equal(a, b) {
		t.Error("a conversation depends on the size of its set")
	}
	other, _ := NewLongChat("m", 1, 20000, 8)
	o, _ := other.Body(0, 1)
	if bytes.Equal(o[:200], b[:200]) {
		t.Error("two seeds gave the same conversation start")
	}
	if _, err := NewLongChat("m", 1, 100, 1); err == nil {
		t.Error("a 100-byte conversation was accepted")
	}
}
