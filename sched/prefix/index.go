package prefix

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/sched"
)

// Defaults for New.
const (
	// DefaultTTL is how long a recorded block stays matchable
	// (--router-ttl-secs, Dynamo's router_ttl_secs).
	DefaultTTL = 120 * time.Second
	// DefaultMaxEntries bounds the index at about 1M (hash, worker)
	// entries, roughly 64 MiB including the hash map.
	DefaultMaxEntries = 1 << 20
)

// nilIdx ends every intrusive list.
const nilIdx = -1

// node is one (block hash, worker) entry. Nodes live in one slab and link
// by index: into the LRU list (prev toward the most recent) and into the
// chain of nodes that share a hash.
type node struct {
	hash    uint64
	expires int64 // Unix nanoseconds; the entry is live while now < expires
	worker  int32
	prev    int32
	next    int32
	chain   int32
}

// Index records which workers were sent which prompt blocks. The zero value
// is not usable; call New. An Index is not safe for concurrent use.
//
// Invariants: every live node is in exactly one hash chain and in the LRU
// list; a hash chain holds at most one node per worker; len(byHash) <= count
// <= maxEntries.
type Index struct {
	ttl        int64
	maxEntries int

	nodes []node
	free  int32 // free-list head, linked through node.next
	head  int32 // most recently recorded
	tail  int32 // least recently recorded
	count int

	byHash map[uint64]int32

	workerIDs   map[string]int32
	workerNames []string
	freeWorkers []int32

	// Lookup scratch, indexed by worker id.
	mark  []uint64
	depth []uint32
	gen   uint64
	cands []int32
	live  []int32
}

// New returns an empty index whose entries expire ttl after they were last
// recorded and which holds at most maxEntries (hash, worker) entries. A ttl
// <= 0 means DefaultTTL; maxEntries <= 0 means DefaultMaxEntries.
func New(ttl time.Duration, maxEntries int) *Index {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	if maxEntries > math.MaxInt32 {
		maxEntries = math.MaxInt32
	}
	return &Index{
		ttl:        int64(ttl),
		maxEntries: maxEntries,
		free:       nilIdx,
		head:       nilIdx,
		tail:       nilIdx,
		byHash:     make(map[uint64]int32),
		workerIDs:  make(map[string]int32),
	}
}

// Len returns the number of entries held, including expired entries not yet
// reclaimed.
func (x *Index) Len() int { return x.count }

// Record notes that worker was sent the prompt whose chained block hashes
// are hashes, at time now: each (hash, worker) entry is created or refreshed
// to expire at now+TTL. Blocks are recorded deepest first, so that under the
// memory bound a prompt's leading blocks, which every longer match needs,
// are evicted last. Cost: O(len(hashes) × workers per hash), amortized.
func (x *Index) Record(now time.Time, worker string, hashes []uint64) {
	if len(hashes) == 0 {
		return
	}
	t := now.UnixNano()
	x.prune(t)
	expires := t + x.ttl
	if expires < t { // saturate instead of wrapping
		expires = math.MaxInt64
	}
	w := x.intern(worker)
	for i := len(hashes) - 1; i >= 0; i-- {
		h := hashes[i]
		if n := x.find(h, w); n != nilIdx {
			x.nodes[n].expires = expires
			x.unlinkLRU(n)
			x.pushFront(n)
			continue
		}
		if x.count >= x.maxEntries {
			x.remove(x.tail)
		}
		n := x.alloc()
		chain, ok := x.byHash[h]
		if !ok {
			chain = nilIdx
		}
		x.nodes[n] = node{hash: h, expires: expires, worker: w, chain: chain}
		x.byHash[h] = n
		x.pushFront(n)
		x.count++
	}
}

