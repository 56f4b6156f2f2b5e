package prefix

import (
	"errors"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/tollgate/tollgate/sched"
)

// DefaultExactMaxBlocks bounds an Exact index at about 4M (stream, block)
// pairs, a few hundred MiB at most.
const DefaultExactMaxBlocks = 1 << 22

// Errors of Exact.Store. The event is skipped; the index is unchanged.
var (
	// ErrUnknownParent: the parent block is not in the stream's index (it
	// was stored before tollgate subscribed, or dropped under the bound).
	ErrUnknownParent = errors.New("prefix: parent block unknown")
	// ErrBlockSize: the engine's block size is not a positive multiple of
	// the index's, or changed within the stream.
	ErrBlockSize = errors.New("prefix: engine block size is not a multiple of the index block size")
	// ErrTokenCount: token_ids does not hold exactly one engine block of
	// tokens per block hash.
	ErrTokenCount = errors.New("prefix: token count does not match the blocks")
)

// Exact is the precise prefix index, built from the engines' own KV-cache
// events: for each stream (a worker and data-parallel rank) it holds the
// blocks the engine reports cached, under tollgate's own chained block hash
// (HashTokens, seeded by the LoRA name or ""), so that a prompt hashed with
// HashTokens is looked up without reproducing any engine's hash.
//
// The engine's block hashes are kept per stream only to resolve a stored
// block's parent and to apply removals. Blocks reach the index only through
// Store (or StoreHashed) and leave it only through Remove, Clear (or
// ClearSome) and RemoveWorker: the memory bound refuses new blocks (Store
// reports them dropped) rather than evicting held ones, so what the index
// holds is always what the engine reported and never over-states a cache.
//
// A worker's blocks are reported by Lookup only while every one of its
// streams is synced (SetSynced); the shell prices the others with the
// approximate Index. An Exact is not safe for concurrent use, except that
// HashStored may run alongside the other methods.
type Exact struct {
	blockSize int
	maxBlocks int
	blocks    int // (stream, block) pairs held
	held      int // blocks plus repeats under other engine hashes: what maxBlocks bounds

	// Entries, one per tollgate hash held by any stream. An entry held by
	// one stream names it in solo[e] (row[e] is -1); an entry held by more
	// has a holder bitset, bits[row[e]*words : (row[e]+1)*words].
	// holders[e] counts the holding streams.
	byHash  map[uint64]int32
	hashes  []uint64
	parents []uint64 // the chain parent of each entry, for engine blocks spanning several index blocks
	holders []int32
	solo    []int32
	row     []int32
	bits    []uint64
	words   int
	freeEnt []int32
	freeRow []int32

	streams   []stream
	streamIDs map[streamKey]int32
	freeSlot  []int32

	workers   []exactWorker
	workerIDs map[string]int32
	freeWork  []int32
	order     []int32 // live workers sorted by name
	synced    []uint64

	// Lookup scratch.
	active []uint64
	next   []uint64
	depth  []uint32 // per worker
}

type streamKey struct {
	worker string
	rank   uint32
}

// stream is one engine publisher's view in the index.
type stream struct {
	live    bool
	synced  bool
	worker  int32
	rank    uint32
	ratio   int // index blocks per engine block; 0 until the first store
	blocks  int
	byEng   map[uint64]uint64 // engine hash -> tollgate hash of its last index block
	dups    map[uint64]uint32 // extra stores of an index block this stream already holds
	seedFor string
	seed    uint64
}

type exactWorker struct {
	name     string
	slots    []int32
	unsynced int
}

// NewExact returns an empty index for blockSize-token blocks holding at
// most maxBlocks (stream, block) pairs (<= 0 means DefaultExactMaxBlocks); a
// block a stream stores again under another engine hash counts again.
func NewExact(blockSize, maxBlocks int) *Exact {
	if maxBlocks <= 0 {
		maxBlocks = DefaultExactMaxBlocks
	}
	return &Exact{
		blockSize: max(blockSize, 1),
		maxBlocks: min(maxBlocks, math.MaxInt32),
		byHash:    make(map[uint64]int32),
		streamIDs: make(map[streamKey]int32),
		workerIDs: make(map[string]int32),
		words:     1,
	}
}

