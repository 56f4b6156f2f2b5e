package mockworker

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// newTestEngine returns an engine for cfg (defaults applied) with its own
// metrics registry.
func newTestEngine(t *testing.T, cfg Config) *engine {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg = cfg.withDefaults()
	var e *engine
	e = newEngine(cfg, newMetrics(cfg, func() Stats { return e.statsSnapshot() }))
	return e
}

// checkConservation asserts the Stats invariants: every received request
// is waiting, running, finished or cancelled, and the peak bounds the
// running count.
func checkConservation(t *testing.T, st Stats, maxNumSeqs int) {
	t.Helper()
	if st.Received != st.Waiting+st.Running+st.Finished+st.Cancelled {
		t.Errorf("received %d != waiting %d + running %d + finished %d + cancelled %d",
			st.Received, st.Waiting, st.Running, st.Finished, st.Cancelled)
	}
	if st.Running > st.MaxRunning || st.MaxRunning > maxNumSeqs || st.Started > st.Received {
		t.Errorf("running %d, max running %d, started %d, received %d: want running <= max <= %d and started <= received",
			st.Running, st.MaxRunning, st.Started, st.Received, maxNumSeqs)
	}
}

// result is what a sequence run in the background returned.
type result struct {
	rec    Record
	err    error
	emits  []time.Time // When each token was emitted.
	start  time.Time   // When run was called.
	finish time.Time   // When run returned.
}

// goRun runs a sequence of n prompt tokens starting at token id first on its
// own goroutine and delivers its result on the returned channel.
func goRun(ctx context.Context, e *engine, id string, tokens []int, maxTokens int) <-chan result {
	out := make(chan result, 1)
	go func() {
		var r result
		r.start = time.Now()
		info := RequestInfo{ID: id, PromptTokens: len(tokens), MaxTokens: maxTokens}
		r.rec, r.err = e.run(ctx, info, tokens, func(int) error {
			r.emits = append(r.emits, time.Now())
			return nil
		})
		r.finish = time.Now()
		out <- r
	}()
	return out
}

func TestEngine_TimingFollowsRatesAndSpeed(t *testing.T) {
	tests := []struct {
		name      string
		speed     float64
		wantFirst time.Duration // Prefill of 200 tokens at 1000/s × speed.
		wantGap   time.Duration // One token at 100/s × speed.
	}{
		{name: "speed 1", speed: 1, wantFirst: 200 * time.Millisecond, wantGap: 10 * time.Millisecond},
		{name: "speed 4", speed: 4, wantFirst: 50 * time.Millisecond, wantGap: 2500 * time.Microsecond},
		{name: "speed 100", speed: 100, wantFirst: 2 * time.Millisecond, wantGap: 100 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newTestEngine(t, Config{PrefillTokensPerSec: 1000, DecodeTokensPerSec: 100, Speed: tt.speed})
				r := <-goRun(t.Context(), e, "a", seqTokens(0, 200), 10)
				if r.err != nil {
					t.Fatalf("run: %v", r.err)
				}
				if got := r.rec.FirstToken.Sub(r.rec.Arrival); got != tt.wantFirst {
					t.Errorf("time to first token = %v, want %v", got, tt.wantFirst)
				}
				if len(r.emits) != 10 {
					t.Fatalf("emitted %d tokens, want 10", len(r.emits))
				}
				for i := 1; i < len(r.emits); i++ {
					if gap := r.emits[i].Sub(r.emits[i-1]); gap != tt.wantGap {
						t.Errorf("gap before token %d = %v, want %v", i, gap, tt.wantGap)
					}
				}
				if got, want := r.finish.Sub(r.start), tt.wantFirst+9*tt.wantGap; got != want {
					t.Errorf("total = %v, want %v", got, want)
				}
				if r.rec.Outcome != OutcomeFinished || r.rec.CompletionTokens != 10 {
					t.Errorf("record = %v with %d tokens, want finished with 10", r.rec.Outcome, r.rec.CompletionTokens)
				}
			})
		})
	}
}

