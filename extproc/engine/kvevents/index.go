package kvevents

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/prefix"
)

// applyChunk bounds the work Apply does per hold of the index's lock, in
// index blocks stored, removed or looked at: a request's Lookup waits for
// one chunk at most (tens of microseconds), whatever the batch. An engine
// block is never split, so one hold may reach an engine block's index
// blocks (MaxEventTokens / the block size at most).
const applyChunk = 256

// maxLoraNames bounds the LoRA adapter names the index seeds blocks with.
// A store naming another adapter once that many are known is skipped.
const maxLoraNames = 1024

// Index is the exact prefix index the subscribers feed with the engines'
// events, and that the request path's cache view reads: which blocks each
// worker's engine holds, and whether its streams are in sync. It is safe
// for concurrent use.
//
// Blocks are seeded by their LoRA adapter's name, and a base model's blocks
// by the empty seed, whatever the worker's model: a worker whose events
// name no model prices the requests it serves. SeedFor gives a request's
// seed.
type Index struct {
	mu    sync.Mutex
	exact *prefix.Exact
	// removedAt is when each worker last reported a removal or clear.
	removedAt map[string]time.Time
	// loras maps each LoRA name the events named to the workers that named
	// it; loraNames is a copy of its keys for SeedFor, replaced on change.
	loras     map[string]map[string]struct{}
	loraNames atomic.Pointer[map[string]struct{}]
	found     []sched.CachedTokens
	// changed is the channel Changed handed out, closed by the next change;
	// nil while nobody waits.
	changed chan struct{}
	// afterHold, when set (by tests), is called after Apply lets go of the
	// lock, with the work done in that hold.
	afterHold func(work int)
}

// NewIndex returns an empty index for blockSize-token blocks, at most
// maxBlocks (stream, block) pairs (0: prefix.DefaultExactMaxBlocks).
func NewIndex(blockSize, maxBlocks int) *Index {
	ix := &Index{
		exact:     prefix.NewExact(blockSize, maxBlocks),
		removedAt: make(map[string]time.Time),
		loras:     make(map[string]map[string]struct{}),
	}
	ix.loraNames.Store(&map[string]struct{}{})
	return ix
}

// SeedFor returns the block-hash seed of a request for model: the model's
// name when it is a LoRA adapter some worker's events named, else the base
// seed "". It takes no lock.
func (ix *Index) SeedFor(model string) string {
	if _, ok := (*ix.loraNames.Load())[model]; ok {
		return model
	}
	return ""
}

// noteLora records that worker's events name the LoRA adapter name and
// reports whether the index seeds with it: "" (the base model) and known
// names always, a new name while fewer than maxLoraNames are known.
func (ix *Index) noteLora(name, worker string) bool {
	if name == "" {
		return true
	}
	ws, ok := ix.loras[name]
	if !ok {
		if len(ix.loras) >= maxLoraNames {
			return false
		}
		ws = make(map[string]struct{})
		ix.loras[name] = ws
		ix.publishLoras()
	}
	ws[worker] = struct{}{}
	return true
}

// forgetLoras drops worker from the LoRA names, and the names no worker
// names any more.
func (ix *Index) forgetLoras(worker string) {
	gone := false
	for name, ws := range ix.loras {
		delete(ws, worker)
		if len(ws) == 0 {
			delete(ix.loras, name)
			gone = true
		}
	}
	if gone {
		ix.publishLoras()
	}
}

func (ix *Index) publishLoras() {
	names := make(map[string]struct{}, len(ix.loras))
	for name := range ix.loras {
		names[name] = struct{}{}
	}
	ix.loraNames.Store(&names)
}

// Stream names one engine publisher: a worker and DP rank.
type Stream struct {
	Worker string
	Rank   uint32
}

// Applied counts what one batch did.
type Applied struct {
	Stored, Removed, Dropped int
	Cleared                  int
	// Skipped counts events not indexable: other media, groups or cache
	// kinds, extra hash keys, unknown parents, block-size mismatches, LoRA
	// names beyond the bound.
	Skipped int
	// Truncated counts events that named more than MaxEventTokens tokens
	// or blocks: a store keeps its leading blocks, a removal clears the
	// stream.
	Truncated int
}

// fullAttention lists the cache kinds whose blocks are prefix-indexable.
var fullAttention = map[string]bool{"": true, "full_attention": true, "mla_attention": true, "sink_full_attention": true}