// Len returns the number of (stream, block) pairs held.
func (x *Exact) Len() int { return x.blocks }

// Hashes returns the number of distinct blocks held.
func (x *Exact) Hashes() int { return len(x.byHash) }

// StreamLen returns the number of blocks one stream holds.
func (x *Exact) StreamLen(worker string, rank uint32) int {
	if s, ok := x.streamIDs[streamKey{worker, rank}]; ok {
		return x.streams[s].blocks
	}
	return 0
}

// Ratio returns the index blocks per engine block of a stream: 1 until it
// stores a block.
func (x *Exact) Ratio(worker string, rank uint32) int {
	if slot, ok := x.streamIDs[streamKey{worker, rank}]; ok && x.streams[slot].ratio > 0 {
		return x.streams[slot].ratio
	}
	return 1
}

// Stored is one BlockStored event, already decoded.
type Stored struct {
	Worker string
	Rank   uint32
	// Seed is the name the blocks are seeded by: their LoRA adapter's, or
	// "" for a base model's.
	Seed string
	// Parent is the engine hash of the block before Hashes[0], when
	// HasParent.
	Parent    uint64
	HasParent bool
	// Hashes are the engine's hashes of the stored blocks, in order.
	Hashes []uint64
	// Tokens are every token of the stored blocks.
	Tokens []uint32
	// BlockSize is the engine's block size; 0 means len(Tokens)/len(Hashes).
	BlockSize int
}

// Store adds the blocks of ev to its stream and returns how many index
// blocks it added and how many it dropped under the memory bound. Blocks the
// stream already holds are counted once (a later Remove of either engine
// hash keeps the other). On error nothing changes.
//
// Store is Prepare, HashStored and StoreHashed in one step. A caller that
// guards the index with a lock can instead hash without the lock and store
// in bounded steps.
func (x *Exact) Store(ev *Stored, scratch []uint64) (stored, dropped int, _ []uint64, _ error) {
	parent, err := x.Prepare(ev)
	if err != nil || len(ev.Hashes) == 0 {
		return 0, 0, scratch, err
	}
	hs := x.HashStored(ev, parent, scratch[:0])
	_, stored, dropped, err = x.StoreHashed(ev, parent, hs, 0, len(ev.Hashes))
	return stored, dropped, hs, err
}

// Prepare checks ev against its stream, creating the stream, and returns the
// chain parent of its first block: the hash of the stream's block for
// ev.Parent, or the seed's. Nothing else changes.
func (x *Exact) Prepare(ev *Stored) (parent uint64, _ error) {
	if len(ev.Hashes) == 0 {
		return 0, nil
	}
	ratio, err := x.ratioOf(ev)
	if err != nil {
		return 0, err
	}
	s := &x.streams[x.stream(ev.Worker, ev.Rank)]
	if s.ratio != 0 && s.ratio != ratio {
		return 0, ErrBlockSize
	}
	if !ev.HasParent {
		return x.seedOf(s, ev.Seed), nil
	}
	p, ok := s.byEng[ev.Parent]
	if !ok {
		return 0, ErrUnknownParent
	}
	return p, nil
}

// ratioOf returns the index blocks per engine block of ev.
func (x *Exact) ratioOf(ev *Stored) (int, error) {
	ebs := ev.BlockSize
	if ebs == 0 {
		ebs = len(ev.Tokens) / len(ev.Hashes)
	}
	if ebs <= 0 || ebs%x.blockSize != 0 {
		return 0, ErrBlockSize
	}
	if len(ev.Tokens) != ebs*len(ev.Hashes) {
		return 0, ErrTokenCount
	}
	return ebs / x.blockSize, nil
}

