package tokenize

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tollgate/tollgate/test/tokref"
)

// deepSeekV3 compiles DeepSeek V3's chat template, which concatenates
// every system message onto one growing string.
func deepSeekV3(t testing.TB) *ChatTemplate {
	t.Helper()
	src, err := os.ReadFile("testdata/deepseek-v3.jinja")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewChatTemplate(string(src), map[string]string{"bos_token": "<｜begin▁of▁sentence｜>"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// systemFlood is n short system messages and a user turn: about 60 bytes
// of JSON each, 137k of them in an 8 MiB body.
func systemFlood(n int) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	msgs := make([]msg, 0, n+1)
	for range n {
		msgs = append(msgs, msg{"system", strings.Repeat("s", 28)})
	}
	msgs = append(msgs, msg{"user", "hi"})
	out, _ := json.Marshal(msgs)
	return out
}

// TestRenderBudget_DeepSeekSystemFlood: 100k short system messages cost
// DeepSeek V3's template work quadratic in their number (about 150 GB of
// string copies, minutes of CPU, before the budget). The render stops once
// it has done its budget's worth, whatever the rest would have cost.
func TestRenderBudget_DeepSeekSystemFlood(t *testing.T) {
	c := deepSeekV3(t)
	msgs := systemFlood(100_000)
	_, cost, err := c.RenderContext(t.Context(), msgs, nil)
	var be *BudgetError
	if !errors.As(err, &be) || !errors.Is(err, ErrRenderBudget) || be.Limit != "bytes" {
		t.Fatalf("err %v, want a bytes *BudgetError", err)
	}
	maxBytes := int64(RenderBytesPerByte*len(msgs) + RenderBaseBytes)
	if be.Max != maxBytes || be.Input != int64(len(msgs)) {
		t.Errorf("budget %+v, want max %d for %d input bytes", be, maxBytes, len(msgs))
	}
	// The charge that crossed the budget is one value: at most the
	// concatenation of every system message, the input's size.
	if cost.Bytes <= maxBytes || cost.Bytes > maxBytes+int64(len(msgs)) {
		t.Errorf("render did %d bytes of work, want just over the budget %d", cost.Bytes, maxBytes)
	}
	if cost.Steps > int64(RenderStepsPerByte*len(msgs)+RenderBaseSteps) {
		t.Errorf("render did %d steps", cost.Steps)
	}
	if !strings.Contains(err.Error(), "template bytes") {
		t.Errorf("error %q does not name the limit", err)
	}
}

// TestRenderBudget_FewSystemMessages: the same template with a usual
// conversation stays far within its budget.
func TestRenderBudget_FewSystemMessages(t *testing.T) {
	c := deepSeekV3(t)
	msgs := []byte(`[{"role":"system","content":"` + strings.Repeat("be brief. ", 5000) + `"},{"role":"system","content":"and kind"},{"role":"user","content":"hi"}]`)
	out, cost, err := c.RenderContext(t.Context(), msgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out, "and kind<｜User｜>hi<｜Assistant｜>") {
		t.Errorf("render %q", out[len(out)-60:])
	}
	if cost.Bytes > RenderBaseBytes/10 || cost.Steps > RenderBaseSteps/10 {
		t.Errorf("cost %+v", cost)
	}
}

// countdownCtx is a context whose Err turns to Canceled on its n-th call:
// a cancellation at a known point of the work.
type countdownCtx struct {
	context.Context
	n atomic.Int64
}

func newCountdown(n int64) *countdownCtx {
	c := &countdownCtx{Context: context.Background()}
	c.n.Store(n)
	return c
}

func (c *countdownCtx) Err() error {
	if c.n.Add(-1) <= 0 {
		return context.Canceled
	}
	return nil
}

// TestRender_StopsWhenCancelled: a render reads its context at every
// metered step and stops at the first one after it is done.
func TestRender_StopsWhenCancelled(t *testing.T) {
	c := deepSeekV3(t)
	msgs := systemFlood(50_000)
	ctx := newCountdown(1000)
	_, cost, err := c.RenderContext(ctx, msgs, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if n := ctx.n.Load(); n != 0 {
		t.Errorf("the context was read %d more times after it was done", -n)
	}
	if cost.Steps == 0 || cost.Bytes >= int64(RenderBytesPerByte*len(msgs)) {
		t.Errorf("cost %+v: want a render stopped midway", cost)
	}

	done, cancel := context.WithCancel(t.Context())
	cancel()
	if _, cost, err := c.RenderContext(done, msgs, nil); !errors.Is(err, context.Canceled) || cost.Steps != 0 {
		t.Errorf("a done context: %v after %d steps, want context.Canceled before the render", err, cost.Steps)
	}
}

// TestEncode_StopsWhenCancelled: encoding reads its context every
// cancelCheckWork of text or merges, returns dst as it was, and leaves no
// partial word in the pooled cache.
func TestEncode_StopsWhenCancelled(t *testing.T) {
	tok := loadFixture(t, "llama3-style.json")
	text := strings.Repeat("the quick brown fox jumps over the lazy dog. ", 40_000)
	want, _ := tok.Encode("m", text, nil)
	for _, checks := range []int64{1, 3, 10} {
		dst := []uint32{7}
		ids, n, err := tok.EncodeContext(newCountdown(checks), "m", text, dst)
		if !errors.Is(err, context.Canceled) || n != 0 || !slices.Equal(ids, dst) {
			t.Fatalf("after %d checks: %v, %d ids, want context.Canceled and dst unchanged", checks, err, n)
		}
	}
	// One word far longer than cancelCheckWork is cancelled in its
	// merges: the first check passes before them.
	word := strings.Repeat("the", 150_000)
	if _, _, err := tok.EncodeContext(newCountdown(2), "m", word, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("long word: %v", err)
	}
	if got, _ := tok.Encode("m", text, nil); !slices.Equal(got, want) {
		t.Error("ids changed after cancelled encodes")
	}
}

func loadFixture(t *testing.T, name string) *BPE {
	t.Helper()
	tok, err := LoadHF("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestEncodePromptContext_Errors: a budget or context error is returned
// as is, not as the client's refusal.
func TestEncodePromptContext_Errors(t *testing.T) {
	m := &HFModel{BPE: loadFixture(t, "llama3-style.json"), chat: deepSeekV3(t)}
	p := Prompt{Model: "m", Messages: systemFlood(100_000)}
	if _, _, err := EncodePromptContext(t.Context(), m, p, nil); !errors.Is(err, ErrRenderBudget) || strings.Contains(err.Error(), "cannot render") {
		t.Errorf("budget: %v", err)
	}
	if _, _, err := EncodePromptContext(newCountdown(5), m, p, nil); !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "cannot render") {
		t.Errorf("cancelled: %v", err)
	}
	p.Messages = []byte(`[{"role":"user","content":"hi"}]`)
	if _, n, err := EncodePromptContext(t.Context(), m, p, nil); err != nil || n == 0 {
		t.Errorf("small: %d ids, %v", n, err)
	}
}

// TestRenderBudget_ShippedTemplates: the shipped model families render
// their usual conversations, and floods of tiny turns, within an eighth of
// the budget.
func TestRenderBudget_ShippedTemplates(t *testing.T) {
	t.Parallel() // the long tests run beside the reference test's Node process
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var tiny []msg
	for i := range 20_001 {
		tiny = append(tiny, msg{[]string{"user", "assistant"}[i%2], "x"})
	}
	tinyTurns, _ := json.Marshal(tiny)
	toolCalls := []byte(`[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"},{"role":"user","content":"ok"}]`)
	tools := []byte(`[` + strings.Repeat(`{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"x":{"type":"integer"}}}}},`, 200) + `{"type":"function","function":{"name":"g"}}]`)
	for _, m := range benchModels {
		if m.name == "gpt-oss" {
			continue // no chat template
		}
		t.Run(m.name, func(t *testing.T) {
			tok, err := LoadHFDir(tokref.Model(t, m.pkg, m.template))
			if err != nil {
				t.Fatal(err)
			}
			for name, in := range map[string][2][]byte{
				"tiny turns": {tinyTurns, nil},
				"english":    {chatMessages(1 << 20), nil},
				"tool calls": {toolCalls, nil},
				"tools":      {toolCalls, tools},
			} {
				_, cost, err := tok.chat.RenderContext(t.Context(), in[0], in[1])
				if err != nil {
					if errors.Is(err, ErrRenderBudget) || !strings.Contains(err.Error(), "must alternate") {
						t.Errorf("%s: %v", name, err)
					}
					continue
				}
				n := len(in[0]) + len(in[1])
				if cost.Steps > (RenderStepsPerByte*int64(n)+RenderBaseSteps)/8 || cost.Bytes > (RenderBytesPerByte*int64(n)+RenderBaseBytes)/8 {
					t.Errorf("%s: cost %+v for %d input bytes, over an eighth of the budget", name, cost, n)
				}
			}
		})
	}
}
