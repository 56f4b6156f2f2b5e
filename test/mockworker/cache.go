package mockworker

import "container/list"

// FNV-1a 64-bit parameters for block hashes.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// blockHashes returns the chained hashes of the full blocks of tokens: the
// hash of block i covers block i's token ids and the hash of block i-1, so
// equal hashes mean equal prefixes. A trailing partial block has no hash.
func blockHashes(tokens []int, blockSize int) []uint64 {
	hashes := make([]uint64, 0, len(tokens)/blockSize)
	parent := uint64(fnvOffset64)
	for start := 0; start+blockSize <= len(tokens); start += blockSize {
		h := fnvMix(fnvOffset64, parent, 8)
		for _, id := range tokens[start : start+blockSize] {
			h = fnvMix(h, uint64(id), 8) // Ids are validated non-negative.
		}
		hashes = append(hashes, h)
		parent = h
	}
	return hashes
}

// fnvMix feeds the low n bytes of v, least significant first, into the
// FNV-1a state h.
func fnvMix(h, v uint64, n int) uint64 {
	for range n {
		h ^= v & 0xff
		h *= fnvPrime64
		v >>= 8
	}
	return h
}

// prefixCache is the engine's prefix cache: a set of block hashes bounded to
// capacity entries with least-recently-used eviction. It is not safe for
// concurrent use; the engine guards it with its mutex.
//
// Blocks are touched and inserted tail first, so within one prompt the first
// block is the most recently used; eviction then removes the tail of a
// prefix before its head, as vLLM frees blocks, and never leaves a cached
// block unreachable behind an evicted parent of the same prompt.
type prefixCache struct {
	capacity int
	lru      *list.List // Front is the most recently used; values are uint64.
	index    map[uint64]*list.Element
}

// newPrefixCache returns an empty cache of capacity blocks.
func newPrefixCache(capacity int) *prefixCache {
	return &prefixCache{capacity: capacity, lru: list.New(), index: make(map[uint64]*list.Element)}
}

// lookup returns how many leading blocks of hashes are cached and marks
// them used.
func (c *prefixCache) lookup(hashes []uint64) int {
	hits := 0
	for hits < len(hashes) {
		if _, ok := c.index[hashes[hits]]; !ok {
			break
		}
		hits++
	}
	for i := hits - 1; i >= 0; i-- {
		c.lru.MoveToFront(c.index[hashes[i]])
	}
	return hits
}

// insert caches every block of hashes, evicting the least recently used
// blocks beyond capacity. It reports which blocks were new and which hashes
// were evicted, for the KV events.
func (c *prefixCache) insert(hashes []uint64) (inserted []bool, evicted []uint64) {
	inserted = make([]bool, len(hashes))
	for i := len(hashes) - 1; i >= 0; i-- {
		h := hashes[i]
		if e, ok := c.index[h]; ok {
			c.lru.MoveToFront(e)
			continue
		}
		c.index[h] = c.lru.PushFront(h)
		inserted[i] = true
		if c.lru.Len() > c.capacity {
			oldest := c.lru.Back()
			c.lru.Remove(oldest)
			old := oldest.Value.(uint64)
			delete(c.index, old)
			evicted = append(evicted, old)
		}
	}
	return inserted, evicted
}

// clear empties the cache.
func (c *prefixCache) clear() {
	c.lru.Init()
	clear(c.index)
}

// len returns the number of cached blocks.
func (c *prefixCache) len() int { return c.lru.Len() }
