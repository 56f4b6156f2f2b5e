package mockworker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// batched is a shared-batch configuration with round numbers: a step of n
// tokens takes 10 ms + n × 0.1 ms at speed 1, and carries at most 100.
var batched = Config{MaxNumSeqs: 4, Batch: &BatchConfig{
	MaxNumBatchedTokens: 100, StepOverhead: 10 * time.Millisecond, TokensPerSec: 10000,
}}

// newBatchEngine is newTestEngine for a shared-batch cfg, which waits at
// the end of the test (in its bubble) for the step loop to return, as
// Worker.Close does: a cancelled sequence leaves it running out its step.
func newBatchEngine(t *testing.T, cfg Config) *engine {
	t.Helper()
	e := newTestEngine(t, cfg)
	t.Cleanup(e.wait)
	return e
}

// step is how long a step of n tokens takes in batched at speed 1.
func step(n int) time.Duration { return 10*time.Millisecond + time.Duration(n)*100*time.Microsecond }

// gaps returns the times between consecutive emits.
func gaps(emits []time.Time) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(emits); i++ {
		out = append(out, emits[i].Sub(emits[i-1]))
	}
	return out
}

// repeat returns n copies of d.
func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestBatch_PrefillTakesCeilPromptOverBudgetSteps(t *testing.T) {
	tests := []struct {
		name      string
		prompt    int
		speed     float64
		wantFirst time.Duration
		wantSteps int // Prefill steps.
	}{
		{name: "one token", prompt: 1, speed: 1, wantFirst: step(1), wantSteps: 1},
		{name: "exactly the budget", prompt: 100, speed: 1, wantFirst: step(100), wantSteps: 1},
		{name: "one over the budget", prompt: 101, speed: 1, wantFirst: step(100) + step(1), wantSteps: 2},
		{name: "two and a half budgets", prompt: 250, speed: 1, wantFirst: 2*step(100) + step(50), wantSteps: 3},
		{name: "speed 4", prompt: 250, speed: 4, wantFirst: (2*step(100) + step(50)) / 4, wantSteps: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := batched
				cfg.Speed = tt.speed
				e := newBatchEngine(t, cfg)
				r := <-goRun(t.Context(), e, "a", seqTokens(0, tt.prompt), 4)
				if r.err != nil {
					t.Fatalf("run: %v", r.err)
				}
				if got := r.rec.FirstToken.Sub(r.rec.Arrival); got != tt.wantFirst {
					t.Errorf("time to first token = %v, want %v", got, tt.wantFirst)
				}
				// Alone, each further token is one step of one decode token.
				if diff := cmp.Diff(repeat(step(1)/time.Duration(tt.speed), 3), gaps(r.emits)); diff != "" {
					t.Errorf("token gaps (-want +got):\n%s", diff)
				}
				st := e.statsSnapshot()
				if st.Steps != tt.wantSteps+3 || st.PromptTokens != tt.prompt || st.GenerationTokens != 4 || st.Finished != 1 {
					t.Errorf("stats %+v, want %d steps, %d prompt tokens, 4 generated, 1 finished", st, tt.wantSteps+3, tt.prompt)
				}
			})
		})
	}
}

func TestBatch_DecodersShrinkThePrefillBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBatchEngine(t, batched)
		// Two sequences decode for the whole test: each step carries their
		// two decode tokens, leaving 98 for a prefill.
		a := goRun(t.Context(), e, "a", seqTokens(0, 1), 100)
		synctest.Wait() // a's prefill is the first step; b joins during it.
		b := goRun(t.Context(), e, "b", seqTokens(100, 1), 100)
		time.Sleep(step(1) + step(2) + step(2)/2) // Mid-way through the third step, of two decode tokens.
		before := e.statsSnapshot().Steps
		r := <-goRun(t.Context(), e, "c", seqTokens(1000, 500), 1)
		if r.err != nil {
			t.Fatal(r.err)
		}
		// ceil(500 / 98) = 6 steps: 5 of 98 tokens, then 10.
		if got, want := e.statsSnapshot().Steps-before, 6+1; got != want { // +1: the step c joined during.
			t.Errorf("c took %d steps from its arrival, want %d", got, want)
		}
		if got, want := r.rec.FirstToken.Sub(r.rec.Arrival), step(2)/2+5*step(100)+step(12); got != want {
			t.Errorf("c's time to first token = %v, want %v (the rest of a step, then 6 of its own)", got, want)
		}
		for _, r := range []result{<-a, <-b} {
			if r.err != nil {
				t.Fatal(r.err)
			}
		}
	})
}

