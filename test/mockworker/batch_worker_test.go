package mockworker_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgate/tollgate/test/mockworker"
)

// batchedPD is a shared-batch configuration: in a bubble, a step of n
// tokens takes 10 ms + n × 0.1 ms and carries at most 100.
var batchedPD = mockworker.Config{Model: "m", MaxNumSeqs: 4, Batch: &mockworker.BatchConfig{
	MaxNumBatchedTokens: 100, StepOverhead: 10 * time.Millisecond, TokensPerSec: 10000,
}}

func TestWorker_BatchedPrefillThenDecode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet(t)
		pcfg, dcfg := batchedPD, batchedPD
		pcfg.ID, pcfg.Role = "p", mockworker.RolePrefill
		dcfg.ID, dcfg.Role = "d", mockworker.RoleDecode
		p, d := n.start(pcfg), n.start(dcfg)
		c := n.client(d)

		resp := c.post(t.Context(), mockworker.PathCompletions, map[string]any{"model": "m", "prompt": ids(0, 250), "max_tokens": 3},
			"X-Request-Id", "r1", mockworker.HeaderPrefillerHostPort, p.Addr())
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
		body := decodeBody[completionJSON](t, resp)
		if body.Usage == nil || body.Usage.PromptTokens != 250 || body.Usage.PromptTokensDetails.CachedTokens != 249 || body.Usage.CompletionTokens != 3 {
			t.Errorf("usage %+v, want 250 prompt tokens, 249 transferred, 3 out", body.Usage)
		}

		// The prefill worker computes 250 tokens in chunks of 100, 100, 50.
		pr, _ := p.Record("r1")
		if got, want := pr.FirstToken.Sub(pr.Admitted), 55*time.Millisecond; got != want {
			t.Errorf("prefill worker's prefill took %v, want %v: steps of 20, 20 and 15 ms", got, want)
		}
		// The decode worker computes the last token only, then decodes.
		dr, _ := d.Record("r1")
		if got, want := dr.FirstToken.Sub(dr.Admitted), 10100*time.Microsecond; got != want {
			t.Errorf("decode worker's prefill took %v, want %v: one step of one token", got, want)
		}
		if got, want := dr.Finish.Sub(dr.FirstToken), 2*10100*time.Microsecond; got != want {
			t.Errorf("decode worker's decode took %v, want %v", got, want)
		}
		if ps, ds := p.Stats(), d.Stats(); ps.Steps != 3 || ps.PrefillServed != 1 || ds.Steps != 3 || ds.TransferredTokens != 249 {
			t.Errorf("prefill stats %+v, decode stats %+v; want 3 steps each, 1 prefill served, 249 tokens transferred", ps, ds)
		}
		_, metrics := c.get(mockworker.PathMetrics)
		for _, want := range []string{
			`source="external_kv_transfer"} 249`, `source="local_compute"} 1`,
			`vllm:prompt_tokens_total{engine="0",model_name="m"} 250`,
			`vllm:generation_tokens_total{engine="0",model_name="m"} 3`,
			`vllm:num_requests_running{engine="0",model_name="m"} 0`,
			`vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 1`,
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("decode metrics lack %q", want)
			}
		}
	})
}

func TestWorker_BatchedStreamCancelledMidDecode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet(t)
		w := n.start(batchedPD)
		c := n.client(w)
		ctx, cancel := context.WithCancel(t.Context())
		resp := c.post(ctx, mockworker.PathCompletions, map[string]any{"model": "m", "prompt": ids(0, 40), "max_tokens": 1000, "stream": true},
			"X-Request-Id", "gone")
		sse := newSSEReader(resp.Body)
		for range 3 {
			if _, err := sse.next(); err != nil {
				t.Fatalf("event: %v", err)
			}
		}
		cancel()
		await(t, w, "the cancelled stream to free its slot", func(s mockworker.Stats) bool { return s.Running == 0 && s.Cancelled == 1 })
		if rec, _ := w.Record("gone"); rec.Outcome != mockworker.OutcomeCancelled || rec.CompletionTokens >= 1000 {
			t.Errorf("record outcome %v with %d tokens, want cancelled early", rec.Outcome, rec.CompletionTokens)
		}
		// Once the step it was cancelled in has run out, the next request
		// finds the batch to itself.
		time.Sleep(time.Second)
		rec := decodeBody[completionJSON](t, c.post(t.Context(), mockworker.PathCompletions,
			map[string]any{"model": "m", "prompt": ids(100, 10), "max_tokens": 2}, "X-Request-Id", "next"))
		if rec.Usage == nil || rec.Usage.CompletionTokens != 2 {
			t.Errorf("next usage %+v, want 2 tokens", rec.Usage)
		}
		if r, _ := w.Record("next"); r.FirstToken.Sub(r.Admitted) != 11*time.Millisecond || r.Finish.Sub(r.FirstToken) != 10100*time.Microsecond {
			t.Errorf("next: prefill %v, decode %v; want one step of 10 tokens (11ms), then one of 1 (10.1ms)",
				r.FirstToken.Sub(r.Admitted), r.Finish.Sub(r.FirstToken))
		}
	})
}
