package mockworker

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// engine simulates vLLM's scheduler for one worker: MaxNumSeqs running
// slots, a FIFO queue for the rest, a prefix cache, and per-sequence prefill
// and decode timing, or with Config.Batch the steps of one shared batch. A
// sequence runs on its caller's goroutine (run blocks until the sequence
// ends); the only goroutine of the engine's own is the shared batch's step
// loop, which runs while the batch holds a sequence (see batch.go).
//
// Slots are handed off: a finishing sequence gives its slot straight to the
// head of the queue, so Running never dips while requests wait and the queue
// is served strictly in arrival order.
type engine struct {
	cfg     Config // With defaults applied.
	metrics *metrics

	// mu guards every field below it.
	mu      sync.Mutex
	running int
	waiting *list.List // Of *waiter, oldest first.
	cache   *prefixCache
	pub     *publisher // nil without KV events
	stats   Stats
	records *recordLog
	// changed is closed and replaced on every state change (Await).
	changed chan struct{}
	// batch is the shared batch, with Config.Batch only.
	batch *batch
}

// waiter is a request queued for a slot.
type waiter struct {
	rec   *Record
	ready chan struct{} // Closed once the slot is granted.
	elem  *list.Element
}

func newEngine(cfg Config, m *metrics) *engine {
	e := &engine{
		cfg:     cfg,
		metrics: m,
		waiting: list.New(),
		cache:   newPrefixCache(cfg.CacheBlocks),
		records: newRecordLog(cfg.MaxRecords),
		changed: make(chan struct{}),
	}
	if cfg.Batch != nil {
		e.batch = newBatch()
	}
	return e
}

// errHold wraps a failure of the Hold hook.
var errHold = errors.New("mockworker: hold")

// run executes one sequence: it queues for a slot, passes Hold, prefills the
// uncached part of tokens, then produces info.MaxTokens output tokens,
// calling emit(i) for token i as it is produced. It returns the final record
// and nil once every token is emitted, or the record and an error when ctx
// ends, Hold fails or emit fails; in every case the slot is free again when
// run returns.
func (e *engine) run(ctx context.Context, info RequestInfo, tokens []int, emit func(i int) error) (Record, error) {
	hashes := blockHashes(tokens, e.cfg.BlockSize)

	rec := &Record{RequestInfo: info, Arrival: time.Now()}
	if err := e.acquire(ctx, rec); err != nil {
		return e.snapshot(rec), err
	}
	if err := e.hold(ctx, info); err != nil {
		return e.end(rec, err)
	}

	// Like vLLM, at least the last prompt token is always computed, so only
	// full blocks within the first len-1 tokens can hit.
	lookup := hashes[:(len(tokens)-1)/e.cfg.BlockSize]
	e.mu.Lock()
	cached := e.cache.lookup(lookup) * e.cfg.BlockSize
	transferred := 0
	if info.RemotePrefill { // The remote KV covers the rest but the last token.
		transferred = len(tokens) - 1 - cached
	}
	rec.CachedTokens, rec.TransferredTokens = cached, transferred
	e.mu.Unlock()

	computed := len(tokens) - cached - transferred
	if e.cfg.Batch != nil {
		return e.runBatched(ctx, rec, tokens, hashes, computed, emit)
	}
	if err := sleepUntil(ctx, time.Now().Add(e.cfg.prefillTime(computed))); err != nil {
		return e.end(rec, err)
	}
	e.mu.Lock()
	e.prefilledLocked(tokens, hashes, cached, transferred)
	e.mu.Unlock()
	e.metrics.prefilled(computed, cached, transferred)

	var first time.Time
	for i := range info.MaxTokens {
		if i > 0 {
			if err := sleepUntil(ctx, first.Add(e.cfg.decodeTime(i))); err != nil {
				return e.end(rec, err)
			}
		}
		e.mu.Lock()
		if i == 0 {
			first = time.Now()
			rec.FirstToken = first
			e.notifyLocked()
		}
		rec.CompletionTokens = i + 1
		e.stats.GenerationTokens++
		e.mu.Unlock()
		if i == 0 {
			e.metrics.firstToken(first.Sub(rec.Arrival))
		}
		e.metrics.generated()
		if err := emit(i); err != nil {
			return e.end(rec, err)
		}
	}
	return e.end(rec, nil)
}

// prefilledLocked records the end of a prefill: the prompt's KV is now
// here, computed or transferred, so its blocks enter the prefix cache (and
// the KV events), and its tokens are counted. The caller then counts them
// in the metrics too.
func (e *engine) prefilledLocked(tokens []int, hashes []uint64, cached, transferred int) {
	inserted, evicted := e.cache.insert(hashes)
	if e.pub != nil {
		e.pub.publish(cacheEvents(tokens, hashes, inserted, evicted, e.cfg.BlockSize))
	}
	e.stats.PromptTokens += len(tokens)
	e.stats.CachedTokens += cached
	e.stats.TransferredTokens += transferred
	e.stats.CachedBlocks = e.cache.len()
}

