package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/extproc/request/tokenize"
)

// heavyTokenizer is an exact tokenizer whose large prompts each wait for
// one send on release (or their context), counting how many run at once.
// Small prompts count one token at once.
type heavyTokenizer struct {
	release             chan struct{}
	running, maxRunning atomic.Int64
}

func (h *heavyTokenizer) EncodeContext(ctx context.Context, _, text string, dst []uint32) ([]uint32, int, error) {
	if len(text) < heavyPromptBytes {
		return append(dst, 1), 1, nil
	}
	n := h.running.Add(1)
	defer h.running.Add(-1)
	for {
		if m := h.maxRunning.Load(); n <= m || h.maxRunning.CompareAndSwap(m, n) {
			break
		}
	}
	select {
	case <-h.release:
		return append(dst, 1, 2), 2, nil
	case <-ctx.Done():
		return dst, 0, ctx.Err()
	}
}

func (h *heavyTokenizer) Encode(string, string, []uint32) ([]uint32, int) {
	panic("the planner encodes with a context")
}
func (h *heavyTokenizer) Exact() bool              { return true }
func (h *heavyTokenizer) Name() string             { return "heavy" }
func (h *heavyTokenizer) Observe(string, int, int) {}

type tokensResult struct {
	n     int
	exact bool
}

// TestPromptTokenizer_BoundsHeavyWork: heavy prompts run in at most the
// slots, at most maxWaiting wait for one, at most heavyWait, and the rest
// are priced by the estimate at once; small prompts never wait.
func TestPromptTokenizer_BoundsHeavyWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tok := &heavyTokenizer{release: make(chan struct{})}
		reg := prometheus.NewRegistry()
		pt := newPromptTokenizer(tok, reg, nil)
		pt.slots, pt.maxWaiting = make(chan struct{}, 2), 3
		heavy := &openai.Request{Model: "m", Text: strings.Repeat("x", heavyPromptBytes)}
		estimate := estimateTokens(heavy)

		var mu sync.Mutex
		var results []tokensResult
		start := func(n int) {
			for range n {
				go func() {
					_, n, exact, rej := pt.tokens(t.Context(), heavy)
					if rej != nil {
						t.Error(rej)
					}
					mu.Lock()
					results = append(results, tokensResult{n, exact})
					mu.Unlock()
				}()
			}
			synctest.Wait()
		}
		snapshot := func() []tokensResult {
			mu.Lock()
			defer mu.Unlock()
			return append([]tokensResult(nil), results...)
		}
		start(2) // take both slots
		start(3) // wait for one
		if r := snapshot(); tok.running.Load() != 2 || pt.waiting.Load() != 3 || len(r) != 0 {
			t.Fatalf("running %d, waiting %d, done %d: want 2, 3, 0", tok.running.Load(), pt.waiting.Load(), len(r))
		}
		start(2) // no room to wait: estimated at once
		if results := snapshot(); len(results) != 2 || results[0] != (tokensResult{estimate, false}) || results[1] != results[0] {
			t.Fatalf("beyond the waiters: %v, want 2 estimates of %d", results, estimate)
		}
		if _, n, exact, _ := pt.tokens(t.Context(), &openai.Request{Model: "m", Text: "small"}); n != 1 || !exact {
			t.Errorf("a small prompt while the slots are busy: %d tokens, exact %v", n, exact)
		}

		tok.release <- struct{}{} // one heavy ends: a waiter takes its slot
		synctest.Wait()
		if results := snapshot(); tok.running.Load() != 2 || pt.waiting.Load() != 2 || len(results) != 3 || results[2] != (tokensResult{2, true}) {
			t.Fatalf("after a release: running %d, waiting %d, results %v", tok.running.Load(), pt.waiting.Load(), results)
		}
		time.Sleep(heavyWait) // the other two waiters give up
		synctest.Wait()
		if results := snapshot(); pt.waiting.Load() != 0 || len(results) != 5 || results[3] != (tokensResult{estimate, false}) {
			t.Fatalf("after the wait: waiting %d, results %v", pt.waiting.Load(), results)
		}
		tok.release <- struct{}{}
		tok.release <- struct{}{}
		synctest.Wait()
		if n := len(snapshot()); tok.maxRunning.Load() != 2 || n != 7 {
			t.Errorf("at most %d heavy tokenizations ran at once, %d results; want 2, 7", tok.maxRunning.Load(), n)
		}
		if got := testutil.ToFloat64(pt.estimated.WithLabelValues(estimatedBusy)); got != 4 {
			t.Errorf("estimated busy %v, want 4", got)
		}
	})
}

// helperTokenizer is an exact tokenizer that asks its context for an
// encode helper (tokenize.TakeHelper) and holds what it got until release.
type helperTokenizer struct {
	heavyTokenizer
	granted atomic.Int64
}

func (h *helperTokenizer) EncodeContext(ctx context.Context, model, text string, dst []uint32) ([]uint32, int, error) {
	if release, ok := tokenize.TakeHelper(ctx); ok {
		h.granted.Add(1)
		defer release()
	}
	return h.heavyTokenizer.EncodeContext(ctx, model, text, dst)
}

