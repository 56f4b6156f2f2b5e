package mockworker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/test/mockworker"
)

// fast is a configuration that finishes small requests in well under a
// millisecond.
var fast = mockworker.Config{Model: "m", Speed: 1000}

func TestWorker_CompletionJSONAndRecord(t *testing.T) {
	w := mockworker.Start(t, fast)
	c := newClient(t, w.URL())
	resp := c.post(t.Context(), mockworker.PathCompletions,
		map[string]any{"model": "m", "prompt": "hello world!", "max_tokens": 5},
		"X-Request-Id", "req-1", "X-Gateway-Destination-Endpoint", "10.0.0.1:8000", "X-Smg-Priority", "bulk")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	if got := resp.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("content type %q, want application/json", got)
	}
	if got := resp.Header.Get("X-Request-Id"); got != "req-1" {
		t.Errorf("x-request-id %q, want req-1 echoed", got)
	}
	if got := resp.Header.Get(mockworker.HeaderWorkerID); got != mockworker.DefaultID {
		t.Errorf("worker id header %q, want %q", got, mockworker.DefaultID)
	}
	body := decodeBody[completionJSON](t, resp)
	if body.ID != "cmpl-req-1" || body.Object != "text_completion" || body.Model != "m" || body.Created == 0 {
		t.Errorf("envelope %+v, want id cmpl-req-1, object text_completion, model m, created set", body)
	}
	if len(body.Choices) != 1 || body.Choices[0].Text != mockworker.FillerText(5) ||
		body.Choices[0].FinishReason == nil || *body.Choices[0].FinishReason != "length" {
		t.Fatalf("choices %+v, want one with the 5 filler tokens and finish reason length", body.Choices)
	}
	// "hello world!" is 12 bytes: 3 tokens.
	if diff := cmp.Diff(&usageJSON{PromptTokens: 3, CompletionTokens: 5, TotalTokens: 8}, body.Usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}

	rec, ok := w.Record("req-1")
	if !ok {
		t.Fatal("no record for req-1")
	}
	if got := rec.Header.Get("X-Gateway-Destination-Endpoint"); got != "10.0.0.1:8000" {
		t.Errorf("recorded routing header %q, want 10.0.0.1:8000", got)
	}
	if rec.Endpoint != mockworker.PathCompletions || rec.Stream || rec.PromptTokens != 3 || rec.MaxTokens != 5 ||
		rec.CompletionTokens != 5 || rec.Outcome != mockworker.OutcomeFinished {
		t.Errorf("record %+v, want a finished non-streamed completion of 3+5 tokens", rec)
	}
	if rec.Arrival.IsZero() || rec.Admitted.Before(rec.Arrival) || rec.FirstToken.Before(rec.Admitted) || rec.Finish.Before(rec.FirstToken) {
		t.Errorf("record times out of order: arrival %v admitted %v first %v finish %v", rec.Arrival, rec.Admitted, rec.FirstToken, rec.Finish)
	}
}

func TestWorker_ChatJSONWithGeneratedID(t *testing.T) {
	w := mockworker.Start(t, fast)
	c := newClient(t, w.URL())
	resp := c.post(t.Context(), mockworker.PathChatCompletions, map[string]any{
		"messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 3,
	})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	body := decodeBody[completionJSON](t, resp)
	wantID := mockworker.DefaultID + "-1"
	if body.ID != "chatcmpl-"+wantID || body.Object != "chat.completion" || body.Model != "m" {
		t.Errorf("envelope id %q object %q model %q, want chatcmpl-%s, chat.completion, m", body.ID, body.Object, body.Model, wantID)
	}
	if len(body.Choices) != 1 || body.Choices[0].Message == nil ||
		*body.Choices[0].Message != (messageJSON{Role: "assistant", Content: mockworker.FillerText(3)}) {
		t.Fatalf("choices %+v, want one assistant message of 3 filler tokens", body.Choices)
	}
	wantPrompt := len(mockworker.Tokenize(mockworker.RenderChat([]mockworker.ChatMessage{{Role: "user", Content: "hi"}})))
	if body.Usage == nil || body.Usage.PromptTokens != wantPrompt || body.Usage.CompletionTokens != 3 {
		t.Errorf("usage %+v, want %d prompt and 3 completion tokens", body.Usage, wantPrompt)
	}
	if _, ok := w.Record(wantID); !ok {
		t.Errorf("no record under the generated id %q", wantID)
	}
}