// seedOf returns the chain seed of a stream's blocks seeded by name.
func (x *Exact) seedOf(s *stream, name string) uint64 {
	if s.seedFor != name || s.seed == 0 {
		s.seedFor, s.seed = name, seed(domainTokens, name)
	}
	return s.seed
}

// HashStored appends to dst the index-block hashes of ev's tokens chained
// from parent (what Prepare returned). It reads nothing that the index's
// other methods change, so it may run concurrently with them: a caller
// that guards the index with a lock hashes without holding it.
func (x *Exact) HashStored(ev *Stored, parent uint64, dst []uint64) []uint64 {
	return chainTokens(parent, ev.Tokens, x.blockSize, dst)
}

// StoreHashed stores at most n engine blocks of ev from its block from on,
// given hs, HashStored's hashes of all of ev chained from parent, and
// returns the next block to store (len(ev.Hashes) when done) with the index
// blocks stored and dropped under the memory bound. A step picks up where
// the stream's chain stands now: when the blocks before from are no longer
// held as they were hashed (the stream was cleared or removed meanwhile),
// it stores nothing and reports ErrUnknownParent.
func (x *Exact) StoreHashed(ev *Stored, parent uint64, hs []uint64, from, n int) (next, stored, dropped int, _ error) {
	end := len(ev.Hashes)
	ratio := len(hs) / max(end, 1)
	slot, ok := x.continues(ev, parent, hs, from, ratio)
	if !ok {
		return end, 0, 0, ErrUnknownParent
	}
	s := &x.streams[slot]
	s.ratio = ratio
	last := min(end, from+max(n, 1))
	for i := from; i < last; i++ {
		eh := ev.Hashes[i]
		sub := hs[i*ratio : (i+1)*ratio]
		if old, ok := s.byEng[eh]; ok {
			if old == sub[ratio-1] {
				continue // a repeat of a block the stream holds
			}
			x.removeEngine(slot, eh)
		}
		if x.held+ratio > x.maxBlocks {
			return end, stored, dropped + (end-i)*ratio, nil
		}
		p := parent
		if i > 0 {
			p = hs[i*ratio-1]
		}
		for _, h := range sub {
			x.hold(slot, h, p)
			p = h
		}
		s = &x.streams[slot]
		s.byEng[eh] = sub[ratio-1]
		stored += ratio
	}
	return last, stored, dropped, nil
}

// continues returns the slot of ev's stream when its chain still reaches
// block from as hs was hashed: from the seed or ev's parent for the first
// block, from the block before otherwise.
func (x *Exact) continues(ev *Stored, parent uint64, hs []uint64, from, ratio int) (int32, bool) {
	if ratio == 0 || len(hs) != ratio*len(ev.Hashes) || from >= len(ev.Hashes) {
		return 0, false
	}
	slot, ok := x.streamIDs[streamKey{ev.Worker, ev.Rank}]
	if !ok {
		return 0, false
	}
	s := &x.streams[slot]
	if s.ratio != 0 && s.ratio != ratio {
		return 0, false
	}
	switch {
	case from > 0:
		h, ok := s.byEng[ev.Hashes[from-1]]
		return slot, ok && h == hs[from*ratio-1]
	case ev.HasParent:
		h, ok := s.byEng[ev.Parent]
		return slot, ok && h == parent
	default:
		return slot, x.seedOf(s, ev.Seed) == parent
	}
}

// Remove drops the blocks with the given engine hashes from a stream;
// unknown hashes are ignored. It returns the number of index blocks removed.
func (x *Exact) Remove(worker string, rank uint32, engineHashes []uint64) int {
	slot, ok := x.streamIDs[streamKey{worker, rank}]
	if !ok {
		return 0
	}
	n := 0
	for _, eh := range engineHashes {
		n += x.removeEngine(slot, eh)
	}
	return n
}

