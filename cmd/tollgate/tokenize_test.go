package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// modelDir writes a model directory around the llama3-style test tokenizer
// with a chat template that refuses two user turns in a row.
func modelDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile("../../extproc/request/tokenize/testdata/llama3-style.json")
	if err != nil {
		t.Fatal(err)
	}
	config := `{"bos_token":"<|begin_of_text|>","chat_template":"{{ bos_token }}{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"}`
	for name, content := range map[string][]byte{"tokenizer.json": data, "tokenizer_config.json": []byte(config)} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runTokenizeWith(t *testing.T, body string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	old := stdin
	stdin = strings.NewReader(body)
	defer func() { stdin = old }()
	return runArgs(t, append([]string{"tokenize"}, args...)...)
}

func TestTokenize(t *testing.T) {
	dir := modelDir(t)
	flags := []string{"--tokenizer", "tiktoken:cl100k_base", "--model-tokenizer", "m=hf:" + dir}
	var out struct {
		Model     string   `json:"model"`
		Tokens    []uint32 `json:"tokens"`
		Count     int      `json:"count"`
		Exact     bool     `json:"exact"`
		Tokenizer string   `json:"tokenizer"`
	}
	code, stdout, stderr := runTokenizeWith(t, `{"model":"m","messages":[{"role":"user","content":"hello"}]}`, flags...)
	if code != 0 {
		t.Fatalf("code %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatal(err)
	}
	if out.Model != "m" || out.Count != len(out.Tokens) || out.Count == 0 || out.Tokens[0] != 556 || !out.Exact || out.Tokenizer != "hf:"+dir {
		t.Errorf("chat: %s", stdout)
	}
	code, stdout, _ = runTokenizeWith(t, `{"model":"other","prompt":"hello"}`, flags...)
	if code != 0 || !strings.Contains(stdout, `"tokens":[15339],"count":1,"exact":true,"tokenizer":"tiktoken:cl100k_base"`) {
		t.Errorf("default tokenizer: %d %s", code, stdout)
	}
	code, stdout, stderr = runTokenizeWith(t, `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`, flags...)
	if code != 1 || stdout != "" || !strings.Contains(stderr, `{"error":{"message":"the model's chat template cannot render these messages: chat template: Conversation roles must alternate","type":"invalid_request_error","param":"messages","code":"invalid_value"}}`) {
		t.Errorf("refused conversation: %d %q %q", code, stdout, stderr)
	}
	code, _, stderr = runTokenizeWith(t, `{"model":"m","prompt":"x"}`, "--route", "chat")
	if code != 1 || !strings.Contains(stderr, `'messages' is required`) {
		t.Errorf("--route chat: %d %q", code, stderr)
	}
	code, _, stderr = runTokenizeWith(t, `{}`, "--route", "bogus")
	if code != 1 || !strings.Contains(stderr, `--route "bogus"`) {
		t.Errorf("--route bogus: %d %q", code, stderr)
	}
}

func TestCheckConfig_ModelTokenizers(t *testing.T) {
	code, out, _ := runArgs(t, "check-config", "--model-tokenizer", "a=hf:"+modelDir(t), "--model-tokenizer", "b=hf:/does/not/exist", "--model-tokenizer", "c")
	if code != 1 || !strings.Contains(out, "problem: --model-tokenizer b: hf tokenizer: open /does/not/exist") || !strings.Contains(out, `problem: --model-tokenizer "c": want MODEL=SPEC`) || strings.Contains(out, "model-tokenizer a") {
		t.Errorf("code %d:\n%s", code, out)
	}
	code, out, _ = runArgs(t, "check-config", "--model-tokenizer", "a=hf:"+modelDir(t))
	if code != 0 {
		t.Errorf("code %d:\n%s", code, out)
	}
}

// countdownCtx is a context whose Err turns to Canceled on its n-th call:
// a signal that arrives at a known point of the work.
type countdownCtx struct {
	context.Context
	n atomic.Int64
}

func (c *countdownCtx) Err() error {
	if c.n.Add(-1) <= 0 {
		return context.Canceled
	}
	return nil
}

// TestTokenize_Interrupted: tollgate tokenize stops once its context ends
// (main cancels it on SIGINT and SIGTERM), while it renders a chat
// template and while it waits for standard input.
func TestTokenize_Interrupted(t *testing.T) {
	dir := modelDir(t)
	tmpl, err := os.ReadFile("../../extproc/request/tokenize/testdata/deepseek-v3.jinja")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), tmpl, 0o644); err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	body.WriteString(`{"model":"m","messages":[`)
	for range 20_000 {
		body.WriteString(`{"role":"system","content":"be brief and kind to everyone"},`)
	}
	body.WriteString(`{"role":"user","content":"hi"}]}`)
	args := []string{"tokenize", "--model-tokenizer", "m=hf:" + dir}

	old := stdin
	defer func() { stdin = old }()
	stdin = strings.NewReader(body.String())
	ctx := &countdownCtx{Context: t.Context()}
	ctx.n.Store(100)
	var out, errb bytes.Buffer
	if code := run(ctx, args, &out, &errb); code != 1 || out.Len() != 0 || !strings.Contains(errb.String(), "interrupted: context canceled") {
		t.Errorf("interrupted render: code %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if n := ctx.n.Load(); n > 0 {
		t.Errorf("the render read its context %d times, want it stopped at the 100th", 100-n)
	}

	pr, pw := io.Pipe() // standard input that never ends
	defer pw.Close()
	stdin = pr
	done, cancel := context.WithCancel(t.Context())
	cancel()
	out.Reset()
	errb.Reset()
	if code := run(done, args, &out, &errb); code != 1 || out.Len() != 0 || !strings.Contains(errb.String(), "interrupted while reading the request body") {
		t.Errorf("interrupted read: code %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}