func TestWorker_StreamedCompletionSSE(t *testing.T) {
	for _, includeUsage := range []bool{false, true} {
		name := "without usage"
		if includeUsage {
			name = "with include_usage"
		}
		t.Run(name, func(t *testing.T) {
			w := mockworker.Start(t, fast)
			c := newClient(t, w.URL())
			req := map[string]any{"prompt": ids(0, 40), "max_tokens": 4, "stream": true}
			if includeUsage {
				req["stream_options"] = map[string]bool{"include_usage": true}
			}
			resp := c.post(t.Context(), mockworker.PathCompletions, req, "X-Request-Id", "s1")
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d content type %q, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			events := newSSEReader(resp.Body).all(t)
			wantEvents := 4 + 1
			if includeUsage {
				wantEvents++
			}
			if len(events) != wantEvents || events[len(events)-1] != "[DONE]" {
				t.Fatalf("events %q, want %d ending with [DONE]", events, wantEvents)
			}
			for i, ev := range events[:4] {
				var raw map[string]json.RawMessage
				if err := json.Unmarshal([]byte(ev), &raw); err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				if u, ok := raw["usage"]; ok != includeUsage || (ok && string(u) != "null") {
					t.Errorf("event %d usage %q present %v, want null present only with include_usage", i, u, ok)
				}
				var chunk completionJSON
				if err := json.Unmarshal([]byte(ev), &chunk); err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				if chunk.ID != "cmpl-s1" || chunk.Object != "text_completion" || len(chunk.Choices) != 1 ||
					chunk.Choices[0].Text != mockworker.FillerToken(i) {
					t.Errorf("event %d = %s, want token %q", i, ev, mockworker.FillerToken(i))
				}
				last := i == 3
				if fr := chunk.Choices[0].FinishReason; (fr != nil) != last || (last && *fr != "length") {
					t.Errorf("event %d finish reason %v, want length only on the last token", i, fr)
				}
			}
			if includeUsage {
				var final completionJSON
				if err := json.Unmarshal([]byte(events[4]), &final); err != nil {
					t.Fatal(err)
				}
				if final.Choices == nil || len(final.Choices) != 0 {
					t.Errorf("usage chunk choices %v, want an empty array", final.Choices)
				}
				if diff := cmp.Diff(&usageJSON{PromptTokens: 40, CompletionTokens: 4, TotalTokens: 44}, final.Usage); diff != "" {
					t.Errorf("usage (-want +got):\n%s", diff)
				}
			}
			if rec, _ := w.Record("s1"); !rec.Stream || rec.Outcome != mockworker.OutcomeFinished {
				t.Errorf("record stream %v outcome %v, want a finished stream", rec.Stream, rec.Outcome)
			}
		})
	}
}

func TestWorker_StreamedChatSSE(t *testing.T) {
	w := mockworker.Start(t, fast)
	c := newClient(t, w.URL())
	resp := c.post(t.Context(), mockworker.PathChatCompletions, map[string]any{
		"model": "m", "messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 2,
		"stream": true, "stream_options": map[string]bool{"include_usage": true},
	})
	events := newSSEReader(resp.Body).all(t)
	if len(events) != 5 || events[4] != "[DONE]" {
		t.Fatalf("events %q, want role, 2 tokens, usage, [DONE]", events)
	}
	wantDeltas := []messageJSON{{Role: "assistant"}, {Content: mockworker.FillerToken(0)}, {Content: mockworker.FillerToken(1)}}
	for i, want := range wantDeltas {
		var chunk completionJSON
		if err := json.Unmarshal([]byte(events[i]), &chunk); err != nil {
			t.Fatal(err)
		}
		if chunk.Object != "chat.completion.chunk" || len(chunk.Choices) != 1 || chunk.Choices[0].Delta == nil ||
			*chunk.Choices[0].Delta != want {
			t.Errorf("event %d = %s, want a chunk with delta %+v", i, events[i], want)
		}
	}
	var final completionJSON
	if err := json.Unmarshal([]byte(events[3]), &final); err != nil {
		t.Fatal(err)
	}
	if final.Usage == nil || final.Usage.CompletionTokens != 2 {
		t.Errorf("usage chunk %s, want 2 completion tokens", events[3])
	}
}