// Clear drops every block of a stream (AllBlocksCleared, an engine
// restart). Cost: O(blocks the stream holds).
func (x *Exact) Clear(worker string, rank uint32) {
	if slot, ok := x.streamIDs[streamKey{worker, rank}]; ok {
		x.clearSlot(slot)
	}
}

// ClearSome drops about limit index blocks of a stream at most, for a
// caller that clears a large stream in steps, and returns the blocks that
// went and whether the stream holds none any more. Meanwhile the stream
// holds part of its blocks.
func (x *Exact) ClearSome(worker string, rank uint32, limit int) (removed int, done bool) {
	slot, ok := x.streamIDs[streamKey{worker, rank}]
	if !ok {
		return 0, true
	}
	s := &x.streams[slot]
	work := 0
	for eh, h := range s.byEng {
		if work >= limit {
			return removed, false
		}
		delete(s.byEng, eh)
		removed += x.releaseChain(slot, h)
		work += max(s.ratio, 1)
	}
	x.clearSlot(slot) // resets what an empty stream keeps
	return removed, true
}

// SetSynced marks a stream in or out of sync, creating it if needed. A
// worker's blocks are reported only while all its streams are synced.
func (x *Exact) SetSynced(worker string, rank uint32, synced bool) {
	slot := x.stream(worker, rank)
	s := &x.streams[slot]
	if s.synced == synced {
		return
	}
	s.synced = synced
	w := &x.workers[s.worker]
	if synced {
		w.unsynced--
	} else {
		w.unsynced++
	}
	x.markWorker(s.worker)
}

// Synced reports whether worker has streams and all of them are synced:
// whether Lookup speaks for it.
func (x *Exact) Synced(worker string) bool {
	w, ok := x.workerIDs[worker]
	return ok && x.workers[w].unsynced == 0
}

// RemoveWorker drops every stream of worker.
func (x *Exact) RemoveWorker(worker string) {
	wi, ok := x.workerIDs[worker]
	if !ok {
		return
	}
	w := &x.workers[wi]
	for _, slot := range w.slots {
		x.clearSlot(slot)
		x.synced[slot/64] &^= uint64(1) << (slot % 64)
		delete(x.streamIDs, streamKey{worker, x.streams[slot].rank})
		x.streams[slot] = stream{}
		x.freeSlot = append(x.freeSlot, slot)
	}
	x.workers[wi] = exactWorker{}
	delete(x.workerIDs, worker)
	x.freeWork = append(x.freeWork, wi)
	x.order = slices.DeleteFunc(x.order, func(i int32) bool { return i == wi })
}

// Lookup appends to dst, for every synced worker holding at least the first
// block of hashes (tollgate's HashTokens of a prompt), the number of cached
// tokens: the longest leading run of hashes one of its streams holds, times
// blockTokens. Entries are sorted by worker. Lookup allocates nothing once
// its scratch has grown to the worker count. Cost: O(len(matched) × streams/64).
func (x *Exact) Lookup(hashes []uint64, blockTokens uint64, dst []sched.CachedTokens) []sched.CachedTokens {
	if len(hashes) == 0 || len(x.order) == 0 {
		return dst
	}
	w := x.words
	active := append(x.active[:0], x.synced[:w]...)
	next := slices.Grow(x.next[:0], w)[:w]
	if n := len(x.workers); len(x.depth) < n {
		x.depth = append(x.depth, make([]uint32, n-len(x.depth))...)
	}
	matched := 0
	for i, h := range hashes {
		e, ok := x.byHash[h]
		if !ok {
			break
		}
		any := uint64(0)
		if r := x.row[e]; r >= 0 {
			row := x.bits[int(r)*w : int(r)*w+w]
			for j := range w {
				next[j] = active[j] & row[j]
				any |= next[j]
			}
		} else {
			clear(next)
			slot := x.solo[e]
			bit := uint64(1) << (slot % 64)
			next[slot/64] = active[slot/64] & bit
			any = next[slot/64]
		}
		x.settle(active, next, uint32(i))
		active, next = next, active
		matched = i + 1
		if any == 0 {
			break
		}
	}
	x.settle(active, nil, uint32(matched))
	for _, wi := range x.order {
		if d := x.depth[wi]; d > 0 {
			dst = append(dst, sched.CachedTokens{Worker: x.workers[wi].name, Tokens: uint64(d) * blockTokens})
			x.depth[wi] = 0
		}
	}
	x.active, x.next = active, next
	return dst
}

