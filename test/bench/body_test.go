package bench

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestCompletionBodies(t *testing.T) {
	bodies, err := CompletionBodies(50, 2048)
	if err != nil {
		t.Fatal(err)
	}
	again, err := CompletionBodies(50, 2048)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var shared []byte
	for i, b := range bodies {
		if len(b) != 2048 {
			t.Fatalf("body %d is %d bytes, want 2048", i, len(b))
		}
		if !bytes.Equal(b, again[i]) {
			t.Fatalf("body %d differs between calls", i)
		}
		var v struct {
			Model     string `json:"model"`
			MaxTokens int    `json:"max_tokens"`
			Prompt    string `json:"prompt"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("body %d is not JSON: %v", i, err)
		}
		if v.Model != BenchModel || v.MaxTokens != 1 || len(v.Prompt) < 1900 {
			t.Fatalf("body %d: model %q max_tokens %d prompt %d bytes", i, v.Model, v.MaxTokens, len(v.Prompt))
		}
		if seen[v.Prompt] {
			t.Fatalf("body %d repeats a prompt", i)
		}
		seen[v.Prompt] = true
		half := []byte(v.Prompt[:len(v.Prompt)/2-10])
		if shared == nil {
			shared = half
		} else if !bytes.Equal(shared, half) {
			t.Fatalf("body %d does not share the first half of the prompt", i)
		}
	}
	if _, err := CompletionBodies(1, 40); err == nil {
		t.Error("a 40-byte body was accepted")
	}
}