func TestWorker_SecondIdenticalPromptHitsCache(t *testing.T) {
	// 400 tokens at 1000 tokens/s × 10: 40 ms of prefill when cold.
	w := mockworker.Start(t, mockworker.Config{Model: "m", PrefillTokensPerSec: 1000, DecodeTokensPerSec: 1000, Speed: 10, BlockSize: 16})
	c := newClient(t, w.URL())
	var prefill [2]time.Duration
	for i, id := range []string{"cold", "warm"} {
		resp := c.post(t.Context(), mockworker.PathCompletions, map[string]any{"prompt": ids(0, 400), "max_tokens": 1}, "X-Request-Id", id)
		body := decodeBody[completionJSON](t, resp)
		want := 0
		if i == 1 {
			want = 384 // 24 full blocks within the first 399 tokens.
		}
		if body.Usage == nil || body.Usage.PromptTokensDetails.CachedTokens != want {
			t.Fatalf("%s: usage %+v, want %d cached tokens", id, body.Usage, want)
		}
		rec, _ := w.Record(id)
		prefill[i] = rec.FirstToken.Sub(rec.Admitted)
	}
	if prefill[0] < 40*time.Millisecond {
		t.Errorf("cold prefill took %v, want at least 40ms", prefill[0])
	}
	if prefill[1] >= prefill[0] {
		t.Errorf("warm prefill took %v, want less than the cold %v", prefill[1], prefill[0])
	}
}

func TestWorker_TimingScalesWithSpeed(t *testing.T) {
	// 400 prompt tokens at 1000/s and 20 more tokens at 100/s: 400 ms + 200 ms at speed 1.
	for _, speed := range []float64{10, 20} {
		w := mockworker.Start(t, mockworker.Config{PrefillTokensPerSec: 1000, DecodeTokensPerSec: 100, Speed: speed})
		c := newClient(t, w.URL())
		resp := c.post(t.Context(), mockworker.PathCompletions, map[string]any{"prompt": ids(0, 400), "max_tokens": 21}, "X-Request-Id", "t")
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
		rec, _ := w.Record("t")
		wantFirst := time.Duration(float64(400*time.Millisecond) / speed)
		wantTotal := time.Duration(float64(600*time.Millisecond) / speed)
		const slack = time.Second // Generous: shared machines stall.
		if got := rec.FirstToken.Sub(rec.Arrival); got < wantFirst || got > wantFirst+slack {
			t.Errorf("speed %v: time to first token %v, want %v (up to %v late)", speed, got, wantFirst, slack)
		}
		if got := rec.Finish.Sub(rec.Arrival); got < wantTotal || got > wantTotal+slack {
			t.Errorf("speed %v: total %v, want %v (up to %v late)", speed, got, wantTotal, slack)
		}
	}
}

