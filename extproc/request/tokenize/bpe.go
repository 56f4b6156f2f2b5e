package tokenize

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// bpeModel is a BPE vocabulary with ranked merges, as in tokenizer.json's
// model section. It is immutable after loading.
type bpeModel struct {
	vocab map[string]int32
	// merges maps a pair of ids (left<<32 | right) to its rank and the id
	// of the merged token.
	merges map[uint64]mergeRule
	// lowChars holds the ids of one-rune tokens for runes below
	// len(lowChars) (-1: not in the vocabulary); other runes use vocab.
	lowChars [1024]int32
	// byteFallback holds the ids of the <0xXX> tokens when byte_fallback
	// is on and all 256 exist.
	byteFallback *[256]int32
	unk          int32 // -1: no unk token
	fuseUnk      bool
	ignoreMerges bool
	// metaWords is set when every token has its U+2581 (▁) characters
	// only at its start: then no merge can join a character to a
	// following ▁, and a text can be cut before each ▁ that follows
	// another character without changing its encoding.
	metaWords bool
	// bridges are the few tokens that hold a ▁ after another character
	// (Gemma 3 has one, ">▁</"): metaWords then holds with the exception
	// that no cut is made where the text spells a bridge across it.
	bridges []string
}

// maxBridges bounds the bridge tokens the word split tolerates.
const maxBridges = 64

// metaspace is SentencePiece's word marker.
const metaspace = "\u2581"

type mergeRule struct {
	rank int32
	id   int32
}