// Apply applies a decoded batch to a stream at time now. group is the
// stream's indexed KV-cache group (the first full-attention group it
// reported), kept by the caller across batches; -1 means not yet known.
//
// Block hashes are computed without the lock, and the lock is let go
// between chunks of applyChunk blocks, so lookups go on during a large
// batch; they see its events partly applied, as if it had come in parts.
func (ix *Index) Apply(now time.Time, s Stream, b *Batch, group *int64) Applied {
	ap := applier{ix: ix, s: s, now: now, group: group}
	scratch := hashBufs.Get().(*[]uint64)
	defer hashBufs.Put(scratch)
	ix.mu.Lock()
	for i := range b.Events {
		*scratch = ap.event(&b.Events[i], *scratch)
	}
	ix.changedLocked()
	ap.unlock()
	return ap.a
}

// hashBufs are the block-hash buffers of concurrent Apply calls.
var hashBufs = sync.Pool{New: func() any { return new([]uint64) }}

// applier applies one batch; it holds ix.mu except while it hashes or lets
// lookups in.
type applier struct {
	ix    *Index
	s     Stream
	now   time.Time
	group *int64
	a     Applied
	work  int // done in the current hold
}

func (ap *applier) unlock() {
	work := ap.work
	ap.work = 0
	ap.ix.mu.Unlock()
	if ap.ix.afterHold != nil {
		ap.ix.afterHold(work)
	}
}

// spend counts n units of work done under the lock and, once a chunk is
// done, lets the lookups waiting for the lock in.
func (ap *applier) spend(n int) {
	ap.work += n
	if ap.work >= applyChunk {
		ap.unlock()
		runtime.Gosched()
		ap.ix.mu.Lock()
	}
}

// event applies one event, hashing into scratch; it returns scratch.
func (ap *applier) event(ev *Event, scratch []uint64) []uint64 {
	gpu := ev.Medium == "" || ev.Medium == "GPU"
	g := ap.group
	switch ev.Kind {
	case KindStored:
		if ev.Truncated {
			ap.a.Truncated++
		}
		if !gpu || !fullAttention[ev.SpecKind] || ev.ExtraKeys || !sameGroup(ev, g) || !ap.ix.noteLora(ev.LoraName, ap.s.Worker) {
			ap.skip()
			return scratch
		}
		return ap.store(ev, scratch)
	case KindRemoved:
		if !gpu || (ev.HasGroup && *g >= 0 && ev.Group != *g) {
			ap.skip()
			return scratch
		}
		if ev.Truncated {
			// The blocks beyond the cap may be gone too: forget them all
			// rather than over-state the cache.
			ap.a.Truncated++
			ap.a.Removed += ap.clear()
			return scratch
		}
		ap.remove(ev.Hashes)
	case KindCleared:
		if !gpu {
			ap.skip()
			return scratch
		}
		ap.clear()
		ap.a.Cleared++
	case KindUnknown: // the decoder never yields it
	}
	return scratch
}

func (ap *applier) skip() {
	ap.a.Skipped++
	ap.spend(1)
}

// store applies a BlockStored event: it checks it and finds its parent
// under the lock, hashes its tokens without it, and stores the blocks in
// chunks.
func (ap *applier) store(ev *Event, scratch []uint64) []uint64 {
	x := ap.ix.exact
	st := prefix.Stored{Worker: ap.s.Worker, Rank: ap.s.Rank, Seed: ev.LoraName, Parent: ev.Parent, HasParent: ev.HasParent,
		Hashes: ev.Hashes, Tokens: ev.Tokens, BlockSize: ev.BlockSize}
	parent, err := x.Prepare(&st)
	if err != nil {
		ap.skip()
		return scratch
	}
	if len(st.Hashes) == 0 {
		return scratch
	}
	ap.unlock()
	hs := x.HashStored(&st, parent, scratch[:0])
	ap.ix.mu.Lock()
	ratio := len(hs) / len(st.Hashes)
	for next := 0; next < len(st.Hashes); {
		n := max(1, (applyChunk-ap.work)/ratio)
		from := next
		var stored, dropped int
		next, stored, dropped, err = x.StoreHashed(&st, parent, hs, from, n)
		ap.a.Stored += stored
		ap.a.Dropped += dropped
		if err != nil {
			ap.a.Skipped++
		}
		ap.spend(min(n, next-from) * ratio)
	}
	return hs
}