func TestBatch_LongPrefillStretchesDecodeGaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBatchEngine(t, batched)
		// a: a 10-token prompt, then 20 tokens. Its first step (11 ms)
		// prefills it; each later step carries its decode token.
		a := goRun(t.Context(), e, "a", seqTokens(0, 10), 20)
		// b joins during a's fourth step (31.2 ms to 41.3 ms) with 1000
		// tokens to prefill: from the fifth step on, every step carries
		// a's decode token and 99 of b's, until 10 are left.
		time.Sleep(35 * time.Millisecond)
		b := goRun(t.Context(), e, "b", seqTokens(1000, 1000), 3)
		ra, rb := <-a, <-b
		if ra.err != nil || rb.err != nil {
			t.Fatalf("a: %v, b: %v", ra.err, rb.err)
		}

		var want []time.Duration
		want = append(want, repeat(step(1), 3)...)    // Tokens 2-4: a alone.
		want = append(want, repeat(step(100), 10)...) // Tokens 5-14: b's ten chunks of 99.
		want = append(want, step(11))                 // Token 15: b's last 10 tokens.
		want = append(want, repeat(step(2), 2)...)    // Tokens 16-17: b decodes beside a.
		want = append(want, repeat(step(1), 3)...)    // Tokens 18-20: a alone again.
		if diff := cmp.Diff(want, gaps(ra.emits)); diff != "" {
			t.Errorf("a's token gaps (-want +got):\n%s", diff)
		}
		// b waited for the step it joined during, then took 11 steps.
		if got, want := rb.rec.FirstToken.Sub(rb.rec.Arrival), 41300*time.Microsecond-35*time.Millisecond+10*step(100)+step(11); got != want {
			t.Errorf("b's time to first token = %v, want %v", got, want)
		}
		if got := gaps(rb.emits); !cmp.Equal(got, repeat(step(2), 2)) {
			t.Errorf("b's token gaps %v, want two steps of two decode tokens", got)
		}
		if st := e.statsSnapshot(); st.Steps != 20 {
			t.Errorf("%d steps, want 20: one per token of a, which ran throughout", st.Steps)
		}
	})
}

func TestBatch_CachedAndTransferredTokensAreNotComputed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := batched
		cfg.BlockSize = 16
		e := newBatchEngine(t, cfg)
		prompt := seqTokens(0, 1000)
		if r := <-goRun(t.Context(), e, "warm", prompt[:33], 1); r.err != nil { // Caches 2 blocks.
			t.Fatalf("warm: %v", r.err)
		}
		// 32 tokens cached, 68 computed: one step.
		r := <-goRun(t.Context(), e, "hit", prompt[:100], 1)
		if r.rec.CachedTokens != 32 || r.rec.FirstToken.Sub(r.rec.Admitted) != step(68) {
			t.Errorf("hit: cached %d, prefill %v; want 32 and one step of 68 tokens (%v)",
				r.rec.CachedTokens, r.rec.FirstToken.Sub(r.rec.Admitted), step(68))
		}
		// A remote prefill of 1000 tokens: 96 cached (the hit cached 6
		// blocks), 903 transferred, the last one computed in one step.
		info := RequestInfo{ID: "decode", PromptTokens: 1000, MaxTokens: 1, RemotePrefill: true}
		rec, err := e.run(t.Context(), info, prompt, func(int) error { return nil })
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if rec.CachedTokens != 96 || rec.TransferredTokens != 903 || rec.FirstToken.Sub(rec.Admitted) != step(1) {
			t.Errorf("decode: cached %d, transferred %d, prefill %v; want 96, 903 and one step of 1 token (%v)",
				rec.CachedTokens, rec.TransferredTokens, rec.FirstToken.Sub(rec.Admitted), step(1))
		}
		st := e.statsSnapshot()
		if st.Steps != 3 || st.PromptTokens != 1133 || st.CachedTokens != 128 || st.TransferredTokens != 903 {
			t.Errorf("stats %+v, want 3 steps and 1133/128/903 prompt/cached/transferred tokens", st)
		}
	})
}

func TestBatch_CancelMidPrefillFreesTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBatchEngine(t, batched)
		ctxA, cancelA := context.WithCancel(t.Context())
		a := goRun(ctxA, e, "a", seqTokens(0, 1000), 1) // 10 full steps of its own.
		synctest.Wait()
		b := goRun(t.Context(), e, "b", seqTokens(5000, 200), 1) // Behind a: no budget left.
		time.Sleep(2*step(100) + step(100)/2)                    // a is in its third step.
		cancelA()
		ra := <-a
		if !errors.Is(ra.err, context.Canceled) || ra.rec.Outcome != OutcomeCancelled || !ra.rec.FirstToken.IsZero() {
			t.Fatalf("a: err %v outcome %v first token %v, want cancelled mid-prefill", ra.err, ra.rec.Outcome, ra.rec.FirstToken)
		}
		// a's third step runs out with its share wasted; b then prefills
		// in two steps of its own.
		rb := <-b
		if rb.err != nil {
			t.Fatal(rb.err)
		}
		if got, want := rb.rec.FirstToken.Sub(rb.rec.Arrival), 5*step(100); got != want {
			t.Errorf("b's time to first token = %v, want %v: a's three steps, then two", got, want)
		}
		st := e.statsSnapshot()
		if st.Steps != 5 || st.PromptTokens != 200 || st.Cancelled != 1 || st.Finished != 1 || st.Running != 0 {
			t.Errorf("stats %+v, want 5 steps, only b's 200 prompt tokens counted, 1 cancelled, 1 finished", st)
		}
		checkConservation(t, st, 4)
		// a's prompt never entered the cache.
		if r := <-goRun(t.Context(), e, "again", seqTokens(0, 1000), 1); r.rec.CachedTokens != 0 {
			t.Errorf("a's prompt again: %d cached tokens, want 0", r.rec.CachedTokens)
		}
	})
}

func TestBatch_CancelWhileDecodingShortensTheSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBatchEngine(t, batched)
		ctxA, cancelA := context.WithCancel(t.Context())
		a := goRun(ctxA, e, "a", seqTokens(0, 1), 1000)
		synctest.Wait() // a's prefill is the first step; b joins during it.
		b := goRun(t.Context(), e, "b", seqTokens(100, 1), 6)
		time.Sleep(step(1) + 2*step(2) + step(2)/2) // Mid-way through the fourth step.
		cancelA()
		ra, rb := <-a, <-b
		if !errors.Is(ra.err, context.Canceled) || ra.rec.CompletionTokens != 3 {
			t.Errorf("a: err %v with %d tokens, want cancelled after 3", ra.err, ra.rec.CompletionTokens)
		}
		// b's third token comes at the end of the step a was cancelled in,
		// which still carried a's decode token.
		want := []time.Duration{step(2), step(2), step(1), step(1), step(1)}
		if diff := cmp.Diff(want, gaps(rb.emits)); diff != "" {
			t.Errorf("b's token gaps (-want +got):\n%s", diff)
		}
	})
}

func TestBatch_QueueHoldAndSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := NewGate()
		cfg := batched
		cfg.MaxNumSeqs = 2
		cfg.Hold = func(ctx context.Context, req RequestInfo) error {
			if req.ID == "held" {
				return gate.Wait(ctx, req)
			}
			return nil
		}
		e := newBatchEngine(t, cfg)
		held := goRun(t.Context(), e, "held", seqTokens(0, 10), 1)
		synctest.Wait()
		a := goRun(t.Context(), e, "a", seqTokens(100, 10), 3)
		synctest.Wait()
		b := goRun(t.Context(), e, "b", seqTokens(200, 10), 1) // Waits for a slot.
		synctest.Wait()
		if st := e.statsSnapshot(); st.Running != 2 || st.Held != 1 || st.Waiting != 1 {
			t.Fatalf("stats %+v, want 2 running (1 held) and 1 waiting", st)
		}
		// A held sequence is not in the batch: a runs alone.
		ra := <-a
		if diff := cmp.Diff(repeat(step(1), 2), gaps(ra.emits)); diff != "" {
			t.Errorf("a's token gaps (-want +got):\n%s", diff)
		}
		rb := <-b
		if !rb.rec.Admitted.Equal(ra.rec.Finish) || rb.rec.FirstToken.Sub(rb.rec.Admitted) != step(10) {
			t.Errorf("b admitted %v (a finished %v), prefilled in %v; want a's slot, then one step", rb.rec.Admitted, ra.rec.Finish,
				rb.rec.FirstToken.Sub(rb.rec.Admitted))
		}
		gate.Release(1)
		if r := <-held; r.err != nil || r.rec.FirstToken.Sub(r.rec.Admitted) <= step(10) {
			t.Errorf("held: err %v, first token %v after admission; want it after the hold", r.err, r.rec.FirstToken.Sub(r.rec.Admitted))
		}
		st := e.statsSnapshot()
		if diff := cmp.Diff(Stats{
			Received: 3, Started: 3, Finished: 3, MaxRunning: 2, MaxWaiting: 1,
			PromptTokens: 30, GenerationTokens: 5, Steps: 5,
		}, st); diff != "" {
			t.Errorf("stats (-want +got):\n%s", diff)
		}
	})
}