func TestWorker_ConcurrencyBoundedByMaxNumSeqs(t *testing.T) {
	w := mockworker.Start(t, mockworker.Config{MaxNumSeqs: 4, PrefillTokensPerSec: 1000, DecodeTokensPerSec: 1000, Speed: 10})
	c := newClient(t, w.URL())
	var wg sync.WaitGroup
	statuses := make([]int, 16)
	for i := range statuses {
		wg.Go(func() {
			resp := c.post(t.Context(), mockworker.PathCompletions, map[string]any{"prompt": ids(i*1000, 100), "max_tokens": 10})
			_, _ = io.Copy(io.Discard, resp.Body)
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, s := range statuses {
		if s != http.StatusOK {
			t.Errorf("request %d: status %d", i, s)
		}
	}
	st := w.Stats()
	if st.MaxRunning != 4 || st.Finished != 16 || st.Running != 0 || st.Waiting != 0 {
		t.Errorf("stats %+v, want max running exactly 4 and all 16 finished", st)
	}
}

func TestWorker_WaitingQueueIsFIFO(t *testing.T) {
	gate := mockworker.NewGate()
	w := mockworker.Start(t, mockworker.Config{MaxNumSeqs: 1, Speed: 1000, Hold: gate.Wait})
	c := newClient(t, w.URL())
	order := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	for i, id := range order {
		wg.Go(func() {
			resp := c.post(t.Context(), mockworker.PathCompletions, map[string]any{"prompt": "x", "max_tokens": 1}, "X-Request-Id", id)
			_, _ = io.Copy(io.Discard, resp.Body)
		})
		await(t, w, "arrival of "+id, func(s mockworker.Stats) bool { return s.Received == i+1 })
	}
	gate.Open()
	wg.Wait()
	recs := w.Records()
	if len(recs) != len(order) {
		t.Fatalf("%d records, want %d", len(recs), len(order))
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].ID != order[i] || recs[i].Admitted.Before(recs[i-1].Finish) {
			t.Errorf("record %d: %s admitted %v, want %s admitted after %s finished (%v)",
				i, recs[i].ID, recs[i].Admitted, order[i], recs[i-1].ID, recs[i-1].Finish)
		}
	}
}

func TestWorker_ClientDisconnectFreesSlot(t *testing.T) {
	// One slot; the first request would decode for 100 s.
	w := mockworker.Start(t, mockworker.Config{MaxNumSeqs: 1, DecodeTokensPerSec: 10})
	c := newClient(t, w.URL())
	ctx, cancel := context.WithCancel(t.Context())
	resp := c.post(ctx, mockworker.PathCompletions, map[string]any{"prompt": "x", "max_tokens": 1000, "stream": true}, "X-Request-Id", "gone")
	if _, err := newSSEReader(resp.Body).next(); err != nil {
		t.Fatalf("first event: %v", err)
	}
	cancel()
	await(t, w, "the cancelled stream to free its slot", func(s mockworker.Stats) bool { return s.Running == 0 && s.Cancelled == 1 })
	rec, _ := w.Record("gone")
	if rec.Outcome != mockworker.OutcomeCancelled || rec.CompletionTokens >= 1000 {
		t.Errorf("record outcome %v with %d tokens, want cancelled early", rec.Outcome, rec.CompletionTokens)
	}
	next := c.post(t.Context(), mockworker.PathCompletions, map[string]any{"prompt": "x", "max_tokens": 1})
	if next.StatusCode != http.StatusOK {
		t.Errorf("next request: status %d, want 200 on the freed slot", next.StatusCode)
	}
}

func TestWorker_MetricsExposition(t *testing.T) {
	gate := mockworker.NewGate()
	w := mockworker.Start(t, mockworker.Config{Model: "m", MaxNumSeqs: 1, Speed: 1000, BlockSize: 16, CacheBlocks: 100, Hold: gate.Wait})
	c := newClient(t, w.URL())
	// Two finished requests of 40 token ids and 5 output tokens; the second hits 32 cached tokens.
	gate.Release(2)
	for range 2 {
		resp := c.post(t.Context(), mockworker.PathCompletions, map[string]any{"prompt": ids(0, 40), "max_tokens": 5})
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	// Then one held in its slot and one waiting behind it.
	for range 2 {
		c.post(t.Context(), mockworker.PathCompletions, map[string]any{"prompt": "x", "max_tokens": 1, "stream": true})
	}
	await(t, w, "one held and one waiting", func(s mockworker.Stats) bool { return s.Held == 1 && s.Waiting == 1 })

	status, text := c.get(mockworker.PathMetrics)
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	const l = `{engine="0",model_name="m"}`
	for _, want := range []string{
		"vllm:num_requests_running" + l + " 1",
		"vllm:num_requests_waiting" + l + " 1",
		"vllm:prompt_tokens_total" + l + " 80",
		"vllm:generation_tokens_total" + l + " 10",
		"vllm:prefix_cache_queries_total" + l + " 80",
		"vllm:prefix_cache_hits_total" + l + " 32",
		"vllm:kv_cache_usage_perc" + l + " 0.02",
		`vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 2`,
		"vllm:time_to_first_token_seconds_count" + l + " 2",
		"vllm:e2e_request_latency_seconds_count" + l + " 2",
		"# TYPE vllm:prompt_tokens_total counter",
		"# TYPE vllm:num_requests_running gauge",
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("exposition lacks %q:\n%s", want, text)
		}
	}
	gate.Open()
	await(t, w, "all to finish", func(s mockworker.Stats) bool { return s.Finished == 4 })
}

func TestWorker_ModelsAndHealth(t *testing.T) {
	w := mockworker.Start(t, mockworker.Config{Model: "m", MaxModelLen: 4096})
	c := newClient(t, w.URL())
	status, body := c.get(mockworker.PathModels)
	if status != http.StatusOK {
		t.Fatalf("models: status %d", status)
	}
	var models struct {
		Object string `json:"object"`
		Data   []struct {
			ID          string `json:"id"`
			Object      string `json:"object"`
			OwnedBy     string `json:"owned_by"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &models); err != nil {
		t.Fatal(err)
	}
	if models.Object != "list" || len(models.Data) != 1 || models.Data[0].ID != "m" ||
		models.Data[0].Object != "model" || models.Data[0].MaxModelLen != 4096 {
		t.Errorf("models = %s, want one model m with max_model_len 4096", body)
	}
	if status, body := c.get(mockworker.PathHealth); status != http.StatusOK || body != "" {
		t.Errorf("health = %d %q, want 200 and an empty body", status, body)
	}
}

func TestWorker_HTTPErrors(t *testing.T) {
	cfg := fast
	cfg.MaxBodyBytes = 1024
	w := mockworker.Start(t, cfg)
	c := newClient(t, w.URL())
	tests := []struct {
		name       string
		path       string
		body       string
		wantStatus int
		wantType   string
	}{
		{name: "bad JSON", path: mockworker.PathCompletions, body: "{", wantStatus: 400, wantType: "BadRequestError"},
		{name: "unknown model", path: mockworker.PathChatCompletions, body: `{"model":"other","messages":[{"role":"user","content":"a"}]}`, wantStatus: 404, wantType: "NotFoundError"},
		{name: "body too large", path: mockworker.PathCompletions, body: `{"prompt":"` + strings.Repeat("a", 2048) + `"}`, wantStatus: 413, wantType: "BadRequestError"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := c.post(t.Context(), tt.path, tt.body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			e := decodeBody[errorJSON](t, resp)
			if e.Error.Code != tt.wantStatus || e.Error.Type != tt.wantType || e.Error.Message == "" {
				t.Errorf("error body %+v, want code %d type %s and a message", e.Error, tt.wantStatus, tt.wantType)
			}
		})
	}
	if status, _ := c.get(mockworker.PathCompletions); status != http.StatusMethodNotAllowed {
		t.Errorf("GET %s = %d, want 405", mockworker.PathCompletions, status)
	}
	if st := w.Stats(); st.Received != 0 {
		t.Errorf("rejected requests reached the engine: %+v", st)
	}
}

func TestWorker_CloseCancelsInFlightRequests(t *testing.T) {
	w, err := mockworker.New(mockworker.Config{DecodeTokensPerSec: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.Handler())
	defer srv.Close()
	c := newClient(t, srv.URL)

	type answer struct {
		status int
		body   errorJSON
	}
	done := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+mockworker.PathCompletions,
			strings.NewReader(`{"prompt":"x","max_tokens":100}`))
		resp, err := c.hc.Do(req)
		if err != nil {
			done <- answer{}
			return
		}
		defer func() { _ = resp.Body.Close() }()
		var a answer
		a.status = resp.StatusCode
		_ = json.NewDecoder(resp.Body).Decode(&a.body)
		done <- a
	}()
	await(t, w, "the request to run", func(s mockworker.Stats) bool { return s.Running == 1 })
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	a := <-done
	if a.status != http.StatusServiceUnavailable || !strings.Contains(a.body.Error.Message, "shutting down") {
		t.Errorf("in-flight request got %d %+v, want 503 shutting down", a.status, a.body)
	}
	if st := w.Stats(); st.Cancelled != 1 || st.Running != 0 {
		t.Errorf("stats %+v, want the request cancelled", st)
	}
	if status, _ := c.get(mockworker.PathHealth); status != http.StatusServiceUnavailable {
		t.Errorf("health after Close = %d, want 503", status)
	}
	resp := c.post(t.Context(), mockworker.PathCompletions, `{"prompt":"x"}`)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("request after Close = %d, want 503", resp.StatusCode)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

func TestWorker_CloseEndsStreamsAndListener(t *testing.T) {
	w, err := mockworker.New(mockworker.Config{DecodeTokensPerSec: 1})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := w.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") || w.Addr() != addr || w.URL() != "http://"+addr {
		t.Errorf("addr %q, Addr %q, URL %q; want one bound loopback address", addr, w.Addr(), w.URL())
	}
	if _, err := w.Listen("127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "already listening") {
		t.Errorf("second Listen = %v, want already listening", err)
	}
	c := newClient(t, w.URL())
	resp := c.post(t.Context(), mockworker.PathCompletions, map[string]any{"prompt": "x", "max_tokens": 100, "stream": true})
	r := newSSEReader(resp.Body)
	if _, err := r.next(); err != nil {
		t.Fatalf("first token: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var last string
	for {
		p, err := r.next()
		if err != nil {
			break // The stream ends: with an error event first, or cut.
		}
		last = p
	}
	if last == "[DONE]" {
		t.Errorf("stream cut by Close ended with [DONE], want an incomplete stream")
	}
	if _, err := w.Listen("127.0.0.1:0"); err == nil {
		t.Error("Listen after Close succeeded")
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = conn.Close()
		t.Error("listener still accepts after Close")
	}
}

func TestNew_RejectsInvalidConfig(t *testing.T) {
	_, err := mockworker.New(mockworker.Config{MaxNumSeqs: -1})
	if err == nil || !strings.Contains(err.Error(), "max num seqs must not be negative") {
		t.Errorf("New = %v, want the validation error", err)
	}
}

func TestWorker_RecordsKeepNewest(t *testing.T) {
	w := mockworker.Start(t, mockworker.Config{Speed: 1000, MaxRecords: 2})
	c := newClient(t, w.URL())
	for _, id := range []string{"a", "b", "c"} {
		resp := c.post(t.Context(), mockworker.PathCompletions, `{"prompt":"x","max_tokens":1}`, "X-Request-Id", id)
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	var got []string
	for _, r := range w.Records() {
		got = append(got, r.ID)
	}
	if diff := cmp.Diff([]string{"b", "c"}, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if _, ok := w.Record("a"); ok {
		t.Error("Record(a) found a dropped record")
	}
}

func TestAwait_ReturnsContextCause(t *testing.T) {
	w := mockworker.Start(t, fast)
	ctx, cancel := context.WithCancelCause(t.Context())
	cause := errors.New("test over")
	cancel(cause)
	if err := w.Await(ctx, func(s mockworker.Stats) bool { return s.Finished > 0 }); !errors.Is(err, cause) {
		t.Errorf("Await = %v, want the context's cause", err)
	}
}