// settle credits depth d to the workers of the streams in active that are
// not in next (nil: none).
func (x *Exact) settle(active, next []uint64, d uint32) {
	if d == 0 {
		return
	}
	for j, a := range active {
		if next != nil {
			a &^= next[j]
		}
		for a != 0 {
			b := bits.TrailingZeros64(a)
			a &= a - 1
			wi := x.streams[j*64+b].worker
			x.depth[wi] = max(x.depth[wi], d)
		}
	}
}

// stream returns the slot of (worker, rank), creating it.
func (x *Exact) stream(worker string, rank uint32) int32 {
	k := streamKey{worker, rank}
	if slot, ok := x.streamIDs[k]; ok {
		return slot
	}
	wi, ok := x.workerIDs[worker]
	if !ok {
		if n := len(x.freeWork); n > 0 {
			wi = x.freeWork[n-1]
			x.freeWork = x.freeWork[:n-1]
		} else {
			wi = int32(len(x.workers))
			x.workers = append(x.workers, exactWorker{})
		}
		x.workers[wi] = exactWorker{name: worker}
		x.workerIDs[worker] = wi
		at, _ := slices.BinarySearchFunc(x.order, worker, func(i int32, name string) int {
			return strings.Compare(x.workers[i].name, name)
		})
		x.order = slices.Insert(x.order, at, wi)
	}
	var slot int32
	if n := len(x.freeSlot); n > 0 {
		slot = x.freeSlot[n-1]
		x.freeSlot = x.freeSlot[:n-1]
	} else {
		slot = int32(len(x.streams))
		x.streams = append(x.streams, stream{})
		x.grow(len(x.streams))
	}
	x.streams[slot] = stream{live: true, synced: true, worker: wi, rank: rank, byEng: make(map[uint64]uint64)}
	x.streamIDs[k] = slot
	w := &x.workers[wi]
	w.slots = append(w.slots, slot)
	x.markWorker(wi)
	return slot
}

// grow widens every holder bitset to fit n streams.
func (x *Exact) grow(n int) {
	w := (n + 63) / 64
	if w <= x.words && len(x.synced) >= x.words {
		return
	}
	w = max(w, x.words)
	if w > x.words {
		rows := len(x.bits) / x.words
		nb := make([]uint64, rows*w)
		for r := range rows {
			copy(nb[r*w:], x.bits[r*x.words:(r+1)*x.words])
		}
		x.bits = nb
	}
	x.words = w
	x.synced = append(x.synced, make([]uint64, w-len(x.synced))...)
}

// markWorker recomputes the synced bits of a worker's streams.
func (x *Exact) markWorker(wi int32) {
	w := &x.workers[wi]
	on := w.name != "" && w.unsynced == 0
	for _, slot := range w.slots {
		bit := uint64(1) << (slot % 64)
		if on && x.streams[slot].live {
			x.synced[slot/64] |= bit
		} else {
			x.synced[slot/64] &^= bit
		}
	}
}