func TestBatch_EmitErrorCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBatchEngine(t, batched)
		broken := errors.New("broken pipe")
		rec, err := e.run(t.Context(), RequestInfo{ID: "a", MaxTokens: 5}, seqTokens(0, 4), func(i int) error {
			if i == 2 {
				return broken
			}
			return nil
		})
		if !errors.Is(err, broken) || rec.Outcome != OutcomeCancelled || rec.CompletionTokens != 3 {
			t.Errorf("err %v outcome %v tokens %d, want the emit error, cancelled, 3 tokens", err, rec.Outcome, rec.CompletionTokens)
		}
		synctest.Wait()
		if st := e.statsSnapshot(); st.Running != 0 || st.Cancelled != 1 {
			t.Errorf("stats %+v, want nothing running, 1 cancelled", st)
		}
	})
}

func TestBatch_ManySequencesKeepTheInvariants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBatchEngine(t, batched)
		var done []<-chan result
		for i := range 12 {
			ctx := t.Context()
			if i%5 == 4 { // Some give up while waiting or running.
				c, cancel := context.WithTimeout(ctx, time.Duration(i)*20*time.Millisecond)
				defer cancel()
				ctx = c
			}
			done = append(done, goRun(ctx, e, "r", seqTokens(i*1000, 30+i*40), 3+i))
			time.Sleep(7 * time.Millisecond)
			checkConservation(t, e.statsSnapshot(), 4)
		}
		var generated int
		for _, d := range done {
			r := <-d
			generated += r.rec.CompletionTokens
			if r.err == nil && (r.rec.CompletionTokens != r.rec.MaxTokens || len(r.emits) != r.rec.MaxTokens) {
				t.Errorf("finished with %d of %d tokens, %d emitted", r.rec.CompletionTokens, r.rec.MaxTokens, len(r.emits))
			}
		}
		st := e.statsSnapshot()
		checkConservation(t, st, 4)
		if st.Running != 0 || st.Waiting != 0 || st.Finished+st.Cancelled != 12 || st.MaxRunning != 4 || st.GenerationTokens != generated {
			t.Errorf("stats %+v, want all 12 ended, 4 at most running, %d tokens generated", st, generated)
		}
	})
}

func TestBatchConfig_DefaultsAndValidation(t *testing.T) {
	c := Config{PrefillTokensPerSec: 4000, DecodeTokensPerSec: 40, Batch: &BatchConfig{}}.withDefaults()
	if diff := cmp.Diff(BatchConfig{MaxNumBatchedTokens: DefaultMaxNumBatchedTokens, StepOverhead: 25 * time.Millisecond, TokensPerSec: 4000},
		*c.Batch); diff != "" {
		t.Errorf("batch defaults (-want +got):\n%s", diff)
	}
	if c := (Config{MaxNumSeqs: 4096, Batch: &BatchConfig{}}).withDefaults(); c.Batch.MaxNumBatchedTokens != 4096 {
		t.Errorf("max num batched tokens = %d with 4096 sequences, want 4096", c.Batch.MaxNumBatchedTokens)
	}
	if got := (Config{Speed: 2, Batch: &BatchConfig{StepOverhead: 6 * time.Millisecond, TokensPerSec: 1000}}).withDefaults().stepTime(10); got != 8*time.Millisecond {
		t.Errorf("stepTime(10) = %v, want (6ms + 10ms) / 2", got)
	}
	orig := &BatchConfig{}
	_ = Config{Batch: orig}.withDefaults()
	if *orig != (BatchConfig{}) {
		t.Errorf("withDefaults changed the caller's BatchConfig to %+v", *orig)
	}

	err := Config{Batch: &BatchConfig{MaxNumBatchedTokens: -1, StepOverhead: -time.Millisecond, TokensPerSec: -1}}.Validate()
	for _, want := range []string{
		"max num batched tokens must not be negative, got -1",
		"batch tokens per second must be a finite non-negative number, got -1",
		"batch step overhead must not be negative, got -1ms",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, missing %q", err, want)
		}
	}
	err = Config{MaxNumSeqs: 8, Batch: &BatchConfig{MaxNumBatchedTokens: 4}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "max num batched tokens 4 is less than max num seqs 8") {
		t.Errorf("Validate() = %v, want the budget below max num seqs refused", err)
	}
}
