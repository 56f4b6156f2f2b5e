package mockworker

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTokenize_OneTokenPerFourBytes(t *testing.T) {
	tests := []struct {
		give string
		want int
	}{
		{give: "", want: 0},
		{give: "a", want: 1},
		{give: "abcd", want: 1},
		{give: "abcde", want: 2},
		{give: "héllo", want: 2}, // Six bytes.
		{give: strings.Repeat("x", 400), want: 100},
	}
	for _, tt := range tests {
		if got := len(Tokenize(tt.give)); got != tt.want {
			t.Errorf("len(Tokenize(%q)) = %d, want %d", tt.give, got, tt.want)
		}
	}
}

func TestTokenize_DeterministicAndPrefixStable(t *testing.T) {
	a := Tokenize("The quick brown fox jumps over the lazy dog")
	b := Tokenize("The quick brown fox jumps over the lazy cat and more")
	if diff := cmp.Diff(a, Tokenize("The quick brown fox jumps over the lazy dog")); diff != "" {
		t.Errorf("Tokenize is not deterministic (-first +second):\n%s", diff)
	}
	// The texts share their first 40 bytes, so their first 10 tokens.
	if diff := cmp.Diff(a[:10], b[:10]); diff != "" {
		t.Errorf("shared prefix tokens differ (-a +b):\n%s", diff)
	}
	if a[10] == b[10] {
		t.Errorf("token 10 is %d in both texts, want different ids for different bytes", a[10])
	}
	for _, id := range a {
		if id < 0 {
			t.Fatalf("token id %d is negative", id)
		}
	}
}

func TestRenderChat_AppendedTurnKeepsPrefix(t *testing.T) {
	turn1 := []ChatMessage{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}}
	got := RenderChat(turn1)
	want := "<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n"
	if got != want {
		t.Errorf("RenderChat = %q, want %q", got, want)
	}
	turn2 := append(turn1, ChatMessage{Role: "assistant", Content: "hello"}, ChatMessage{Role: "user", Content: "more"})
	if r := RenderChat(turn2); !strings.HasPrefix(r, strings.TrimSuffix(want, "<|assistant|>\n")) {
		t.Errorf("second turn %q does not extend the first turn's messages", r)
	}
}

func TestFillerText_IsTheConcatenatedTokens(t *testing.T) {
	if got, want := FillerText(3), " lorem ipsum dolor"; got != want {
		t.Errorf("FillerText(3) = %q, want %q", got, want)
	}
	if got, want := FillerToken(len(fillerWords)), FillerToken(0); got != want {
		t.Errorf("FillerToken wraps to %q, want %q", got, want)
	}
}