func TestEngine_RemotePrefillComputesOnlyWhatNoCacheHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTestEngine(t, Config{PrefillTokensPerSec: 1000, BlockSize: 16})
		prompt := seqTokens(0, 100)
		if r := <-goRun(t.Context(), e, "warm", prompt[:33], 1); r.err != nil { // Caches 2 blocks.
			t.Fatalf("warm: %v", r.err)
		}
		info := RequestInfo{ID: "decode", PromptTokens: 100, MaxTokens: 1, RemotePrefill: true}
		rec, err := e.run(t.Context(), info, prompt, func(int) error { return nil })
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		// The local cache holds 32 tokens, the transfer the rest but the last.
		if rec.CachedTokens != 32 || rec.TransferredTokens != 67 || rec.FirstToken.Sub(rec.Admitted) != time.Millisecond {
			t.Errorf("record cached %d, transferred %d, prefill %v; want 32, 67, 1ms",
				rec.CachedTokens, rec.TransferredTokens, rec.FirstToken.Sub(rec.Admitted))
		}
		// The transferred KV is cached here now.
		if r := <-goRun(t.Context(), e, "again", prompt, 1); r.rec.CachedTokens != 96 {
			t.Errorf("repeat cached %d tokens, want 96", r.rec.CachedTokens)
		}
		if st := e.statsSnapshot(); st.TransferredTokens != 67 || st.CachedTokens != 128 || st.PromptTokens != 233 {
			t.Errorf("stats transferred/cached/prompt tokens %d/%d/%d, want 67/128/233",
				st.TransferredTokens, st.CachedTokens, st.PromptTokens)
		}
	})
}

func TestEngine_PrefixCacheHitShortensPrefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTestEngine(t, Config{PrefillTokensPerSec: 1000, BlockSize: 16})
		prompt := seqTokens(0, 100)
		steps := []struct {
			name       string
			tokens     []int
			wantCached int
		}{
			// 100 tokens: 6 full blocks fit in the first 99.
			{name: "cold", tokens: prompt, wantCached: 0},
			{name: "same prompt", tokens: prompt, wantCached: 96},
			// 96 tokens: the last token is always computed, so 5 blocks.
			{name: "block-aligned prefix", tokens: prompt[:96], wantCached: 80},
			{name: "different first block", tokens: append([]int{9999}, prompt[1:]...), wantCached: 0},
		}
		for _, s := range steps {
			r := <-goRun(t.Context(), e, s.name, s.tokens, 1)
			if r.err != nil {
				t.Fatalf("%s: run: %v", s.name, r.err)
			}
			if r.rec.CachedTokens != s.wantCached {
				t.Errorf("%s: cached tokens = %d, want %d", s.name, r.rec.CachedTokens, s.wantCached)
			}
			wantPrefill := time.Duration(len(s.tokens)-s.wantCached) * time.Millisecond
			if got := r.rec.FirstToken.Sub(r.rec.Admitted); got != wantPrefill {
				t.Errorf("%s: prefill = %v, want %v", s.name, got, wantPrefill)
			}
		}
		st := e.statsSnapshot()
		if st.CachedTokens != 176 || st.PromptTokens != 396 {
			t.Errorf("stats cached/prompt tokens = %d/%d, want 176/396", st.CachedTokens, st.PromptTokens)
		}
	})
}

func TestEngine_ConcurrentPrefillMissesUntilCached(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTestEngine(t, Config{PrefillTokensPerSec: 1000, BlockSize: 16})
		prompt := seqTokens(0, 100)
		a := goRun(t.Context(), e, "a", prompt, 1)
		time.Sleep(50 * time.Millisecond) // a is mid-prefill: its blocks are not cached yet.
		b := goRun(t.Context(), e, "b", prompt, 1)
		if ra, rb := <-a, <-b; ra.rec.CachedTokens != 0 || rb.rec.CachedTokens != 0 {
			t.Errorf("cached tokens = %d, %d; want 0, 0 while the first prefill runs", ra.rec.CachedTokens, rb.rec.CachedTokens)
		}
	})
}

func TestEngine_WaitingQueueIsFIFOAndBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := NewGate()
		e := newTestEngine(t, Config{MaxNumSeqs: 2, Hold: gate.Wait})
		var done []<-chan result
		for _, id := range []string{"a", "b", "c", "d", "e"} {
			done = append(done, goRun(t.Context(), e, id, seqTokens(0, 8), 1))
			synctest.Wait() // Fix the arrival order.
		}
		want := [][]string{{"a", "b"}, {"b", "c"}, {"c", "d"}, {"d", "e"}, {"e"}}
		for i, w := range want {
			if diff := cmp.Diff(w, gate.Parked()); diff != "" {
				t.Fatalf("step %d: parked (-want +got):\n%s", i, diff)
			}
			st := e.statsSnapshot()
			if st.Running > 2 || st.Held != len(w) {
				t.Fatalf("step %d: running %d held %d, want at most 2 running and %d held", i, st.Running, st.Held, len(w))
			}
			gate.Release(1)
			<-done[i]
			synctest.Wait()
		}
		st := e.statsSnapshot()
		if diff := cmp.Diff(Stats{
			Received: 5, Started: 5, Finished: 5, MaxRunning: 2, MaxWaiting: 3,
			PromptTokens: 40, GenerationTokens: 5,
		}, st); diff != "" {
			t.Errorf("stats (-want +got):\n%s", diff)
		}
	})
}

func TestEngine_ObservedMaxEqualsMaxNumSeqsUnderLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTestEngine(t, Config{MaxNumSeqs: 3, PrefillTokensPerSec: 1000, DecodeTokensPerSec: 100})
		var done []<-chan result
		for i := range 10 {
			done = append(done, goRun(t.Context(), e, "r", seqTokens(i*1000, 50), 5))
		}
		synctest.Wait()
		if st := e.statsSnapshot(); st.Running != 3 || st.Waiting != 7 {
			t.Errorf("running %d waiting %d, want 3 and 7", st.Running, st.Waiting)
		}
		for _, d := range done {
			if r := <-d; r.err != nil {
				t.Errorf("run: %v", r.err)
			}
			checkConservation(t, e.statsSnapshot(), 3)
		}
		st := e.statsSnapshot()
		if st.MaxRunning != 3 || st.Running != 0 || st.Waiting != 0 || st.Finished != 10 {
			t.Errorf("stats %+v, want max running 3, all 10 finished", st)
		}
	})
}

func TestEngine_CancelWhileWaitingLeavesTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTestEngine(t, Config{MaxNumSeqs: 1, PrefillTokensPerSec: 1000, DecodeTokensPerSec: 100})
		a := goRun(t.Context(), e, "a", seqTokens(0, 100), 10) // 100 ms prefill + 90 ms decode.
		synctest.Wait()
		ctxB, cancelB := context.WithCancel(t.Context())
		b := goRun(ctxB, e, "b", seqTokens(1000, 10), 1)
		synctest.Wait()
		c := goRun(t.Context(), e, "c", seqTokens(2000, 10), 1)
		synctest.Wait()
		if st := e.statsSnapshot(); st.Waiting != 2 {
			t.Fatalf("waiting = %d, want 2", st.Waiting)
		}

		cancelB()
		rb := <-b
		if !errors.Is(rb.err, context.Canceled) || rb.rec.Outcome != OutcomeCancelled || !rb.rec.Admitted.IsZero() {
			t.Errorf("b: err %v outcome %v admitted %v; want cancelled before admission", rb.err, rb.rec.Outcome, rb.rec.Admitted)
		}
		st := e.statsSnapshot()
		if st.Waiting != 1 || st.Running != 1 || st.Cancelled != 1 {
			t.Errorf("after cancel: %+v, want 1 waiting, 1 running, 1 cancelled", st)
		}
		checkConservation(t, st, 1)
		ra, rc := <-a, <-c
		if ra.err != nil || rc.err != nil {
			t.Fatalf("a: %v, c: %v", ra.err, rc.err)
		}
		if !rc.rec.Admitted.Equal(ra.rec.Finish) {
			t.Errorf("c admitted at %v, want when a finished (%v)", rc.rec.Admitted, ra.rec.Finish)
		}
		if got := rc.rec.Admitted.Sub(rc.rec.Arrival); got != 190*time.Millisecond {
			t.Errorf("c waited %v, want 190ms", got)
		}
	})
}