// TestPromptTokenizer_HelpersShareSlots: a heavy prompt's encode helper
// takes a free heavy slot, never waits for one, and gives it back; a small
// prompt gets none.
func TestPromptTokenizer_HelpersShareSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tok := &helperTokenizer{heavyTokenizer: heavyTokenizer{release: make(chan struct{})}}
		pt := newPromptTokenizer(tok, prometheus.NewRegistry(), nil)
		pt.slots = make(chan struct{}, 3)
		heavy := &openai.Request{Model: "m", Text: strings.Repeat("x", heavyPromptBytes)}
		for range 2 {
			go func() {
				if _, _, _, rej := pt.tokens(t.Context(), heavy); rej != nil {
					t.Error(rej)
				}
			}()
			synctest.Wait()
		}
		// The first took a slot and a helper's; the second a slot only.
		if got, used := tok.granted.Load(), len(pt.slots); got != 1 || used != 3 {
			t.Fatalf("helpers granted %d, slots in use %d: want 1, 3", got, used)
		}
		if _, _, exact, _ := pt.tokens(t.Context(), &openai.Request{Model: "m", Text: "small"}); !exact || tok.granted.Load() != 1 {
			t.Errorf("a small prompt: exact %v, helpers granted %d", exact, tok.granted.Load())
		}
		tok.release <- struct{}{}
		tok.release <- struct{}{}
		synctest.Wait()
		if used := len(pt.slots); used != 0 {
			t.Errorf("%d slots still in use", used)
		}
	})
}

// TestPromptTokenizer_StreamEnds: a heavy prompt whose stream ends while
// it waits for a slot, or while it is tokenized, stops at once.
func TestPromptTokenizer_StreamEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tok := &heavyTokenizer{release: make(chan struct{})}
		pt := newPromptTokenizer(tok, prometheus.NewRegistry(), nil)
		pt.slots = make(chan struct{}, 1)
		heavy := &openai.Request{Model: "m", Text: strings.Repeat("x", heavyPromptBytes)}
		running, cancelRunning := context.WithCancel(t.Context())
		waiting, cancelWaiting := context.WithCancel(t.Context())
		var done atomic.Int64
		for _, ctx := range []context.Context{running, waiting} {
			go func() {
				if _, n, exact, _ := pt.tokens(ctx, heavy); n != estimateTokens(heavy) || exact {
					t.Errorf("a cancelled prompt: %d tokens, exact %v: want the estimate", n, exact)
				}
				done.Add(1)
			}()
			synctest.Wait()
		}
		cancelWaiting()
		synctest.Wait()
		cancelRunning()
		synctest.Wait()
		if done.Load() != 2 || tok.running.Load() != 0 || pt.waiting.Load() != 0 {
			t.Errorf("done %d, running %d, waiting %d", done.Load(), tok.running.Load(), pt.waiting.Load())
		}
		if got := testutil.ToFloat64(pt.cancelled); got != 2 {
			t.Errorf("cancelled %v, want 2", got)
		}
	})
}

// quadraticModel is a tokenizer mapping whose model "ds" has DeepSeek V3's
// chat template, which concatenates every system message.
func quadraticModel(t *testing.T) Tokenizer {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile("../request/tokenize/testdata/llama3-style.json")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile("../request/tokenize/testdata/deepseek-v3.jinja")
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"tokenizer.json": data, "tokenizer_config.json": []byte(`{"bos_token":"<|begin_of_text|>"}`), "chat_template.jinja": tmpl} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := tokenize.NewFromSpecs("estimate", []string{"ds=hf:" + dir})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// systemFloodBody is a chat request of n short system messages.
func systemFloodBody(n int) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	body := struct {
		Model    string `json:"model"`
		Messages []msg  `json:"messages"`
	}{Model: "ds"}
	for range n {
		body.Messages = append(body.Messages, msg{"system", strings.Repeat("s", 28)})
	}
	body.Messages = append(body.Messages, msg{"user", "hi"})
	out, _ := json.Marshal(body)
	return out
}

// TestPlan_RenderBudget: a conversation whose chat template exceeds the
// render budget is priced by the estimate of its text, counted, and
// logged once; tollgate tokenize says the same.
func TestPlan_RenderBudget(t *testing.T) {
	tok := quadraticModel(t)
	var logs bytes.Buffer
	p := newTestPlanner(t, Config{Tokenizer: tok, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	body := systemFloodBody(5000)
	r, err := openai.Parse(openai.KindChatCompletions, body)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		pl, rej := p.Build(t.Context(), t0, 1, openai.KindChatCompletions, headers(), Identity{}, body, false, nil)
		if rej != nil {
			t.Fatal(rej)
		}
		if pl.Exact || pl.Estimate != estimateTokens(r) || len(pl.Hashes) == 0 {
			t.Errorf("plan exact %v, estimate %d, %d hashes: want the estimate %d and byte hashes", pl.Exact, pl.Estimate, len(pl.Hashes), estimateTokens(r))
		}
	}
	if got := testutil.ToFloat64(p.prompts.estimated.WithLabelValues(estimatedRenderBudget)); got != 2 {
		t.Errorf("estimated render_budget %v, want 2", got)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs.String())
	}
	got, err := CountPrompt(t.Context(), tok, openai.KindChatCompletions, body, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got.Exact || got.Tokens != nil || got.Count != estimateTokens(r) || !strings.Contains(got.Estimated, "render budget exceeded") {
		t.Errorf("CountPrompt %+v", got)
	}
}