// Lookup appends to dst, for every worker that holds at least the first
// block of hashes at time now, the number of cached tokens: the count of
// leading consecutive blocks the worker holds times blockTokens. It returns
// the extended slice, sorted by worker. Lookup changes no entry. Cost:
// O(blocks × workers holding them); it allocates only to grow dst and its
// scratch space.
func (x *Index) Lookup(now time.Time, hashes []uint64, blockTokens uint64, dst []sched.CachedTokens) []sched.CachedTokens {
	if len(hashes) == 0 {
		return dst
	}
	t := now.UnixNano()
	if n := len(x.workerNames); len(x.mark) < n {
		x.mark = append(x.mark, make([]uint64, n-len(x.mark))...)
		x.depth = append(x.depth, make([]uint32, n-len(x.depth))...)
	}
	cands := x.cands[:0]
	for n := x.chainHead(hashes[0]); n != nilIdx; n = x.nodes[n].chain {
		if nd := &x.nodes[n]; t < nd.expires {
			x.depth[nd.worker] = 1
			cands = append(cands, nd.worker)
		}
	}
	live := append(x.live[:0], cands...)
	for _, h := range hashes[1:] {
		if len(live) == 0 {
			break
		}
		x.gen++
		for n := x.chainHead(h); n != nilIdx; n = x.nodes[n].chain {
			if nd := &x.nodes[n]; t < nd.expires {
				x.mark[nd.worker] = x.gen
			}
		}
		kept := live[:0]
		for _, w := range live {
			if x.mark[w] == x.gen {
				x.depth[w]++
				kept = append(kept, w)
			}
		}
		live = kept
	}
	start := len(dst)
	for _, w := range cands {
		dst = append(dst, sched.CachedTokens{Worker: x.workerNames[w], Tokens: uint64(x.depth[w]) * blockTokens})
		x.depth[w] = 0
	}
	slices.SortFunc(dst[start:], func(a, b sched.CachedTokens) int { return strings.Compare(a.Worker, b.Worker) })
	x.cands, x.live = cands, live
	return dst
}

// RemoveWorker drops every entry of worker, for a worker that left the set.
// Cost: O(entries held).
func (x *Index) RemoveWorker(worker string) {
	w, ok := x.workerIDs[worker]
	if !ok {
		return
	}
	for n := x.head; n != nilIdx; {
		next := x.nodes[n].next
		if x.nodes[n].worker == w {
			x.remove(n)
		}
		n = next
	}
	delete(x.workerIDs, worker)
	x.workerNames[w] = ""
	x.freeWorkers = append(x.freeWorkers, w)
}

// Prune reclaims the entries that have expired at now, oldest first, and
// returns how many it removed. Record prunes too; Prune lets an idle index
// give its memory back. If now ever went backwards between Records, a few
// expired entries may wait behind a live one until it expires in turn.
func (x *Index) Prune(now time.Time) int {
	return x.prune(now.UnixNano())
}

func (x *Index) prune(t int64) int {
	removed := 0
	for x.tail != nilIdx && x.nodes[x.tail].expires <= t {
		x.remove(x.tail)
		removed++
	}
	return removed
}

// intern returns the id of worker, assigning one if needed.
func (x *Index) intern(worker string) int32 {
	if w, ok := x.workerIDs[worker]; ok {
		return w
	}
	var w int32
	if k := len(x.freeWorkers); k > 0 {
		w = x.freeWorkers[k-1]
		x.freeWorkers = x.freeWorkers[:k-1]
		x.workerNames[w] = worker
	} else {
		w = int32(len(x.workerNames))
		x.workerNames = append(x.workerNames, worker)
	}
	x.workerIDs[worker] = w
	return w
}

func (x *Index) chainHead(h uint64) int32 {
	if n, ok := x.byHash[h]; ok {
		return n
	}
	return nilIdx
}

// find returns the node of (h, w), or nilIdx.
func (x *Index) find(h uint64, w int32) int32 {
	for n := x.chainHead(h); n != nilIdx; n = x.nodes[n].chain {
		if x.nodes[n].worker == w {
			return n
		}
	}
	return nilIdx
}

func (x *Index) alloc() int32 {
	if n := x.free; n != nilIdx {
		x.free = x.nodes[n].next
		return n
	}
	x.nodes = append(x.nodes, node{})
	return int32(len(x.nodes) - 1)
}

// remove unlinks node n from its hash chain and the LRU list and frees it.
func (x *Index) remove(n int32) {
	nd := &x.nodes[n]
	if head := x.byHash[nd.hash]; head == n {
		if nd.chain == nilIdx {
			delete(x.byHash, nd.hash)
		} else {
			x.byHash[nd.hash] = nd.chain
		}
	} else {
		for p := head; p != nilIdx; p = x.nodes[p].chain {
			if x.nodes[p].chain == n {
				x.nodes[p].chain = nd.chain
				break
			}
		}
	}
	x.unlinkLRU(n)
	*nd = node{next: x.free}
	x.free = n
	x.count--
}

func (x *Index) pushFront(n int32) {
	nd := &x.nodes[n]
	nd.prev = nilIdx
	nd.next = x.head
	if x.head != nilIdx {
		x.nodes[x.head].prev = n
	}
	x.head = n
	if x.tail == nilIdx {
		x.tail = n
	}
}

func (x *Index) unlinkLRU(n int32) {
	nd := &x.nodes[n]
	if nd.prev != nilIdx {
		x.nodes[nd.prev].next = nd.next
	} else {
		x.head = nd.next
	}
	if nd.next != nilIdx {
		x.nodes[nd.next].prev = nd.prev
	} else {
		x.tail = nd.prev
	}
	nd.prev, nd.next = nilIdx, nilIdx
}