// hold makes slot a holder of h (whose chain parent is parent).
func (x *Exact) hold(slot int32, h, parent uint64) {
	s := &x.streams[slot]
	e, ok := x.byHash[h]
	switch {
	case !ok:
		if n := len(x.freeEnt); n > 0 {
			e = x.freeEnt[n-1]
			x.freeEnt = x.freeEnt[:n-1]
			x.hashes[e], x.parents[e], x.holders[e], x.solo[e], x.row[e] = h, parent, 0, slot, -1
		} else {
			e = int32(len(x.hashes))
			x.hashes = append(x.hashes, h)
			x.parents = append(x.parents, parent)
			x.holders = append(x.holders, 0)
			x.solo = append(x.solo, slot)
			x.row = append(x.row, -1)
		}
		x.byHash[h] = e
	case x.holds(e, slot):
		if s.dups == nil {
			s.dups = make(map[uint64]uint32)
		}
		s.dups[h]++
		x.held++
		return
	case x.row[e] < 0:
		// A second holder: move to a bitset row.
		r := x.newRow()
		x.row[e] = r
		x.setBit(r, x.solo[e], true)
		x.setBit(r, slot, true)
	default:
		x.setBit(x.row[e], slot, true)
	}
	x.holders[e]++
	s.blocks++
	x.blocks++
	x.held++
}

// holds reports whether slot holds entry e.
func (x *Exact) holds(e, slot int32) bool {
	if r := x.row[e]; r >= 0 {
		return x.bits[int(r)*x.words+int(slot/64)]&(uint64(1)<<(slot%64)) != 0
	}
	return x.solo[e] == slot
}

func (x *Exact) setBit(r, slot int32, on bool) {
	word := &x.bits[int(r)*x.words+int(slot/64)]
	if on {
		*word |= uint64(1) << (slot % 64)
	} else {
		*word &^= uint64(1) << (slot % 64)
	}
}

func (x *Exact) newRow() int32 {
	if n := len(x.freeRow); n > 0 {
		r := x.freeRow[n-1]
		x.freeRow = x.freeRow[:n-1]
		return r
	}
	r := int32(len(x.bits) / x.words)
	x.bits = append(x.bits, make([]uint64, x.words)...)
	return r
}

// unhold drops slot from entry e (which it holds), freeing what empties.
func (x *Exact) unhold(e, slot int32) {
	if r := x.row[e]; r >= 0 {
		x.setBit(r, slot, false)
	}
	x.streams[slot].blocks--
	x.blocks--
	x.held--
	if x.holders[e]--; x.holders[e] == 0 {
		if r := x.row[e]; r >= 0 {
			x.freeRow = append(x.freeRow, r) // all its bits are clear
		}
		delete(x.byHash, x.hashes[e])
		x.freeEnt = append(x.freeEnt, e)
	}
}

// release drops slot's hold on h, unless the stream stored it more than
// once; it returns h's chain parent and whether the hold went.
func (x *Exact) release(slot int32, h uint64) (uint64, bool) {
	e, ok := x.byHash[h]
	if !ok {
		return 0, false
	}
	parent := x.parents[e]
	s := &x.streams[slot]
	if d := s.dups[h]; d > 0 {
		if d == 1 {
			delete(s.dups, h)
		} else {
			s.dups[h] = d - 1
		}
		x.held--
		return parent, false
	}
	if !x.holds(e, slot) {
		return parent, false
	}
	x.unhold(e, slot)
	return parent, true
}

// removeEngine drops one engine block of a stream.
func (x *Exact) removeEngine(slot int32, eh uint64) int {
	s := &x.streams[slot]
	h, ok := s.byEng[eh]
	if !ok {
		return 0
	}
	delete(s.byEng, eh)
	return x.releaseChain(slot, h)
}

// releaseChain releases the index blocks of one engine block of a stream,
// h its last, and returns how many went.
func (x *Exact) releaseChain(slot int32, h uint64) int {
	n := 0
	for range x.streams[slot].ratio {
		p, gone := x.release(slot, h)
		if gone {
			n++
		}
		h = p
	}
	return n
}

// clearSlot drops every block of a stream. Cost: O(blocks the stream
// holds): every hold is reached from the engine block that made it.
func (x *Exact) clearSlot(slot int32) {
	for _, h := range x.streams[slot].byEng {
		x.releaseChain(slot, h)
	}
	s := &x.streams[slot]
	clear(s.byEng)
	s.ratio = 0
	s.dups = nil
}