// acquire records rec's arrival and blocks until it holds a running slot. On
// error rec has been recorded as cancelled and holds no slot.
func (e *engine) acquire(ctx context.Context, rec *Record) error {
	e.mu.Lock()
	e.stats.Received++
	e.records.add(rec)
	if e.running < e.cfg.MaxNumSeqs && e.waiting.Len() == 0 {
		e.running++
		e.admitLocked(rec)
		e.mu.Unlock()
		return nil
	}
	w := &waiter{rec: rec, ready: make(chan struct{})}
	w.elem = e.waiting.PushBack(w)
	e.stats.Waiting = e.waiting.Len()
	e.stats.MaxWaiting = max(e.stats.MaxWaiting, e.stats.Waiting)
	e.notifyLocked()
	e.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	e.mu.Lock()
	select {
	case <-w.ready: // Granted while we were cancelled: give the slot back.
		e.mu.Unlock()
		_, err := e.end(rec, ctx.Err())
		return err
	default:
	}
	e.waiting.Remove(w.elem)
	e.stats.Waiting = e.waiting.Len()
	e.finishLocked(rec, OutcomeCancelled)
	latency := rec.Finish.Sub(rec.Arrival)
	e.mu.Unlock()
	e.metrics.ended(OutcomeCancelled, latency)
	return ctx.Err()
}

// admitLocked marks rec as holding a slot already counted in e.running.
func (e *engine) admitLocked(rec *Record) {
	rec.Admitted = time.Now()
	e.stats.Started++
	e.stats.Running = e.running
	e.stats.MaxRunning = max(e.stats.MaxRunning, e.running)
	e.notifyLocked()
}

// hold runs the Hold hook, if any, counting the sequence as held meanwhile.
func (e *engine) hold(ctx context.Context, info RequestInfo) error {
	if e.cfg.Hold == nil {
		return nil
	}
	e.mu.Lock()
	e.stats.Held++
	e.notifyLocked()
	e.mu.Unlock()

	err := e.cfg.Hold(ctx, info)

	e.mu.Lock()
	e.stats.Held--
	e.notifyLocked()
	e.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: %w", errHold, err)
	}
	return nil
}

// end records the end of a running sequence, finished if cause is nil and
// cancelled otherwise, and hands its slot to the oldest waiter, if any. It
// returns the final record and cause.
func (e *engine) end(rec *Record, cause error) (Record, error) {
	outcome := OutcomeFinished
	if cause != nil {
		outcome = OutcomeCancelled
	}
	e.mu.Lock()
	e.finishLocked(rec, outcome)
	if front := e.waiting.Front(); front != nil {
		w := e.waiting.Remove(front).(*waiter)
		e.stats.Waiting = e.waiting.Len()
		e.admitLocked(w.rec)
		close(w.ready)
	} else {
		e.running--
		e.stats.Running = e.running
	}
	out := *rec
	e.mu.Unlock()
	e.metrics.ended(outcome, out.Finish.Sub(out.Arrival))
	return out, cause
}

// finishLocked stamps rec's end and counts it.
func (e *engine) finishLocked(rec *Record, o Outcome) {
	rec.Finish = time.Now()
	rec.Outcome = o
	if o == OutcomeFinished {
		e.stats.Finished++
		if rec.RemoteDecode {
			e.stats.PrefillServed++
		}
	} else {
		e.stats.Cancelled++
	}
	e.notifyLocked()
}

// count applies f to the counters and wakes every Await.
func (e *engine) count(f func(*Stats)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f(&e.stats)
	e.notifyLocked()
}

// notifyLocked wakes every Await.
func (e *engine) notifyLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// snapshot returns a copy of rec taken under the lock.
func (e *engine) snapshot(rec *Record) Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	return *rec
}

// statsSnapshot returns the current counters.
func (e *engine) statsSnapshot() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

// await blocks until cond holds for the current counters or ctx ends.
func (e *engine) await(ctx context.Context, cond func(Stats) bool) error {
	for {
		e.mu.Lock()
		s, changed := e.stats, e.changed
		e.mu.Unlock()
		if cond(s) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// record returns a copy of the newest record with id.
func (e *engine) record(id string) (Record, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.records.get(id)
	if !ok {
		return Record{}, false
	}
	return *r, true
}

// allRecords returns copies of the kept records, oldest first.
func (e *engine) allRecords() []Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.records.all()
}

// sleepUntil waits until deadline or until ctx ends, whichever is first,
// and returns ctx's error in the second case.
func sleepUntil(ctx context.Context, deadline time.Time) error {
	d := time.Until(deadline)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
