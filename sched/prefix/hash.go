package prefix

import (
	"encoding/binary"
	"math/bits"
)

// The block hash is a small, fixed algorithm so that its values are stable
// across processes and releases:
//
//	seed(domain, model) = fmix(fnv1a64(model) ^ domain)
//	h_0 parent          = seed
//	block(parent, b)    = fmix(absorb(… absorb(parent ^ k3, w_1) …, w_n) ^ len(b))
//
// where the words w_j are the block's token ids taken two at a time
// (little end first; a lone last id is a word of its own) or its bytes taken
// eight at a time, little-endian and zero-padded; absorb is an xxHash-style
// round and fmix the splitmix64 finalizer. Changing any constant changes
// every hash: treat them as a file format.
const (
	k1 = 0x9E3779B97F4A7C15
	k2 = 0xC2B2AE3D27D4EB4F
	k3 = 0x165667B19E3779F9

	domainTokens = 0x746F6B656E730001 // "tokens" tag
	domainBytes  = 0x6279746573000002 // "bytes" tag

	fnvOffset = 0xcbf29ce484222325
	fnvPrime  = 0x100000001b3
)

// HashTokens appends to dst the chained hashes of the full blocks of
// blockSize token ids in ids, seeded by model, and returns the extended
// slice. tollgate seeds a LoRA adapter's blocks by the adapter's name and a
// base model's blocks by "" (see the package doc). A trailing partial block is not hashed; blockSize <= 0 hashes
// nothing. Pass buf[:0] to reuse a buffer.
func HashTokens(model string, ids []uint32, blockSize int, dst []uint64) []uint64 {
	if blockSize <= 0 {
		return dst
	}
	return chainTokens(seed(domainTokens, model), ids, blockSize, dst)
}

// chainTokens continues a token chain from parent (the seed, or the hash of
// the block before ids): it appends the hashes of the full blocks of ids.
func chainTokens(parent uint64, ids []uint32, blockSize int, dst []uint64) []uint64 {
	h := parent
	for len(ids) >= blockSize {
		block := ids[:blockSize]
		ids = ids[blockSize:]
		x := h ^ k3
		for len(block) >= 2 {
			x = absorb(x, uint64(block[0])|uint64(block[1])<<32)
			block = block[2:]
		}
		if len(block) == 1 {
			x = absorb(x, uint64(block[0]))
		}
		h = fmix(x ^ uint64(blockSize))
		dst = append(dst, h)
	}
	return dst
}

// HashBytes appends to dst the chained hashes of the full blocks of
// blockBytes bytes in b, seeded by model, and returns the extended slice. It
// serves prompts whose tokens are only estimated. A trailing partial block is
// not hashed; blockBytes <= 0 hashes nothing.
func HashBytes[T ~string | ~[]byte](model string, b T, blockBytes int, dst []uint64) []uint64 {
	if blockBytes <= 0 {
		return dst
	}
	h := seed(domainBytes, model)
	for len(b) >= blockBytes {
		block := b[:blockBytes]
		b = b[blockBytes:]
		x := h ^ k3
		for len(block) >= 8 {
			x = absorb(x, le64(block))
			block = block[8:]
		}
		if len(block) > 0 {
			var tail [8]byte
			copy(tail[:], block)
			x = absorb(x, binary.LittleEndian.Uint64(tail[:]))
		}
		h = fmix(x ^ uint64(blockBytes))
		dst = append(dst, h)
	}
	return dst
}

// le64 reads 8 bytes of b as a little-endian uint64, for strings and byte
// slices alike (the prompt is hashed without copying it to a []byte).
func le64[T ~string | ~[]byte](b T) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// seed derives the chain's starting value from the model name.
func seed(domain uint64, model string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(model); i++ {
		h ^= uint64(model[i])
		h *= fnvPrime
	}
	return fmix(h ^ domain)
}

// absorb mixes one 64-bit word into x (an xxHash64 round).
func absorb(x, w uint64) uint64 {
	return bits.RotateLeft64(x^(w*k2), 31) * k1
}

// fmix is the splitmix64 finalizer: a bijection with full avalanche.
func fmix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
