package prefix

import (
	"slices"
	"testing"
)

func seqIDs(n int, start uint32) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = start + uint32(i)*7919
	}
	return ids
}

func TestHashTokensFullBlocksOnly(t *testing.T) {
	for _, tc := range []struct {
		n, block, want int
	}{
		{0, 16, 0}, {15, 16, 0}, {16, 16, 1}, {31, 16, 1}, {32, 16, 2}, {100, 16, 6},
		{5, 1, 5}, {7, 3, 2}, {10, 0, 0}, {10, -4, 0},
	} {
		got := HashTokens("m", seqIDs(tc.n, 1), tc.block, nil)
		if len(got) != tc.want {
			t.Errorf("HashTokens(n=%d, block=%d) gave %d hashes, want %d", tc.n, tc.block, len(got), tc.want)
		}
	}
}

func TestHashTokensChaining(t *testing.T) {
	a := seqIDs(64, 1)
	b := slices.Clone(a)
	b[40] ^= 1 // differs in block 2 (ids 32..47)
	ha := HashTokens("llama", a, 16, nil)
	hb := HashTokens("llama", b, 16, nil)
	if !slices.Equal(ha[:2], hb[:2]) {
		t.Fatalf("shared leading blocks hash differently: %x vs %x", ha[:2], hb[:2])
	}
	for i := 2; i < 4; i++ {
		if ha[i] == hb[i] {
			t.Errorf("block %d: equal hashes after the prompts diverged", i)
		}
	}
	// Identical block contents at different depths hash differently.
	rep := append(seqIDs(16, 5), seqIDs(16, 5)...)
	hr := HashTokens("llama", rep, 16, nil)
	if hr[0] == hr[1] {
		t.Error("a repeated block hashes the same at depth 0 and 1: hashes are not chained")
	}
	// A suffix-only change leaves every earlier block intact.
	c := slices.Clone(a)
	c[63]++
	hc := HashTokens("llama", c, 16, nil)
	if !slices.Equal(ha[:3], hc[:3]) || ha[3] == hc[3] {
		t.Errorf("suffix change: got %x, want the first 3 of %x and a new last", hc, ha)
	}
}

func TestHashTokensModelSeeding(t *testing.T) {
	ids := seqIDs(48, 3)
	ha := HashTokens("model-a", ids, 16, nil)
	hb := HashTokens("model-b", ids, 16, nil)
	for i := range ha {
		if ha[i] == hb[i] {
			t.Errorf("block %d: same hash for two models", i)
		}
	}
	if h := HashTokens("", ids, 16, nil); h[0] == ha[0] {
		t.Error("empty model name hashes like model-a")
	}
}

func TestHashStableValues(t *testing.T) {
	// The hashes are specified to be stable across processes, platforms and
	// releases. A change to these values is a deliberate format change.
	got := HashTokens("llama", []uint32{1, 2, 3, 4, 5, 6, 7, 8}, 4, nil)
	want := []uint64{0x705a8326d5649987, 0xa7e691882805d3d7}
	if !slices.Equal(got, want) {
		t.Errorf("HashTokens = %#x, want %#x", got, want)
	}
	gotB := HashBytes("llama", []byte("The quick brown fox jumps over the lazy dog."), 10, nil)
	wantB := []uint64{0x2cd8d5ad71a0139a, 0x7e9cf095d89e0793, 0x9edd9ac5a3f8a642, 0xd6eed92402343d1d}
	if !slices.Equal(gotB, wantB) {
		t.Errorf("HashBytes = %#x, want %#x", gotB, wantB)
	}
}

func TestHashBytes(t *testing.T) {
	text := []byte("The quick brown fox jumps over the lazy dog. The quick brown cat sleeps.")
	if got := len(HashBytes("m", text, 8, nil)); got != len(text)/8 {
		t.Fatalf("got %d blocks, want %d", got, len(text)/8)
	}
	other := slices.Clone(text)
	other[len(other)-3] = 'X'
	ha := HashBytes("m", text, 8, nil)
	hb := HashBytes("m", other, 8, nil)
	last := len(ha) - 1
	if !slices.Equal(ha[:last], hb[:last]) || ha[last] == hb[last] {
		t.Errorf("byte chains: %x vs %x", ha, hb)
	}
	if hm := HashBytes("n", text, 8, nil); hm[0] == ha[0] {
		t.Error("byte hashes are not seeded by model")
	}
	// Odd block sizes exercise the zero-padded tail word; padding must not
	// make "ab" and "ab\x00" equal.
	if HashBytes("m", []byte("abc"), 3, nil)[0] == HashBytes("m", []byte("ab\x00"), 3, nil)[0] {
		t.Error("padding collision")
	}
	if HashBytes("m", text, 0, nil) != nil {
		t.Error("blockBytes 0 hashed something")
	}
}

func TestHashDomainsDiffer(t *testing.T) {
	ids := []uint32{0x64636261, 0x68676665} // "abcdefgh" as little-endian words
	ht := HashTokens("m", ids, 2, nil)
	hb := HashBytes("m", []byte("abcdefgh"), 8, nil)
	if ht[0] == hb[0] {
		t.Error("token and byte hashes of the same words collide")
	}
}

func TestHashAppendsToDst(t *testing.T) {
	dst := []uint64{42}
	got := HashTokens("m", seqIDs(32, 1), 16, dst)
	if len(got) != 3 || got[0] != 42 {
		t.Errorf("HashTokens did not append: %v", got)
	}
	buf := make([]uint64, 0, 8)
	got = HashTokens("m", seqIDs(32, 1), 16, buf)
	if &got[0] != &buf[:1][0] {
		t.Error("HashTokens did not reuse dst's capacity")
	}
}

func TestHashSpread(t *testing.T) {
	// Sequential one-token prompts must give distinct, well-spread hashes:
	// every bit flips in roughly half of them.
	const n = 4096
	var ones [64]int
	seen := make(map[uint64]bool, n)
	for i := range n {
		h := HashTokens("m", []uint32{uint32(i)}, 1, nil)[0]
		if seen[h] {
			t.Fatalf("collision at %d", i)
		}
		seen[h] = true
		for b := range 64 {
			ones[b] += int(h >> b & 1)
		}
	}
	for b, c := range ones {
		if c < n*4/10 || c > n*6/10 {
			t.Errorf("bit %d set in %d of %d hashes", b, c, n)
		}
	}
}

func BenchmarkHashTokens4k(b *testing.B) {
	ids := seqIDs(4096, 1)
	dst := make([]uint64, 0, 256)
	b.SetBytes(int64(len(ids) * 4))
	b.ReportAllocs()
	for b.Loop() {
		dst = HashTokens("llama", ids, 16, dst[:0])
	}
}

func BenchmarkHashBytes16k(b *testing.B) {
	text := make([]byte, 16384)
	for i := range text {
		text[i] = byte('a' + i%26)
	}
	dst := make([]uint64, 0, 256)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		dst = HashBytes("llama", text, 64, dst[:0])
	}
}

func TestHashBytes_StringEqualsBytes(t *testing.T) {
	text := "The quick brown fox jumps over the lazy dog, twice: the quick brown fox."
	for _, bb := range []int{3, 8, 13, 64} {
		if !slices.Equal(HashBytes("m", text, bb, nil), HashBytes("m", []byte(text), bb, nil)) {
			t.Errorf("block %d: a string and its bytes hash differently", bb)
		}
	}
}
