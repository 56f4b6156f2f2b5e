package intake

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/extproc/request/tokenize"
)

// alternatingModel is a tokenizer mapping whose model "chat" has a chat
// template that, like Gemma's, refuses two user turns in a row.
func alternatingModel(t *testing.T) Tokenizer {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile("../request/tokenize/testdata/llama3-style.json")
	if err != nil {
		t.Fatal(err)
	}
	config := `{"bos_token":"<|begin_of_text|>","chat_template":"{{ bos_token }}{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"}`
	for name, content := range map[string][]byte{"tokenizer.json": data, "tokenizer_config.json": []byte(config)} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := tokenize.NewFromSpecs("estimate", []string{"chat=hf:" + dir})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestPlan_ChatTemplate: a chat request for a model with a template is
// priced by the rendered template's ids; a conversation the template
// refuses is a 400 whose body CountPrompt (tollgate tokenize) repeats.
func TestPlan_ChatTemplate(t *testing.T) {
	tok := alternatingModel(t)
	p := newTestPlanner(t, Config{Tokenizer: tok})
	h := headers()
	good := []byte(`{"model":"chat","messages":[{"role":"user","content":"hello"}]}`)
	pl, rej := p.Build(t.Context(), t0, 1, openai.KindChatCompletions, h, Identity{}, good, false, nil)
	if rej != nil {
		t.Fatal(rej)
	}
	want, _ := tok.Encode("chat", "<user>hello<assistant>", nil)
	want = want[1:] // the post-processor's BOS: the template writes its own
	want = append([]uint32{556}, want...)
	got, err := CountPrompt(t.Context(), tok, openai.KindChatCompletions, good, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Tokens, want) || got.Count != len(want) || pl.Estimate != len(want) || !pl.Exact {
		t.Errorf("tokens %v (count %d, plan %d exact %v), want %v", got.Tokens, got.Count, pl.Estimate, pl.Exact, want)
	}

	bad := []byte(`{"model":"chat","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`)
	_, rej = p.Build(t.Context(), t0, 2, openai.KindChatCompletions, h, Identity{}, bad, false, nil)
	if rej == nil {
		t.Fatal("a conversation the template refuses was admitted")
	}
	_, err = CountPrompt(t.Context(), tok, openai.KindChatCompletions, bad, 1<<20)
	var rr *Rejection
	if !errors.As(err, &rr) {
		t.Fatalf("CountPrompt: %v", err)
	}
	if *rr != *rej || rr.Reason != ReasonBadRequest || !strings.Contains(rr.Message, "Conversation roles must alternate") {
		t.Errorf("CountPrompt rejection %+v, serve's %+v", rr, rej)
	}

	// Other models keep the estimator and the plain rendering.
	other, err := CountPrompt(t.Context(), tok, openai.KindChatCompletions, []byte(`{"model":"x","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`), 1<<20)
	if err != nil || other.Exact || other.Tokens != nil || other.Tokenizer != "estimate" {
		t.Errorf("estimated model: %+v %v", other, err)
	}
	if _, err := CountPrompt(t.Context(), tok, openai.KindCompletions, []byte(`{"model":"x","prompt":"`+strings.Repeat("a", 100)+`"}`), 50); !errors.As(err, &rr) || rr.Reason != ReasonBodyTooLarge {
		t.Errorf("oversized body: %v", err)
	}
}
