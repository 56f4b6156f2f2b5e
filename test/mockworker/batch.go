package mockworker

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// batch is the shared batch of an engine with Config.Batch: the running
// sequences past Hold, in the order they joined, which a step loop carries
// through vLLM-style steps. The engine's mutex guards every field but
// loop.
//
// The step loop is a goroutine that runs while the batch holds a
// sequence: the first sequence to join an empty batch starts it, and it
// returns after a step that leaves the batch empty. A step's composition
// and duration are fixed when it starts; a sequence that joins meanwhile
// waits for the next step, and one that leaves meanwhile (cancelled) keeps
// its share of the step, which is wasted, and frees it from the next one.
type batch struct {
	seqs    *list.List // Of *batchSeq, oldest first.
	looping bool       // The step loop runs or has been started.
	loop    sync.WaitGroup
}

func newBatch() *batch { return &batch{seqs: list.New()} }

// batchSeq is one running sequence in the shared batch.
type batchSeq struct {
	rec    *Record
	tokens []int
	hashes []uint64
	// computed is how many prompt tokens the engine computes; left is how
	// many of them no finished step has carried yet.
	computed, left int
	// prefilled is set at the end of the step that carried the last
	// prefill chunk; from then on the sequence decodes.
	prefilled bool
	// produced counts the output tokens produced; done is set once the
	// engine has produced every one (the sequence has left the batch).
	produced int
	done     bool
	// wake gets a value, without blocking, when produced or done changes.
	wake chan struct{}
	// elem is the sequence's place in batch.seqs, nil once it has left.
	elem *list.Element
}

// stepShare is one sequence's share of a step: prefill tokens of its
// prompt, or one decode token.
type stepShare struct {
	seq     *batchSeq
	prefill int
	decode  bool
}

// runBatched runs the rest of a sequence that holds a slot and has passed
// Hold: it joins the shared batch, then emits the output tokens as the
// steps produce them. It returns as run does, and the sequence has left
// the batch when it returns.
func (e *engine) runBatched(ctx context.Context, rec *Record, tokens []int, hashes []uint64, computed int,
	emit func(i int) error,
) (Record, error) {
	s := &batchSeq{rec: rec, tokens: tokens, hashes: hashes, computed: computed, left: computed,
		wake: make(chan struct{}, 1)}
	e.mu.Lock()
	s.elem = e.batch.seqs.PushBack(s)
	if !e.batch.looping {
		e.batch.looping = true
		e.batch.loop.Go(e.stepLoop)
	}
	e.mu.Unlock()

	emitted := 0
	for {
		e.mu.Lock()
		produced, done := s.produced, s.done
		e.mu.Unlock()
		for ; emitted < produced; emitted++ {
			if err := emit(emitted); err != nil {
				e.leave(s)
				return e.end(rec, err)
			}
		}
		if done {
			return e.end(rec, nil)
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			e.leave(s)
			return e.end(rec, ctx.Err())
		}
	}
}

// leave takes s out of the shared batch if it is still there.
func (e *engine) leave(s *batchSeq) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.elem != nil {
		e.batch.seqs.Remove(s.elem)
		s.elem = nil
	}
}

// stepLoop runs steps back to back until one leaves the batch empty. Each
// step starts when the previous one was due to end, so that timer
// lateness does not accumulate; a step that ends later than its own
// length past its due time (a stalled process) moves the schedule on
// instead, so that later steps do not make the stall up in a burst.
func (e *engine) stepLoop() {
	var end time.Time
	for {
		e.mu.Lock()
		shares, tokens := e.planStepLocked()
		if len(shares) == 0 {
			e.batch.looping = false
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()

		if end.IsZero() {
			end = time.Now()
		}
		d := e.cfg.stepTime(tokens)
		end = end.Add(d)
		time.Sleep(time.Until(end))
		if now := time.Now(); now.Sub(end) > d {
			end = now
		}
		e.finishStep(shares)
	}
}

// planStepLocked composes the next step, as vLLM's scheduler does with
// chunked prefill: one decode token for every sequence past its prefill,
// then prefill chunks, oldest sequence first, while the token budget
// lasts. It returns the shares and their tokens in all; none when the
// batch is empty.
func (e *engine) planStepLocked() (shares []stepShare, tokens int) {
	for el := e.batch.seqs.Front(); el != nil; el = el.Next() {
		if s := el.Value.(*batchSeq); s.prefilled {
			shares = append(shares, stepShare{seq: s, decode: true})
			tokens++
		}
	}
	// MaxNumBatchedTokens >= MaxNumSeqs, so every decode token fits.
	budget := e.cfg.Batch.MaxNumBatchedTokens - tokens
	for el := e.batch.seqs.Front(); el != nil; el = el.Next() {
		s := el.Value.(*batchSeq)
		if s.prefilled {
			continue
		}
		chunk := min(s.left, budget)
		if chunk == 0 && s.left > 0 {
			break // The budget is spent: the younger prefills wait.
		}
		shares = append(shares, stepShare{seq: s, prefill: chunk})
		tokens += chunk
		budget -= chunk
	}
	return shares, tokens
}

// finishStep applies the end of a step to the sequences still in the
// batch: prefill chunks are done, a prefill whose last chunk it was
// caches its prompt and produces the first token, and every decoding
// sequence produces its next token. A sequence with every token produced
// leaves the batch.
func (e *engine) finishStep(shares []stepShare) {
	now := time.Now()
	var (
		ttfts     []time.Duration
		prefills  [][3]int // computed, cached, transferred
		generated int
	)
	e.mu.Lock()
	e.stats.Steps++
	for _, sh := range shares {
		s := sh.seq
		if s.elem == nil {
			continue // Cancelled during the step.
		}
		if !sh.decode {
			s.left -= sh.prefill
			if s.left > 0 {
				continue
			}
			s.prefilled = true
			r := s.rec
			e.prefilledLocked(s.tokens, s.hashes, r.CachedTokens, r.TransferredTokens)
			prefills = append(prefills, [3]int{s.computed, r.CachedTokens, r.TransferredTokens})
		}
		if s.produced < s.rec.MaxTokens {
			s.produced++
			s.rec.CompletionTokens = s.produced
			e.stats.GenerationTokens++
			generated++
			if s.produced == 1 {
				s.rec.FirstToken = now
				ttfts = append(ttfts, now.Sub(s.rec.Arrival))
			}
		}
		if s.produced == s.rec.MaxTokens {
			s.done = true
			e.batch.seqs.Remove(s.elem)
			s.elem = nil
		}
		select {
		case s.wake <- struct{}{}:
		default: // Already due to wake.
		}
	}
	e.notifyLocked()
	e.mu.Unlock()

	for _, p := range prefills {
		e.metrics.prefilled(p[0], p[1], p[2])
	}
	for _, d := range ttfts {
		e.metrics.firstToken(d)
	}
	for range generated {
		e.metrics.generated()
	}
}

// wait blocks until the step loop, if any, has returned: after every
// sequence has left the batch, within one step.
func (e *engine) wait() {
	if e.batch != nil {
		e.batch.loop.Wait()
	}
}
