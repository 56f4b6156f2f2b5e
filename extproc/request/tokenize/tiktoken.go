package tokenize

import (
	"fmt"

	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// tiktokenPatterns are the pre-tokenization patterns of the tiktoken
// encodings whose ranks are embedded, as tiktoken defines them.
var tiktokenPatterns = map[string]string{
	"cl100k_base": cl100kPattern,
	"o200k_base":  o200kPattern,
	"p50k_base":   gpt2Pattern,
	"r50k_base":   gpt2Pattern,
}

// TiktokenEncodings lists the encodings whose ranks are embedded.
var TiktokenEncodings = []string{"cl100k_base", "o200k_base", "p50k_base", "r50k_base"}

// NewTiktoken loads a tiktoken encoding from the ranks embedded in the
// binary (never from the network). Text is encoded as ordinary text:
// special-token strings in a prompt count as the text they are, as OpenAI's
// servers count them. The encoding runs on this package's BPE engine, which
// gives the same ids as tiktoken (merges by lowest rank, leftmost first; a
// piece that is itself a token is emitted whole).
func NewTiktoken(encoding string) (*BPE, error) {
	pat, ok := tiktokenPatterns[encoding]
	if !ok {
		return nil, fmt.Errorf("unknown tiktoken encoding %q: want one of %v", encoding, TiktokenEncodings)
	}
	ranks, err := tiktokenloader.NewOfflineLoader().LoadTiktokenBpe(encoding + ".tiktoken")
	if err != nil {
		return nil, fmt.Errorf("load tiktoken encoding %s: %w", encoding, err)
	}
	model, err := bpeFromRanks(ranks)
	if err != nil {
		return nil, fmt.Errorf("tiktoken encoding %s: %w", encoding, err)
	}
	t := &BPE{
		exact: exact{name: "tiktoken:" + encoding},
		pre:   &byteLevelPT{re: mustPattern(pat)},
		model: model,
	}
	t.initPools()
	return t, nil
}

// bpeFromRanks builds a byte-level BPE model from tiktoken ranks (token
// bytes → rank, which is also the id). The merge of two adjacent tokens is
// allowed when their concatenation is a token, and ranks by it.
func bpeFromRanks(ranks map[string]int) (*bpeModel, error) {
	b := &bpeModel{
		vocab:        make(map[string]int32, len(ranks)),
		merges:       make(map[uint64]mergeRule, len(ranks)*2),
		unk:          -1,
		ignoreMerges: true,
	}
	for i := range b.lowChars {
		b.lowChars[i] = -1
	}
	var key []byte
	for tok, rank := range ranks {
		if rank < 0 || rank > 1<<31-1 {
			return nil, fmt.Errorf("token %q has rank %d outside [0, 2^31)", tok, rank)
		}
		key = appendByteLevel(key[:0], tok)
		b.vocab[string(key)] = int32(rank)
		if len(tok) == 1 {
			b.lowChars[byteRune[tok[0]]] = int32(rank)
		}
	}
	for c := range 256 {
		if b.lowChars[byteRune[c]] < 0 {
			return nil, fmt.Errorf("no token for byte 0x%02x", c)
		}
	}
	for tok, rank := range ranks {
		for k := 1; k < len(tok); k++ {
			left, ok1 := ranks[tok[:k]]
			right, ok2 := ranks[tok[k:]]
			if ok1 && ok2 {
				b.merges[uint64(uint32(left))<<32|uint64(uint32(right))] = mergeRule{rank: int32(rank), id: int32(rank)}
			}
		}
	}
	return b, nil
}
