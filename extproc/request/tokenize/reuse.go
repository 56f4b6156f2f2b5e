package tokenize

import (
	"container/list"
	"encoding/binary"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// Prefix reuse. Agentic clients resend the whole conversation every turn:
// the chat rendered for turn N is, up to its generation prompt, a prefix of
// the one for turn N+1. A ReuseCache keeps the ids of recently encoded
// texts, with resume points, so that encoding a text that extends (or
// shares a long prefix with) one of them copies the ids of the common part
// and encodes only the rest. The ids always equal a full encode's.
//
// Checkpoints. While a text of at least minBytes is encoded, a recorder
// notes, for each offset c = k*chunk, a resume point: a text offset r <= c,
// the number n of ids the text before r encodes to, and the start s0 of
// the text segment holding r. Its claim: every text that has the bytes
// text[:c] encodes to ids[:n] followed by the encoding of its own bytes
// from r on (the added-token scan resumed at r with its segment begun at
// s0, and, when s0 < r, the rest of that segment pre-tokenized from r). An
// entry keeps the text, its ids and its checkpoints; the index maps a
// 64-bit hash of text[:c] (hash/maphash, seeded per cache, salted per
// tokenizer) to the checkpoint. A lookup hashes the new text's prefixes
// at k*chunk, takes the longest one indexed and then compares the bytes
// of text[:c] with the entry's: a hash collision costs a comparison, never
// wrong ids. So 64 bits suffice for an index; a 128-bit hash would not
// make the byte comparison unnecessary, only rarer.
//
// Why a resume point is right. Encoding (encodeText) splits out added
// tokens, then encodes each text segment between them; a segment's ids
// are a function of its bytes and of whether it starts the text. Within a
// segment, the pieces of the pre-tokenizer are BPE-encoded independently,
// so its ids are the concatenation of its pieces' ids.
//
//   - Added tokens. The decision at position i (which token, if any,
//     starts there) reads the bytes [i, i+len(longest token)) and, for a
//     single_word token, the rune after it: lookBack = max token length +
//     utf8.UTFMax bytes at most. Decisions at positions below
//     limTok = c-lookBack (rounded down to a rune start) are therefore the
//     same in every text that has text[:c]. An rstrip token's whitespace
//     run ends at a rune that lies below c when its end is below limTok.
//     An lstrip token found at or past limTok in another text may trim
//     whitespace back from it, but not past a non-space rune, so its
//     segment still reaches limPiece: limTok moved back over the
//     whitespace that ends there (only when some token has lstrip).
//   - The end of an added token, r < limTok, is thus a resume point: the
//     text before it (segments and tokens) is decided in text[:c], and the
//     scan from r onwards is the same scan, begun at r with s0 = r. This
//     holds for every tokenizer, whatever its normalizer and pre-tokenizer.
//   - Inside a segment, only for a tokenizer without a normalizer whose
//     pre-tokenizer is one isolating split by one of the patterns of GPT-2,
//     cl100k (Llama 3), Qwen 2 or o200k (gpt-oss), optionally with
//     ByteLevel marking the bytes (piecewise). Its pieces tile the segment
//     and are the pattern's successive matches, and a match depends only
//     on the text from its start (no look-behind or anchors), so the
//     pieces after a piece boundary r are those of the text from r on. A
//     match may read past its end: greedy runs stop at the first rune
//     outside their class, \s+(?!\S) reads the rune after the run, a
//     failed contraction ('re, 'll) reads two runes, and
//     \s*[\r\n]+ reads the whole whitespace run although it ends at its
//     last newline. Case by case, what piece i reads lies below the end of
//     piece i+2 or is the rune that starts there: in "\n \u3000¢", piece
//     "\n" depends on the rune after "\u3000" (were it NEL and another
//     newline to follow, the run would go on to it), which starts piece
//     2. TestSplitLocality checks this for each pattern on both the regexp
//     engine and the hand-written matchers, and that one piece less would
//     not do. So the end r of piece i is a resume
//     point when piece i+2 is not its segment's last and ends at least
//     utf8.UTFMax bytes below limPiece: pieces 0..i are decided in
//     text[:c], and another text's segment reaches past them.
//
// A resume point found for c holds for every later checkpoint too, so
// each checkpoint gets the latest one found; a text that shares text[:c]
// with an entry is encoded from the resume point of the longest such c
// (at most one chunk, plus the pieces held back, is encoded twice). A text
// equal to an entry's copies its ids whole.
//
// Bounds: a cache holds at most maxBytes of texts, ids and checkpoints,
// evicting the least recently used entries; an entry whose every
// checkpoint another (longer) entry has taken over, the previous turn of a
// conversation, is dropped at once. Texts below minBytes are neither
// looked up nor kept.

// DefaultReuseCacheBytes is the suggested size of a prefix cache.
const DefaultReuseCacheBytes = 64 << 20

const (
	// reuseMinBytes is the smallest text looked up and kept: below it,
	// encoding costs about what a lookup does.
	reuseMinBytes = 16 << 10
	// reuseChunk is the distance between two checkpoints.
	reuseChunk = 2 << 10
	// reuseShards is the number of index shards, each with its lock.
	reuseShards = 16
	// reusePieceLag is how many pieces a resume point inside a segment
	// stays behind the last piece known to be decided (see above).
	reusePieceLag = 2
	// reuseEntryOverhead approximates what an entry and a checkpoint
	// cost besides the text and ids.
	reuseEntryOverhead      = 256
	reuseCheckpointOverhead = 64
)

// ReuseCache remembers the ids of recently encoded long texts, so that a
// text extending one of them is encoded from where they part (see above).
// One cache can serve several tokenizers (SetReuseCache,
// AttachReuseCache); their entries stay apart. It is safe for concurrent
// use: lookups take only the lock of one index shard at a time, and no
// lock is held while encoding.
type ReuseCache struct {
	maxBytes int64
	minBytes int
	chunk    int
	seed     maphash.Seed
	shards   [reuseShards]reuseShard

	// mu guards the LRU list and each entry's live and used.
	mu  sync.Mutex
	lru list.List // of *reuseEntry, most recently used first

	bytes, entries                                     atomic.Int64
	lookups, hits, lookupBytes, reusedBytes, evictions atomic.Int64
}

// ReuseStats are a cache's counters since it was made.
type ReuseStats struct {
	// Hits and Misses count the texts looked up (those of at least the
	// minimum size): a hit resumed from a cached prefix or matched a
	// cached text whole.
	Hits, Misses int64
	// LookupBytes is the bytes of the texts looked up; ReusedBytes, how
	// many of them were not encoded again.
	LookupBytes, ReusedBytes int64
	// Evictions counts the entries dropped: by the size bound, or because
	// a longer text took over all their checkpoints.
	Evictions int64
	// Entries and Bytes are what the cache holds now.
	Entries, Bytes int64
}

type reuseShard struct {
	mu sync.Mutex
	m  map[uint64]reuseRef
}

// reuseRef is an index value: checkpoint cp of entry e, or, with cp ==
// wholeRef, the entry's whole text.
type reuseRef struct {
	e  *reuseEntry
	cp int
}

const wholeRef = -1

// reuseEntry is one encoded text. Its fields other than those guarded by
// ReuseCache.mu never change once it is indexed.
type reuseEntry struct {
	owner uint64 // the reuseBinding's id
	text  string
	ids   []uint32
	cps   []checkpoint
	keys  []uint64 // keys[j] indexes cps[j]
	whole uint64   // indexes the whole text
	size  int64

	// live counts the checkpoint keys that index this entry; used is its
	// place in the LRU list, nil when it is not listed.
	live int
	used *list.Element
}

// resumePoint is where encoding can resume: at text offset r, in the text
// segment that began at s0 (s0 == r after an added token), with n ids for
// the text before r.
type resumePoint struct {
	r, s0, n int
}

// checkpoint is a resume point that every text with the bytes text[:c]
// shares.
type checkpoint struct {
	c int
	resumePoint
}

// NewReuseCache returns a cache holding at most maxBytes, or nil (no
// cache) when maxBytes is not positive.
func NewReuseCache(maxBytes int64) *ReuseCache {
	if maxBytes <= 0 {
		return nil
	}
	c := &ReuseCache{maxBytes: maxBytes, minBytes: reuseMinBytes, chunk: reuseChunk, seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = map[uint64]reuseRef{}
	}
	return c
}

// Stats returns the cache's counters.
func (c *ReuseCache) Stats() ReuseStats {
	lookups, hits := c.lookups.Load(), c.hits.Load()
	return ReuseStats{
		Hits: hits, Misses: lookups - hits,
		LookupBytes: c.lookupBytes.Load(), ReusedBytes: c.reusedBytes.Load(),
		Evictions: c.evictions.Load(),
		Entries:   c.entries.Load(), Bytes: c.bytes.Load(),
	}
}

// reuseBinding is a tokenizer's tie to a cache.
type reuseBinding struct {
	cache *ReuseCache
	// id salts the tokenizer's keys and marks its entries.
	id uint64
	// pieces allows resume points inside text segments.
	pieces bool
	// lookBack bounds how far past a position an added-token decision
	// reads; lstrip is set when some added token strips to its left.
	lookBack int
	lstrip   bool
}

var reuseBindingIDs atomic.Uint64

// SetReuseCache makes t look up and keep long texts in c; nil stops it.
// It may be called while t is in use.
func (t *BPE) SetReuseCache(c *ReuseCache) {
	if c == nil {
		t.reuse.Store(nil)
		return
	}
	if old := t.reuse.Load(); old != nil && old.cache == c {
		return
	}
	b := &reuseBinding{cache: c, id: reuseBindingIDs.Add(1), pieces: piecewise(t.normalize, t.pre), lookBack: utf8.UTFMax}
	if t.added != nil {
		for _, toks := range t.added.byFirst {
			for _, tok := range toks {
				b.lookBack = max(b.lookBack, len(tok.content)+utf8.UTFMax)
				b.lstrip = b.lstrip || tok.lstrip
			}
		}
	}
	t.reuse.Store(b)
}

// AttachReuseCache sets c as the prefix cache of every exact tokenizer in
// t (a BPE, an HFModel, or those of a Mapping); nil detaches them.
func AttachReuseCache(t Tokenizer, c *ReuseCache) {
	switch v := t.(type) {
	case *Mapping:
		AttachReuseCache(v.def, c)
		for _, m := range v.byModel {
			AttachReuseCache(m, c)
		}
	case interface{ SetReuseCache(*ReuseCache) }:
		v.SetReuseCache(c)
	}
}

// ReuseCacheOf returns the prefix cache of t's exact tokenizers (the first
// found in a Mapping), or nil.
func ReuseCacheOf(t Tokenizer) *ReuseCache {
	switch v := t.(type) {
	case *Mapping:
		if c := ReuseCacheOf(v.def); c != nil {
			return c
		}
		for _, m := range v.byModel {
			if c := ReuseCacheOf(m); c != nil {
				return c
			}
		}
	case *HFModel:
		return ReuseCacheOf(v.BPE)
	case *BPE:
		if b := v.reuse.Load(); b != nil {
			return b.cache
		}
	}
	return nil
}

// piecewise reports whether encoding may resume inside a text segment:
// no normalizer, and a pre-tokenizer that is one isolating split by a
// pattern whose locality is established (see above), with ByteLevel steps
// that only mark bytes.
func piecewise(norm normalizer, pt preTokenizer) bool {
	return norm == nil && localPre(pt)
}

// localPre reports whether pt is one isolating split by a pattern whose
// locality is established (see above), with ByteLevel steps that only mark
// bytes: its pieces of a text tile it, and those before a piece boundary
// do not depend on the text after it beyond the reach described above.
func localPre(pt preTokenizer) bool {
	splits := 0
	return pt != nil && localSplits(pt, &splits) && splits == 1
}

func localSplits(pt preTokenizer, splits *int) bool {
	switch p := pt.(type) {
	case *byteLevelPT:
		if p.addPrefixSpace {
			return false
		}
		if p.re == nil {
			return true
		}
		*splits++
		return localPattern(p.re)
	case *splitPT:
		*splits++
		return p.behavior == isolated && !p.invert && localPattern(p.re)
	case sequencePT:
		for _, q := range p {
			if !localSplits(q, splits) {
				return false
			}
		}
		return true
	}
	return false
}

// localPattern reports whether p is a pattern whose matches TestSplitLocality
// holds to the reach the resume points assume.
func localPattern(p *pattern) bool {
	if p == nil || p.re == nil {
		return false
	}
	switch p.re.String() {
	case gpt2Pattern, cl100kPattern, qwen2Pattern, o200kPattern:
		return true
	}
	return false
}

// reuseSession is one encode's use of the cache.
type reuseSession struct {
	b    *reuseBinding
	text string
	// keys[k-1] is the key of text[:k*chunk]; wholeKey that of the text.
	keys     []uint64
	wholeKey uint64
	// whole is an entry of the same text; entry and hit the checkpoint
	// the encode resumes from (entry nil: none).
	whole *reuseEntry
	entry *reuseEntry
	hit   int
	rec   recorder
}

// begin looks text up. base is where its ids will start in dst.
func (b *reuseBinding) begin(text string, base int) *reuseSession {
	c := b.cache
	rs := &reuseSession{b: b, text: text, hit: -1}
	nk := len(text) / c.chunk
	rs.keys = make([]uint64, nk)
	var h maphash.Hash
	h.SetSeed(c.seed)
	var word [8]byte
	binary.LittleEndian.PutUint64(word[:], b.id)
	_, _ = h.Write(word[:])
	for k := range nk {
		_, _ = h.WriteString(text[k*c.chunk : (k+1)*c.chunk])
		rs.keys[k] = h.Sum64()
	}
	_, _ = h.WriteString(text[nk*c.chunk:])
	binary.LittleEndian.PutUint64(word[:], uint64(len(text)))
	_ = h.WriteByte(0xff)
	_, _ = h.Write(word[:])
	rs.wholeKey = h.Sum64()

	c.lookups.Add(1)
	c.lookupBytes.Add(int64(len(text)))
	if ref := c.get(rs.wholeKey); ref.cp == wholeRef && ref.e != nil && ref.e.owner == b.id && ref.e.text == text {
		rs.whole = ref.e
		c.hits.Add(1)
		c.reusedBytes.Add(int64(len(text)))
		c.touch(ref.e)
		return rs
	}
	for k := nk; k >= 1 && rs.entry == nil; k-- {
		ref := c.get(rs.keys[k-1])
		if ref.e == nil || ref.cp < 0 || ref.e.owner != b.id {
			continue
		}
		e, end := ref.e, k*c.chunk
		if e.cps[ref.cp].c == end && len(e.text) >= end && e.text[:end] == text[:end] {
			rs.entry, rs.hit = e, ref.cp
		}
	}
	rs.rec = recorder{
		text: text, chunk: c.chunk, lookBack: b.lookBack, lstrip: b.lstrip, pieces: b.pieces,
		base: base, cps: make([]checkpoint, 0, nk),
	}
	if rs.entry == nil {
		rs.rec.start(c.chunk, resumePoint{})
		return rs
	}
	cp := rs.entry.cps[rs.hit]
	c.hits.Add(1)
	c.reusedBytes.Add(int64(cp.r))
	c.touch(rs.entry)
	rs.rec.cps = append(rs.rec.cps, rs.entry.cps[:rs.hit+1]...)
	rs.rec.start(cp.c+c.chunk, cp.resumePoint)
	return rs
}

// finish keeps the encoded text when it was encoded in full (ok), with
// dst[rs.rec.base:] its ids.
func (rs *reuseSession) finish(dst []uint32, ok bool) {
	if rs.whole != nil || !ok || rs.rec.broken {
		return
	}
	c, rec := rs.b.cache, &rs.rec
	rec.finish()
	e := &reuseEntry{owner: rs.b.id, cps: rec.cps, whole: rs.wholeKey}
	e.size = int64(len(rs.text)) + 4*int64(len(dst)-rec.base) +
		reuseCheckpointOverhead*int64(len(e.cps)) + reuseEntryOverhead
	if e.size > c.maxBytes/4 {
		return
	}
	e.text = strings.Clone(rs.text)
	e.ids = slices.Clone(dst[rec.base:])
	e.keys = make([]uint64, len(e.cps))
	for j, cp := range e.cps {
		e.keys[j] = rs.keys[cp.c/c.chunk-1]
	}
	c.insert(e)
}

func (c *ReuseCache) shard(key uint64) *reuseShard { return &c.shards[key%reuseShards] }

func (c *ReuseCache) get(key uint64) reuseRef {
	s := c.shard(key)
	s.mu.Lock()
	ref := s.m[key]
	s.mu.Unlock()
	return ref
}

// set indexes ref under key and returns what was there.
func (c *ReuseCache) set(key uint64, ref reuseRef) reuseRef {
	s := c.shard(key)
	s.mu.Lock()
	old := s.m[key]
	s.m[key] = ref
	s.mu.Unlock()
	return old
}

// unset removes key when it indexes e.
func (c *ReuseCache) unset(key uint64, e *reuseEntry) {
	s := c.shard(key)
	s.mu.Lock()
	if s.m[key].e == e {
		delete(s.m, key)
	}
	s.mu.Unlock()
}

// insert indexes e, drops the entries it took every checkpoint from and
// evicts the least recently used ones beyond the size bound.
func (c *ReuseCache) insert(e *reuseEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var displaced []*reuseEntry
	take := func(old reuseRef) {
		if old.e == nil || old.e == e || old.cp == wholeRef {
			return
		}
		if old.e.live--; old.e.live == 0 {
			displaced = append(displaced, old.e)
		}
	}
	for j, key := range e.keys {
		old := c.set(key, reuseRef{e, j})
		if old.e != e {
			e.live++
		}
		take(old)
	}
	take(c.set(e.whole, reuseRef{e, wholeRef}))
	e.used = c.lru.PushFront(e)
	for _, d := range displaced {
		if d.used != nil && d.live == 0 {
			c.evict(d)
		}
	}
	// e is counted once there is room for it, so the size Stats reads
	// without the lock never passes the bound; e, at the front, is never
	// the one evicted.
	for c.bytes.Load()+e.size > c.maxBytes && c.lru.Len() > 1 {
		c.evict(c.lru.Back().Value.(*reuseEntry))
	}
	c.bytes.Add(e.size)
	c.entries.Add(1)
}

// evict drops e; c.mu is held.
func (c *ReuseCache) evict(e *reuseEntry) {
	c.lru.Remove(e.used)
	e.used = nil
	c.bytes.Add(-e.size)
	c.entries.Add(-1)
	c.evictions.Add(1)
	for _, key := range e.keys {
		c.unset(key, e)
	}
	c.unset(e.whole, e)
}

// touch marks e most recently used.
func (c *ReuseCache) touch(e *reuseEntry) {
	c.mu.Lock()
	if e.used != nil {
		c.lru.MoveToFront(e.used)
	}
	c.mu.Unlock()
}

// recorder finds the checkpoints of a text while it is encoded: it sees
// each piece boundary (piece, only when pieces is set), the start of each
// segment's encoded part (segment) and the end of each added token (token),
// in text order.
type recorder struct {
	text     string
	chunk    int
	lookBack int
	lstrip   bool
	pieces   bool
	// base is where the text's ids start in dst.
	base int
	// next is the pending checkpoint's offset; limTok and limPiece its
	// limits (see above).
	next, limTok, limPiece int
	// cand is the latest resume point found (r == 0: none).
	cand resumePoint
	// bounds holds the piece boundaries of the current segment that may
	// still make a resume point, the oldest first: the last one that
	// qualified, the reusePieceLag before it and those after it.
	bounds []resumePoint
	cps    []checkpoint
	// broken is set when the pieces did not tile their segment: the text
	// is not kept (and a resumed encode is redone), never expected.
	broken bool
}

func (r *recorder) start(next int, cand resumePoint) {
	r.next, r.cand = next, cand
	r.limits()
}

// limits sets limTok and limPiece for the pending checkpoint.
func (r *recorder) limits() {
	if r.next > len(r.text) {
		r.limTok, r.limPiece = math.MaxInt, math.MaxInt // no more checkpoints
		return
	}
	lim := r.next - r.lookBack
	for lim > 0 && !utf8.RuneStart(r.text[lim]) {
		lim--
	}
	r.limTok = lim
	if r.lstrip {
		for lim > 0 {
			c, size := utf8.DecodeLastRuneInString(r.text[:lim])
			if !unicode.IsSpace(c) {
				break
			}
			lim -= size
		}
	}
	r.limPiece = lim
}

// finalize records the pending checkpoint and moves to the next.
func (r *recorder) finalize() {
	if r.cand.r > 0 {
		r.cps = append(r.cps, checkpoint{c: r.next, resumePoint: r.cand})
	}
	r.next += r.chunk
	r.limits()
}

// finish records the checkpoints left once the text is encoded.
func (r *recorder) finish() {
	for r.next <= len(r.text) {
		r.finalize()
	}
}

// segment notes that the encoding of a segment begun at s0 starts at from
// (s0, or a resume point), with dstLen ids in dst.
func (r *recorder) segment(s0, from, dstLen int) {
	r.bounds = r.bounds[:0]
	if r.pieces {
		r.bounds = append(r.bounds, resumePoint{from, s0, dstLen - r.base})
	}
}

// piece notes a piece boundary at e in the segment begun at s0, with
// dstLen ids in dst; more is set when the segment goes on after e.
func (r *recorder) piece(e, s0, dstLen int, more bool) {
	if len(r.bounds) == cap(r.bounds) && len(r.bounds) >= maxRecordedBounds {
		// Only ever with pieces far below limPiece; losing the oldest
		// only loses resume points.
		r.bounds = append(r.bounds[:0], r.bounds[len(r.bounds)/2:]...)
	}
	r.bounds = append(r.bounds, resumePoint{e, s0, dstLen - r.base})
	for {
		r.qualify(more)
		if e < r.limTok {
			return
		}
		r.finalize()
	}
}

// tile notes piece q, found at pos in the segment s[segStart:end], with
// dstLen ids in dst, and returns the offset after it. Pieces tile the
// segment (encode checks the pre-tokenizer before it sets r.pieces); a
// piece elsewhere is a bug and breaks the recording.
func (r *recorder) tile(s string, q piece, segStart, end, pos, dstLen int) int {
	next := pos + len(q.s)
	if next > end || s[pos:next] != q.s {
		r.broken = true
		return pos
	}
	r.piece(next, segStart, dstLen, next < end)
	return next
}

// maxRecordedBounds bounds recorder.bounds.
const maxRecordedBounds = 64

// qualify takes as the resume point the boundary reusePieceLag pieces
// before the newest boundary that lies utf8.UTFMax bytes or more below
// limPiece and is not the segment's last (more is set when the newest is
// not), and drops the boundaries older than it.
func (r *recorder) qualify(more bool) {
	for j := len(r.bounds) - 1; j >= reusePieceLag; j-- {
		if (j == len(r.bounds)-1 && !more) || r.bounds[j].r+utf8.UTFMax > r.limPiece {
			continue
		}
		if p := r.bounds[j-reusePieceLag]; p.r > r.cand.r {
			r.cand = p
		}
		// Keep bounds[j-reusePieceLag:], a few: a loop, not a memmove
		// call, as this runs for every piece.
		n := len(r.bounds) - (j - reusePieceLag)
		for k := range n {
			r.bounds[k] = r.bounds[j-reusePieceLag+k]
		}
		r.bounds = r.bounds[:n]
		return
	}
}

// token notes the end of an added token at end, with dstLen ids in dst.
func (r *recorder) token(end, dstLen int) {
	r.bounds = r.bounds[:0]
	for {
		if end < r.limTok {
			r.cand = resumePoint{end, end, dstLen - r.base}
			return
		}
		r.finalize()
	}
}
