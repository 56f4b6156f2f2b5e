package mockworker

import (
	"testing"
)

func seqTokens(start, n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = start + i
	}
	return ids
}

func TestBlockHashes_ChainedOverFullBlocks(t *testing.T) {
	a := blockHashes(seqTokens(0, 9), 4)
	if len(a) != 2 {
		t.Fatalf("9 tokens in blocks of 4 give %d hashes, want 2 (no partial block)", len(a))
	}
	// Same second block after a different first block: the chain differs.
	b := blockHashes(append([]int{99, 1, 2, 3}, seqTokens(4, 4)...), 4)
	if a[1] == b[1] {
		t.Errorf("block 1 hashes equal after different block 0; want chained hashes")
	}
	if c := blockHashes(seqTokens(0, 8), 4); c[0] != a[0] || c[1] != a[1] {
		t.Errorf("hashes of the same prefix differ: %v vs %v", c, a[:2])
	}
}

func TestPrefixCache_LookupCountsLeadingHits(t *testing.T) {
	c := newPrefixCache(16)
	h := blockHashes(seqTokens(0, 16), 4)
	if got := c.lookup(h); got != 0 {
		t.Fatalf("lookup on an empty cache = %d, want 0", got)
	}
	c.insert(h[:3])
	if got := c.lookup(h); got != 3 {
		t.Errorf("lookup = %d, want 3 cached leading blocks", got)
	}
	other := blockHashes(append([]int{7, 7, 7, 7}, seqTokens(4, 12)...), 4)
	if got := c.lookup(other); got != 0 {
		t.Errorf("lookup of a prompt differing in block 0 = %d, want 0", got)
	}
}

func TestPrefixCache_LRUBoundEvictsTailFirst(t *testing.T) {
	c := newPrefixCache(4)
	a := blockHashes(seqTokens(0, 8), 4)    // Two blocks.
	b := blockHashes(seqTokens(100, 8), 4)  // Two blocks.
	cc := blockHashes(seqTokens(200, 4), 4) // One block.
	c.insert(a)
	c.insert(b)
	if c.len() != 4 {
		t.Fatalf("len = %d, want 4", c.len())
	}
	c.insert(cc) // Evicts the least recently used block: a's tail.
	if c.len() != 4 {
		t.Fatalf("len = %d after overflow, want the bound 4", c.len())
	}
	if got := c.lookup(a); got != 1 {
		t.Errorf("lookup(a) = %d, want 1: a's head kept, its tail evicted", got)
	}
	if got := c.lookup(b); got != 2 {
		t.Errorf("lookup(b) = %d, want 2", got)
	}
	// A prompt longer than the cache keeps its head blocks.
	long := blockHashes(seqTokens(300, 40), 4)
	c.insert(long)
	if c.len() != 4 {
		t.Fatalf("len = %d, want 4", c.len())
	}
	if got := c.lookup(long); got != 4 {
		t.Errorf("lookup(long) = %d, want its first 4 blocks", got)
	}
}