// hfModel is tokenizer.json's model section.
type hfModel struct {
	Type                    string         `json:"type"`
	Vocab                   map[string]int `json:"vocab"`
	Merges                  []hfMerge      `json:"merges"`
	UnkToken                *string        `json:"unk_token"`
	ContinuingSubwordPrefix *string        `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string        `json:"end_of_word_suffix"`
	FuseUnk                 bool           `json:"fuse_unk"`
	ByteFallback            bool           `json:"byte_fallback"`
	IgnoreMerges            bool           `json:"ignore_merges"`
	// dropout is ignored: inference encodes without it.
}

// hfMerge is one merge rule, written either as "left right" or as
// ["left", "right"].
type hfMerge [2]string

// UnmarshalJSON accepts both merge formats.
func (m *hfMerge) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		left, right, ok := strings.Cut(s, " ")
		if !ok || strings.Contains(right, " ") {
			return fmt.Errorf("merge %q is not two tokens separated by one space", s)
		}
		*m = hfMerge{left, right}
		return nil
	}
	var pair []string
	if err := json.Unmarshal(b, &pair); err != nil {
		return err
	}
	if len(pair) != 2 {
		return fmt.Errorf("merge %v does not have two tokens", pair)
	}
	*m = hfMerge{pair[0], pair[1]}
	return nil
}

func newBPE(m *hfModel) (*bpeModel, error) {
	if m.Type != "" && m.Type != "BPE" {
		return nil, fmt.Errorf("model type %q is not supported (only BPE)", m.Type)
	}
	if len(m.Vocab) == 0 {
		return nil, fmt.Errorf("model has an empty vocab")
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("model continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("model end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	}
	b := &bpeModel{
		vocab:        make(map[string]int32, len(m.Vocab)),
		merges:       make(map[uint64]mergeRule, len(m.Merges)),
		unk:          -1,
		fuseUnk:      m.FuseUnk,
		ignoreMerges: m.IgnoreMerges,
	}
	for i := range b.lowChars {
		b.lowChars[i] = -1
	}
	b.metaWords = true
	for tok, id := range m.Vocab {
		if b.metaWords && strings.Contains(strings.TrimLeft(tok, metaspace), metaspace) {
			b.bridges = append(b.bridges, tok)
			if len(b.bridges) > maxBridges {
				b.metaWords, b.bridges = false, nil
			}
		}
		if id < 0 || id > 1<<31-1 {
			return nil, fmt.Errorf("vocab token %q has id %d outside [0, 2^31)", tok, id)
		}
		b.vocab[tok] = int32(id)
		if r, size := utf8.DecodeRuneInString(tok); size == len(tok) && r < rune(len(b.lowChars)) && r != utf8.RuneError {
			b.lowChars[r] = int32(id)
		}
	}
	for rank, mg := range m.Merges {
		left, ok1 := b.vocab[mg[0]]
		right, ok2 := b.vocab[mg[1]]
		merged, ok3 := b.vocab[mg[0]+mg[1]]
		if !ok1 || !ok2 || !ok3 {
			return nil, fmt.Errorf("merge %d (%q %q) uses a token that is not in the vocab", rank, mg[0], mg[1])
		}
		key := uint64(uint32(left))<<32 | uint64(uint32(right))
		if _, dup := b.merges[key]; !dup { // the first (lowest) rank wins
			b.merges[key] = mergeRule{rank: int32(rank), id: merged}
		}
	}
	if m.UnkToken != nil && *m.UnkToken != "" {
		id, ok := b.vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocab", *m.UnkToken)
		}
		b.unk = id
	}
	if m.ByteFallback {
		var fb [256]int32
		for i := range fb {
			id, ok := b.vocab[fmt.Sprintf("<0x%02X>", i)]
			if !ok {
				return nil, fmt.Errorf("byte_fallback is on but the vocab has no <0x%02X> token", i)
			}
			fb[i] = id
		}
		b.byteFallback = &fb
	}
	return b, nil
}

// splitWords appends to dst the words of a char-level piece, cut before
// each ▁ that follows another character (see metaWords), or p whole.
func (b *bpeModel) splitWords(dst []piece, p piece) []piece {
	if !b.metaWords || p.bytes {
		return append(dst, p)
	}
	s, start := p.s, 0
	for i := 1; i < len(s); {
		j := strings.Index(s[i:], metaspace)
		if j < 0 {
			break
		}
		i += j
		if !strings.HasSuffix(s[:i], metaspace) && !b.bridged(s, i) {
			dst = append(dst, piece{s: s[start:i], first: p.first && start == 0})
			start = i
		}
		i += len(metaspace)
	}
	return append(dst, piece{s: s[start:], first: p.first && start == 0})
}

// bridged reports whether a bridge token is spelled in s across the cut
// before the ▁ at i. No merge can join the two sides of a cut otherwise: a
// merge across it would make a token holding a ▁ after another character.
func (b *bpeModel) bridged(s string, i int) bool {
	for _, t := range b.bridges {
		for k := 1; k < len(t); k++ {
			if !strings.HasPrefix(t[k:], metaspace) || strings.HasSuffix(t[:k], metaspace) {
				continue
			}
			if i-k >= 0 && i-k+len(t) <= len(s) && s[i-k:i-k+len(t)] == t {
				return true
			}
		}
	}
	return false
}

// charID returns the id of the one-rune token r, or -1.
func (b *bpeModel) charID(r rune, s string) int32 {
	if r >= 0 && r < rune(len(b.lowChars)) {
		return b.lowChars[r]
	}
	if id, ok := b.vocab[s]; ok {
		return id
	}
	return -1
}

// symbol is one token of a word being merged, in a linked list over the
// word's initial symbols.
type symbol struct {
	id         int32
	prev, next int32 // -1 at the ends
}

// encodeWord appends the ids of one pre-tokenized piece to dst. For a
// byte-level piece every byte is a symbol (the byte alphabet's one-char
// token); otherwise every rune is, with unknown runes falling back to
// <0xXX> byte tokens or the unk token.
func (b *bpeModel) encodeWord(ws *workspace, p piece, dst []uint32) []uint32 {
	if p.s == "" {
		return dst
	}
	cacheable := len(p.s) <= cacheMaxPiece
	if cacheable {
		if v, ok := ws.cache.m[p.s]; ok {
			return append(dst, ws.cache.ids[v>>32:v>>32+v&0xffffffff]...)
		}
	}
	start := len(dst)
	dst = b.encodeUncached(ws, p, dst)
	if cacheable && ws.err == nil { // a cancelled merge may be partial
		c := ws.cache
		if c.m == nil || len(c.m) >= cacheMaxEntries {
			c.m = make(map[string]uint64, 1024)
			c.ids = c.ids[:0]
		}
		off := uint64(len(c.ids))
		c.ids = append(c.ids, dst[start:]...)
		c.m[strings.Clone(p.s)] = off<<32 | uint64(len(dst)-start)
	}
	return dst
}

// encodeUncached is encodeWord without the cache.
func (b *bpeModel) encodeUncached(ws *workspace, p piece, dst []uint32) []uint32 {
	if b.ignoreMerges {
		var id int32
		var ok bool
		if p.bytes {
			ws.word = appendByteLevel(ws.word[:0], p.s)
			id, ok = b.vocab[string(ws.word)] // a map index by string(bytes) does not allocate
		} else {
			id, ok = b.vocab[p.s]
		}
		if ok {
			return append(dst, uint32(id))
		}
	}
	if need := len(p.s); cap(ws.syms) < need {
		ws.syms = make([]symbol, 0, need) // one symbol per byte at most
	}
	syms := ws.syms[:0]
	add := func(id int32) {
		syms = append(syms, symbol{id: id, prev: int32(len(syms)) - 1, next: int32(len(syms)) + 1})
	}
	lastUnk := false
	unknown := func(s string) {
		switch {
		case b.byteFallback != nil:
			for i := 0; i < len(s); i++ {
				add(b.byteFallback[s[i]])
			}
			lastUnk = false
			return
		case b.unk < 0:
			return // dropped, as the reference implementation does
		case b.fuseUnk && lastUnk:
			return
		}
		add(b.unk)
		lastUnk = true
	}
	if p.bytes {
		for i := 0; i < len(p.s); i++ {
			if id := b.lowChars[byteRune[p.s[i]]]; id >= 0 {
				add(id)
				lastUnk = false
			} else {
				unknown(string(byteRune[p.s[i]]))
			}
		}
	} else {
		for i, r := range p.s {
			size := utf8.RuneLen(r)
			if r == utf8.RuneError {
				_, size = utf8.DecodeRuneInString(p.s[i:])
			}
			if id := b.charID(r, p.s[i:i+size]); id >= 0 {
				add(id)
				lastUnk = false
			} else {
				unknown(p.s[i : i+size])
			}
		}
	}
	if len(syms) == 0 {
		ws.syms = syms
		return dst
	}
	syms[len(syms)-1].next = -1
	b.merge(ws, syms)
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, uint32(syms[i].id))
	}
	ws.syms = syms
	return dst
}

// merge applies the merge rules to the symbol list, lowest rank first and,
// among equal ranks, leftmost first, until none applies. A symbol that was
// merged into its left neighbour gets id -1 and leaves the list; symbol 0
// always stays the head. Cost: O(n log n) for n initial symbols.
func (b *bpeModel) merge(ws *workspace, syms []symbol) {
	if len(syms) < 2 {
		return
	}
	// Heap entries pack rank<<32 | position of the pair's left symbol.
	if cap(ws.heap) < len(syms) {
		ws.heap = make([]uint64, 0, len(syms))
	}
	h := ws.heap[:0]
	push := func(pos int32) {
		next := syms[pos].next
		if next < 0 {
			return
		}
		if m, ok := b.merges[uint64(uint32(syms[pos].id))<<32|uint64(uint32(syms[next].id))]; ok {
			h = heapPush(h, uint64(m.rank)<<32|uint64(uint32(pos)))
		}
	}
	for i := range syms {
		push(int32(i))
	}
	for len(h) > 0 && !ws.cancelled(1) {
		var top uint64
		top, h = heapPop(h)
		pos := int32(uint32(top))
		rank := int32(top >> 32)
		left := &syms[pos]
		if left.id < 0 || left.next < 0 {
			continue // merged away, or now last
		}
		right := &syms[left.next]
		m, ok := b.merges[uint64(uint32(left.id))<<32|uint64(uint32(right.id))]
		if !ok || m.rank != rank {
			continue // stale: a neighbour changed since this pair was queued
		}
		left.id = m.id
		right.id = -1
		left.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = pos
		}
		if left.prev >= 0 {
			push(left.prev)
		}
		push(pos)
	}
	ws.heap = h
}

// heapPush and heapPop keep a binary min-heap of packed merge candidates.
func heapPush(h []uint64, v uint64) []uint64 {
	h = append(h, v)
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if h[parent] <= h[i] {
			break
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
	return h
}

func heapPop(h []uint64) (uint64, []uint64) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, small := 2*i+1, 2*i+2, i
		if l < len(h) && h[l] < h[small] {
			small = l
		}
		if r < len(h) && h[r] < h[small] {
			small = r
		}
		if small == i {
			break
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
	return top, h
}