// remove applies a BlockRemoved event in chunks.
func (ap *applier) remove(hashes []uint64) {
	x := ap.ix.exact
	for len(hashes) > 0 {
		per := x.Ratio(ap.s.Worker, ap.s.Rank)
		n := min(len(hashes), max(1, (applyChunk-ap.work)/per))
		if removed := x.Remove(ap.s.Worker, ap.s.Rank, hashes[:n]); removed > 0 {
			ap.a.Removed += removed
			ap.ix.removedAt[ap.s.Worker] = ap.now
		}
		hashes = hashes[n:]
		ap.spend(n * per)
	}
}

// clear drops the stream's blocks in chunks, as a removal, and returns
// how many it held.
func (ap *applier) clear() int {
	ap.ix.removedAt[ap.s.Worker] = ap.now
	return ap.clearStream()
}

// clearStream drops the stream's blocks in chunks and returns how many it
// held.
func (ap *applier) clearStream() int {
	n := 0
	for {
		limit := max(1, applyChunk-ap.work)
		removed, done := ap.ix.exact.ClearSome(ap.s.Worker, ap.s.Rank, limit)
		n += removed
		if done {
			ap.spend(max(removed, 1))
			return n
		}
		ap.spend(limit)
	}
}

// sameGroup reports whether a store belongs to the stream's indexed group,
// adopting the event's group when none is known yet.
func sameGroup(ev *Event, group *int64) bool {
	g := int64(0)
	if ev.HasGroup {
		g = ev.Group
	}
	if *group < 0 {
		*group = g
	}
	return g == *group
}

// Changed returns a channel that the next change to the exact index closes:
// a batch applied, a stream cleared or marked in or out of sync, a worker
// removed. It lets a caller wait for the engines' events instead of
// polling, and costs nothing while nobody asks.
func (ix *Index) Changed() <-chan struct{} {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.changed == nil {
		ix.changed = make(chan struct{})
	}
	return ix.changed
}

// changedLocked wakes whoever waits on Changed; ix.mu is held.
func (ix *Index) changedLocked() {
	if ix.changed != nil {
		close(ix.changed)
		ix.changed = nil
	}
}

// Clear drops a stream's blocks, in chunks as Apply does.
func (ix *Index) Clear(worker string, rank uint32) {
	ap := applier{ix: ix, s: Stream{Worker: worker, Rank: rank}}
	ix.mu.Lock()
	ap.clearStream()
	ix.changedLocked()
	ap.unlock()
}

// SetSynced marks a stream in or out of sync.
func (ix *Index) SetSynced(worker string, rank uint32, synced bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.exact.SetSynced(worker, rank, synced)
	ix.changedLocked()
}

// RemoveWorker forgets a worker.
func (ix *Index) RemoveWorker(worker string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	defer ix.changedLocked()
	ix.exact.RemoveWorker(worker)
	delete(ix.removedAt, worker)
	ix.forgetLoras(worker)
}

// Size returns the (stream, block) pairs and distinct blocks held.
func (ix *Index) Size() (pairs, blocks int) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.exact.Len(), ix.exact.Hashes()
}

// StreamLen returns the blocks one stream holds.
func (ix *Index) StreamLen(worker string, rank uint32) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.exact.StreamLen(worker, rank)
}

// Synced reports whether the index speaks for worker.
func (ix *Index) Synced(worker string) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.exact.Synced(worker)
}

// WorkerState is what the events say of one worker.
type WorkerState struct {
	// Synced is set while every stream of the worker is in sync: the
	// index then speaks for it.
	Synced bool
	// RemovedAt is when the worker last reported a removal or a clear;
	// zero when it never did.
	RemovedAt time.Time
}

// Lookup appends to dst the prompt's cached tokens on every synced worker
// that holds its leading blocks (HashTokens of the prompt), sorted by
// worker, and to states the state of each worker of ask, in order, both
// under one hold of the lock.
func (ix *Index) Lookup(hashes []uint64, blockTokens uint64, ask []string, dst []sched.CachedTokens, states []WorkerState) ([]sched.CachedTokens, []WorkerState) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if len(hashes) > 0 {
		ix.found = ix.exact.Lookup(hashes, blockTokens, ix.found[:0])
		dst = append(dst, ix.found...)
	}
	for _, w := range ask {
		states = append(states, WorkerState{Synced: ix.exact.Synced(w), RemovedAt: ix.removedAt[w]})
	}
	return dst, states
}