func TestEngine_CancelWhileRunningHandsTheSlotOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTestEngine(t, Config{MaxNumSeqs: 1, PrefillTokensPerSec: 1000, DecodeTokensPerSec: 100})
		ctxA, cancelA := context.WithCancel(t.Context())
		a := goRun(ctxA, e, "a", seqTokens(0, 10), 1000)
		synctest.Wait()
		b := goRun(t.Context(), e, "b", seqTokens(1000, 10), 1)
		time.Sleep(55 * time.Millisecond) // a: 10 ms prefill, then tokens every 10 ms.
		cancelA()
		ra := <-a
		if !errors.Is(ra.err, context.Canceled) || ra.rec.Outcome != OutcomeCancelled {
			t.Fatalf("a: err %v outcome %v, want cancelled", ra.err, ra.rec.Outcome)
		}
		if ra.rec.CompletionTokens != 5 {
			t.Errorf("a produced %d tokens before cancel, want 5", ra.rec.CompletionTokens)
		}
		rb := <-b
		if rb.err != nil || !rb.rec.Admitted.Equal(ra.rec.Finish) {
			t.Errorf("b: err %v admitted %v, want admitted at a's cancel %v", rb.err, rb.rec.Admitted, ra.rec.Finish)
		}
		st := e.statsSnapshot()
		if st.Started != 2 || st.Cancelled != 1 || st.Finished != 1 || st.Running != 0 {
			t.Errorf("stats %+v, want 2 started, 1 cancelled, 1 finished, none running", st)
		}
		checkConservation(t, st, 1)
	})
}

func TestEngine_EmitErrorCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTestEngine(t, Config{})
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
		if st := e.statsSnapshot(); st.Running != 0 {
			t.Errorf("running = %d after cancel, want 0", st.Running)
		}
	})
}

func TestEngine_HoldParksBeforeFirstToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := NewGate()
		e := newTestEngine(t, Config{PrefillTokensPerSec: 1000, Hold: gate.Wait})
		a := goRun(t.Context(), e, "a", seqTokens(0, 10), 2)
		time.Sleep(time.Hour) // Speed does not shorten a hold; nothing moves while parked.
		st := e.statsSnapshot()
		rec, _ := e.record("a")
		if st.Held != 1 || st.Running != 1 || !rec.FirstToken.IsZero() {
			t.Fatalf("held %d running %d first token %v; want parked in its slot before any token", st.Held, st.Running, rec.FirstToken)
		}
		gate.Release(1)
		r := <-a
		if r.err != nil {
			t.Fatal(r.err)
		}
		if got := r.rec.FirstToken.Sub(r.rec.Arrival); got != time.Hour+10*time.Millisecond {
			t.Errorf("time to first token = %v, want the hold plus 10ms prefill", got)
		}
	})
}

func TestEngine_HoldErrorCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := errors.New("refused")
		e := newTestEngine(t, Config{Hold: func(context.Context, RequestInfo) error { return refused }})
		rec, err := e.run(t.Context(), RequestInfo{ID: "a", MaxTokens: 1}, seqTokens(0, 4), func(int) error { return nil })
		if !errors.Is(err, refused) || !errors.Is(err, errHold) || rec.Outcome != OutcomeCancelled {
			t.Errorf("err %v outcome %v, want the hold error and cancelled", err, rec.Outcome)
		}
		if st := e.statsSnapshot(); st.Running != 0 || st.Held != 0 || st.Cancelled != 1 {
			t.Errorf("stats %+v, want nothing running or held, 1 cancelled", st)
		}
	})
}

func TestEngine_AwaitWakesOnChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTestEngine(t, Config{PrefillTokensPerSec: 1000})
		go func() {
			_, _ = e.run(t.Context(), RequestInfo{ID: "a", MaxTokens: 1}, seqTokens(0, 500), func(int) error { return nil })
		}()
		start := time.Now()
		if err := e.await(t.Context(), func(s Stats) bool { return s.Finished == 1 }); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != 500*time.Millisecond {
			t.Errorf("await returned after %v, want 500ms", got)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := e.await(ctx, func(s Stats) bool { return s.Finished == 2 }); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("await of a condition that never holds = %v, want the deadline", err)
		}
	})
}

func TestRecordLog_KeepsNewestMax(t *testing.T) {
	l := newRecordLog(2)
	for _, id := range []string{"a", "b", "a", "c"} {
		l.add(&Record{RequestInfo: RequestInfo{ID: id, PromptTokens: len(l.order)}})
	}
	var ids []string
	for _, r := range l.all() {
		ids = append(ids, r.ID)
	}
	if diff := cmp.Diff([]string{"a", "c"}, ids); diff != "" {
		t.Errorf("kept ids (-want +got):\n%s", diff)
	}
	if r, ok := l.get("a"); !ok || r.PromptTokens != 2 {
		t.Errorf("get(a) = %+v, %v; want the newer a", r, ok)
	}
	if _, ok := l.get("b"); ok {
		t.Errorf("get(b) found a dropped record")
	}
}
