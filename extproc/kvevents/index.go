package kvevents

import (
	"sync"
	"time"

	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/prefix"
)

// DefaultSpeculativeTTL is how long a routed prompt's blocks count as
// cached on its worker before the engine's own BlockStored arrives (llm-d's
// speculative entries).
const DefaultSpeculativeTTL = 2 * time.Second

// Index is the exact prefix index shared by the subscribers, which apply
// events, and the request path, which looks prompts up. It is safe for
// concurrent use.
type Index struct {
	mu      sync.Mutex
	exact   *prefix.Exact
	spec    *prefix.Index
	specTTL time.Duration
	// removedAt is when each worker last reported a removal or clear: its
	// speculative entries are not trusted for specTTL after it, since
	// they may name blocks the engine has since evicted.
	removedAt map[string]time.Time
	scratch   []uint64
	found     []sched.CachedTokens
	specBuf   []sched.CachedTokens
	// changed is the channel Changed handed out, closed by the next change;
	// nil while nobody waits.
	changed chan struct{}
}

// NewIndex returns an empty index for blockSize-token blocks.
func NewIndex(blockSize, maxBlocks int, specTTL time.Duration) *Index {
	if specTTL <= 0 {
		specTTL = DefaultSpeculativeTTL
	}
	return &Index{
		exact:     prefix.NewExact(blockSize, maxBlocks),
		spec:      prefix.New(specTTL, max(maxBlocks/8, 1<<16)),
		specTTL:   specTTL,
		removedAt: make(map[string]time.Time),
	}
}

// Stream names one engine publisher: a worker and DP rank, and the model
// name its blocks are seeded with when an event names no LoRA.
type Stream struct {
	Worker string
	Rank   uint32
	Model  string
}

// Applied counts what one batch did.
type Applied struct {
	Stored, Removed, Dropped int
	Cleared                  int
	// Skipped counts events not indexable: other media, groups or cache
	// kinds, extra hash keys, unknown parents, block-size mismatches.
	Skipped int
}

// fullAttention lists the cache kinds whose blocks are prefix-indexable.
var fullAttention = map[string]bool{"": true, "full_attention": true, "mla_attention": true, "sink_full_attention": true}

// Apply applies a decoded batch to a stream at time now. group is the
// stream's indexed KV-cache group (the first full-attention group it
// reported), kept by the caller across batches; -1 means not yet known.
func (ix *Index) Apply(now time.Time, s Stream, b *Batch, group *int64) Applied {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	defer ix.changedLocked()
	var a Applied
	defer func() {
		if a.Removed > 0 || a.Cleared > 0 {
			ix.removedAt[s.Worker] = now
		}
	}()
	for i := range b.Events {
		ev := &b.Events[i]
		gpu := ev.Medium == "" || ev.Medium == "GPU"
		switch ev.Kind {
		case KindStored:
			if !gpu || !fullAttention[ev.SpecKind] || ev.ExtraKeys || !sameGroup(ev, group) {
				a.Skipped++
				continue
			}
			seed := s.Model
			if ev.LoraName != "" {
				seed = ev.LoraName
			}
			st := prefix.Stored{Worker: s.Worker, Rank: s.Rank, Seed: seed, Parent: ev.Parent, HasParent: ev.HasParent,
				Hashes: ev.Hashes, Tokens: ev.Tokens, BlockSize: ev.BlockSize}
			n, d, scratch, err := ix.exact.Store(&st, ix.scratch)
			ix.scratch = scratch
			if err != nil {
				a.Skipped++
				continue
			}
			a.Stored += n
			a.Dropped += d
		case KindRemoved:
			if !gpu || (ev.HasGroup && *group >= 0 && ev.Group != *group) {
				a.Skipped++
				continue
			}
			a.Removed += ix.exact.Remove(s.Worker, s.Rank, ev.Hashes)
		case KindCleared:
			if !gpu {
				a.Skipped++
				continue
			}
			ix.exact.Clear(s.Worker, s.Rank)
			a.Cleared++
		case KindUnknown: // the decoder never yields it
		}
	}
	return a
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

// Clear drops a stream's blocks.
func (ix *Index) Clear(worker string, rank uint32) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.exact.Clear(worker, rank)
	ix.changedLocked()
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
	ix.spec.RemoveWorker(worker)
	delete(ix.removedAt, worker)
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

// Record notes that a prompt (its HashTokens blocks) was routed to worker,
// so that it counts as cached there until the engine's BlockStored arrives
// or the speculative TTL passes.
func (ix *Index) Record(now time.Time, worker string, hashes []uint64) {
	if len(hashes) == 0 {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.spec.Record(now, worker, hashes)
}

// Sources counts the workers of one lookup by where their figure came
// from, with the largest figure of each source.
type Sources struct {
	Events, Approximate         int
	BestEvents, BestApproximate uint64
}

// Lookup merges the approximate index's answer with the exact one: every
// synced worker gets its exact cached tokens (at least its speculative
// ones, unless it reported a removal within the speculative TTL), every
// other worker keeps its approximate figure. approx must be
// sorted by worker; so is the result, appended to dst.
func (ix *Index) Lookup(now time.Time, hashes []uint64, blockTokens uint64, approx, dst []sched.CachedTokens) ([]sched.CachedTokens, Sources) {
	var src Sources
	ix.mu.Lock()
	defer ix.mu.Unlock()
	found := ix.exact.Lookup(hashes, blockTokens, ix.found[:0])
	spec := ix.spec.Lookup(now, hashes, blockTokens, ix.specBuf[:0])
	ix.found, ix.specBuf = found, spec
	// Speculative entries count only for synced workers.
	merged := found
	for _, c := range spec {
		if !ix.exact.Synced(c.Worker) || now.Sub(ix.removedAt[c.Worker]) < ix.specTTL {
			continue
		}
		i := indexOf(merged, c.Worker)
		if i < 0 {
			merged = insertSorted(merged, c)
		} else {
			merged[i].Tokens = max(merged[i].Tokens, c.Tokens)
		}
	}
	for _, c := range merged {
		src.BestEvents = max(src.BestEvents, c.Tokens)
	}
	src.Events = len(merged)
	for _, c := range approx {
		if ix.exact.Synced(c.Worker) {
			continue
		}
		merged = insertSorted(merged, c)
		src.Approximate++
		src.BestApproximate = max(src.BestApproximate, c.Tokens)
	}
	ix.found = merged
	return append(dst, merged...), src
}

func indexOf(cs []sched.CachedTokens, w string) int {
	for i := range cs {
		if cs[i].Worker == w {
			return i
		}
	}
	return -1
}

func insertSorted(cs []sched.CachedTokens, c sched.CachedTokens) []sched.CachedTokens {
	i := len(cs)
	for i > 0 && cs[i-1].Worker > c.Worker {
		i--
	}
	cs = append(cs, sched.CachedTokens{})
	copy(cs[i+1:], cs[i:])
	cs[i] = c
	return cs
}
