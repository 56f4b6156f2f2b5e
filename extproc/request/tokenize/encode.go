package tokenize

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// BPE is a byte-pair-encoding tokenizer: a HuggingFace tokenizer.json
// (LoadHF, ParseHF) or a tiktoken encoding (NewTiktoken). Encode follows the
// HuggingFace pipeline: split out added tokens, normalize each remaining
// segment, pre-tokenize it, BPE-encode each piece, then add the
// post-processor's special tokens (as encode with add_special_tokens does).
// Added tokens are matched in the raw text, before normalization. A BPE is
// immutable after loading and safe for concurrent use.
type BPE struct {
	exact
	added      *addedVocab
	normalize  normalizer
	pre        preTokenizer
	model      *bpeModel
	prefix     []uint32
	suffix     []uint32
	workspaces sync.Pool
	// wordCaches keeps the word caches of idle workspaces. A garbage
	// collection empties the workspace pool; without it a long prompt
	// after one would merge its first few thousand words afresh.
	wordCaches chan *wordCache
	// reuse is the prefix cache (SetReuseCache), nil when there is none.
	reuse atomic.Pointer[reuseBinding]
}

// Encode appends the token ids of text to dst. The model name is ignored:
// one tokenizer serves one model family. Invalid UTF-8 is encoded as if
// each bad byte were U+FFFD, as a JSON decoder would have delivered it.
func (t *BPE) Encode(_, text string, dst []uint32) ([]uint32, int) {
	ids, n, _ := t.encode(context.Background(), text, dst, true)
	return ids, n
}

// EncodeContext is Encode that gives up, with the context's error, soon
// after ctx is done.
func (t *BPE) EncodeContext(ctx context.Context, _, text string, dst []uint32) ([]uint32, int, error) {
	return t.encode(ctx, text, dst, true)
}

// encode appends the ids of text, with the post-processor's special tokens
// when special is set. It reads ctx every cancelCheckWork bytes or merges;
// once ctx is done it returns dst as it was and the context's error. With
// a prefix cache (reuse.go), a text that extends one encoded recently
// copies the ids of the common part and encodes only the rest.
func (t *BPE) encode(ctx context.Context, text string, dst []uint32, special bool) ([]uint32, int, error) {
	if !utf8.ValidString(text) {
		text = string([]rune(text))
	}
	start := len(dst)
	if special {
		dst = append(dst, t.prefix...)
	}
	ws := t.getWorkspace(ctx)
	var rs *reuseSession
	if b := t.reuse.Load(); b != nil && len(text) >= b.cache.minBytes {
		rs = b.begin(text, len(dst))
	}
	switch {
	case rs == nil:
		dst = t.encodeText(ws, text, 0, 0, dst)
	case rs.whole != nil:
		dst = append(dst, rs.whole.ids...)
	default:
		body := len(dst)
		from, segStart := 0, 0
		if rs.entry != nil {
			cp := rs.entry.cps[rs.hit]
			dst = append(dst, rs.entry.ids[:cp.n]...)
			from, segStart = cp.r, cp.s0
		}
		ws.rec = &rs.rec
		dst = t.encodeText(ws, text, from, segStart, dst)
		ws.rec = nil
		if rs.rec.broken && rs.entry != nil && ws.err == nil {
			// Never expected (see reuse.go); encode the text afresh
			// rather than trust the resumed ids.
			dst = t.encodeText(ws, text, 0, 0, dst[:body])
		}
	}
	err := ws.err
	t.putWorkspace(ws)
	if rs != nil {
		rs.finish(dst, err == nil)
	}
	if err != nil {
		return dst[:start], 0, err
	}
	if special {
		dst = append(dst, t.suffix...)
	}
	return dst, len(dst) - start, nil
}

// encodeText appends the ids of s from offset from, where a text segment
// began at segStart: from == segStart == 0 for the whole text; a resumed
// encode (reuse.go) starts after an added token, from == segStart, or at a
// piece boundary inside a segment, segStart < from.
func (t *BPE) encodeText(ws *workspace, s string, from, segStart int, dst []uint32) []uint32 {
	t.added.scan(s, from, segStart,
		func(segStart, from, end int) { dst = t.encodeSegment(ws, s, segStart, from, end, dst) },
		func(id uint32, end int) {
			dst = append(dst, id)
			if ws.rec != nil {
				ws.rec.token(end, len(dst))
			}
		})
	return dst
}

// scan splits out added tokens, resumably: it scans s from offset from,
// where a text segment began at segStart, and reports each run of ordinary
// text as the offsets of its segment's start, of the part to encode (from
// for the first, when it lies inside it) and of its end, and each added
// token with the offset after it (and after the whitespace an rstrip token
// takes). From the start of s it reports what the plain split of added
// tokens does (a test holds it to that split, kept as its oracle).
func (a *addedVocab) scan(s string, from, segStart int, text func(segStart, from, end int), token func(id uint32, end int)) {
	if a == nil {
		text(segStart, from, len(s))
		return
	}
	for i := from; i < len(s); i++ {
		cands := a.byFirst[s[i]]
		if len(cands) == 0 {
			continue
		}
		for _, tok := range cands {
			if !strings.HasPrefix(s[i:], tok.content) {
				continue
			}
			start, end := i, i+len(tok.content)
			if tok.singleWord && (isWordRuneBefore(s, start) || isWordRuneAt(s, end)) {
				continue
			}
			if tok.lstrip {
				start = segStart + len(strings.TrimRightFunc(s[segStart:start], unicode.IsSpace))
			}
			if tok.rstrip {
				end = len(s) - len(strings.TrimLeftFunc(s[end:], unicode.IsSpace))
			}
			if start > segStart {
				text(segStart, max(from, segStart), start)
			}
			token(tok.id, end)
			segStart = end
			i = end - 1
			break
		}
	}
	if segStart < len(s) {
		text(segStart, max(from, segStart), len(s))
	}
}

// encodeSegment appends the ids of the text segment s[segStart:end], or
// of its part from from (a piece boundary) on: the part is normalized,
// pre-tokenized into pieces and each piece BPE-encoded on its own. A long
// part is pre-tokenized a window at a time where the pre-tokenizer allows
// it (splitWindow), so that its pieces need not all be held at once, and
// its pieces are encoded by a helper when the context grants one
// (WithHelpers).
func (t *BPE) encodeSegment(ws *workspace, s string, segStart, from, end int, dst []uint32) []uint32 {
	if ws.cancelled(0) {
		return dst
	}
	rec := ws.rec
	if rec != nil {
		if from > end {
			rec.broken = true // a resume point past the segment's end
			return dst
		}
		rec.segment(segStart, from, len(dst))
	}
	seg := s[from:end]
	if t.normalize != nil {
		seg = t.normalize(seg)
	}
	windowed := len(seg) > segmentWindow && localPre(t.pre)
	var pl *pipeline
	window := segmentWindow
	if windowed && len(seg) > pipelineWindows*segmentWindow { // two batches or more
		if release, ok := TakeHelper(ws.ctx); ok {
			pl = t.startPipeline(ws, rec != nil && rec.pieces)
			defer func() { pl.stop(); release() }()
			window *= pipelineWindows
		}
	}
	pos := from // the raw text offset of the next piece, when rec.pieces
	for off := 0; off < len(seg) && ws.err == nil; {
		p := piece{s: seg[off:], first: from == 0 && off == 0}
		var pieces []piece
		was := off
		switch {
		case windowed:
			var n int
			pieces, n = t.splitWindow(ws, p, window)
			off += n
		case t.pre == nil:
			pieces, off = t.model.splitWords(ws.pieces[:0], p), len(seg)
		default:
			pieces, off = t.pre.split(ws, ws.pieces[:0], p), len(seg)
		}
		if pl != nil {
			// The helper encodes these pieces while the next window is
			// split.
			dst, pos = pl.collect(ws, s, segStart, end, pos, dst)
			pl.send(ws, pieces, off-was)
			continue
		}
		dst, pos = t.encodePieces(ws, pieces, s, segStart, end, pos, dst)
		clear(pieces) // drop string references held by the pooled buffer
		ws.pieces = pieces[:0]
	}
	if pl != nil {
		dst, _ = pl.collect(ws, s, segStart, end, pos, dst)
	}
	return dst
}

// segmentWindow is the length of text splitWindow pre-tokenizes at a time
// (a variable for tests); pipelineWindows of them when a helper encodes
// the pieces (fewer hand-offs between the two goroutines).
var segmentWindow = 16 << 10

const pipelineWindows = 4

// splitWindow pre-tokenizes the first window bytes of p, a long part of a
// segment, with a local pre-tokenizer (localPre), and returns the pieces
// of p that no text after the window can change and their length; p whole
// when it fits the window. As for the prefix cache's resume points
// (reuse.go), pieces 0..i are decided when piece i+reusePieceLag is not
// the window's last and ends utf8.UTFMax bytes or more before the window
// does. A window with no such piece (one long run) is doubled.
func (t *BPE) splitWindow(ws *workspace, p piece, window int) ([]piece, int) {
	for size := window; size < len(p.s); size *= 2 {
		for size < len(p.s) && !utf8.RuneStart(p.s[size]) {
			size++
		}
		if size == len(p.s) {
			break
		}
		w := p
		w.s = p.s[:size]
		pieces := t.pre.split(ws, ws.pieces[:0], w)
		// The pieces tile the window (localPre): from its end, find the
		// newest piece j that is not the last and ends early enough.
		j, at := len(pieces)-2, size // at: the end of piece j, once found
		if j >= 0 {
			at -= len(pieces[j+1].s)
		}
		for j >= reusePieceLag && at+utf8.UTFMax > size {
			at -= len(pieces[j].s)
			j--
		}
		if j >= reusePieceLag {
			for k := j; k > j-reusePieceLag; k-- {
				at -= len(pieces[k].s) // down to the end of piece j-reusePieceLag
			}
			keep := j - reusePieceLag + 1
			clear(pieces[keep:])
			return pieces[:keep], at
		}
		clear(pieces)
		ws.pieces = pieces[:0]
	}
	return t.pre.split(ws, ws.pieces[:0], p), len(p.s)
}

// encodePieces appends the ids of pieces, the next part of the segment
// s[segStart:end]; pos is the raw text offset of the first piece when the
// prefix cache records piece boundaries, and the offset after the last is
// returned.
func (t *BPE) encodePieces(ws *workspace, pieces []piece, s string, segStart, end, pos int, dst []uint32) ([]uint32, int) {
	rec := ws.rec
	for _, q := range pieces {
		if ws.cancelled(len(q.s)) {
			break
		}
		dst = t.encodePiece(ws, q, dst)
		if rec != nil && rec.pieces {
			pos = rec.tile(s, q, segStart, end, pos, len(dst))
		}
	}
	return dst, pos
}

// encodePiece appends the ids of one piece.
func (t *BPE) encodePiece(ws *workspace, q piece, dst []uint32) []uint32 {
	if t.pre == nil || q.bytes || !t.model.metaWords {
		return t.model.encodeWord(ws, q, dst)
	}
	// A char-level piece after a pre-tokenizer (Gemma's Split on " " comes
	// after the normalizer turned spaces into ▁) is still cut into words
	// where no merge can cross.
	words := t.model.splitWords(ws.words[:0], q)
	for _, w := range words {
		dst = t.model.encodeWord(ws, w, dst)
	}
	clear(words)
	ws.words = words[:0]
	return dst
}

// A long segment's pieces are BPE-encoded on a helper goroutine while the
// calling one pre-tokenizes the next window (a pipeline), so a cold long
// prompt takes two cores, when the caller's context grants a helper
// (WithHelpers): serve's heavy tokenizations take it from their own
// bounded slots, so helpers never add to the cores they hold.
type helperKey struct{}

// WithHelpers returns ctx with take, which an encode under it calls to
// ask for a helper goroutine for a long segment: take reports whether one
// is granted and, if so, returns its release. Without it an encode runs on
// the calling goroutine alone.
func WithHelpers(ctx context.Context, take func() (release func(), ok bool)) context.Context {
	return context.WithValue(ctx, helperKey{}, take)
}

// TakeHelper asks ctx for a helper goroutine (WithHelpers): a tokenizer
// calls it before it splits its work, and releases what it was granted.
func TakeHelper(ctx context.Context) (release func(), ok bool) {
	if ctx == nil {
		return nil, false
	}
	take, _ := ctx.Value(helperKey{}).(func() (func(), bool))
	if take == nil {
		return nil, false
	}
	return take()
}

// pipeline is one segment's helper: it encodes a batch of pieces (one
// window's) at a time, sent by the calling goroutine, which collects the
// ids before it sends the next batch.
type pipeline struct {
	t  *BPE
	ws *workspace // the helper's
	// count is set when the calling goroutine records piece boundaries
	// and needs each piece's id count.
	count bool
	in    chan []piece
	out   chan struct{} // a batch is encoded: ids, counts and err hold it
	done  chan struct{}

	// The batch out, and the one before it, whose buffer the next
	// window's pieces take; the batch's ids and per-piece id counts,
	// written by the helper and read by the caller in turn.
	batch, spare []piece
	busy         bool
	ids          []uint32
	counts       []int
	err          error
}

// startPipeline starts a helper for the call whose workspace is ws; count
// asks for each piece's id count.
func (t *BPE) startPipeline(ws *workspace, count bool) *pipeline {
	hws := t.getWorkspace(ws.ctx)
	pl := &pipeline{t: t, ws: hws, count: count, in: make(chan []piece), out: make(chan struct{}), done: make(chan struct{}),
		spare: hws.batch, ids: hws.ids, counts: hws.counts}
	go pl.run()
	return pl
}

// run encodes each batch it is sent until in is closed.
func (pl *pipeline) run() {
	defer close(pl.done)
	ws := pl.ws
	for batch := range pl.in {
		pl.ids, pl.counts = pl.ids[:0], pl.counts[:0]
		for _, q := range batch {
			if ws.cancelled(len(q.s)) {
				break
			}
			n := len(pl.ids)
			pl.ids = pl.t.encodePiece(ws, q, pl.ids)
			if pl.count {
				pl.counts = append(pl.counts, len(pl.ids)-n)
			}
		}
		pl.err = ws.err
		pl.out <- struct{}{}
	}
}

// send hands pieces, the calling workspace's buffer, to the helper, and
// gives the workspace the buffer of the batch before; n is the length of
// text they cover, the work the caller did to split them.
func (pl *pipeline) send(ws *workspace, pieces []piece, n int) {
	ws.cancelled(n)
	pl.batch, pl.busy = pieces, true
	ws.pieces = pl.spare
	pl.in <- pieces
}

// collect waits for the batch out, if any, and appends its ids to dst,
// recording its piece boundaries as encodePieces does.
func (pl *pipeline) collect(ws *workspace, s string, segStart, end, pos int, dst []uint32) ([]uint32, int) {
	if !pl.busy {
		return dst, pos
	}
	<-pl.out
	pl.busy = false
	if pl.err != nil && ws.err == nil {
		ws.err = pl.err
	}
	at := len(dst)
	dst = append(dst, pl.ids...)
	if pl.count && ws.err == nil {
		for i, n := range pl.counts {
			at += n // the ids in dst once piece i is encoded
			pos = ws.rec.tile(s, pl.batch[i], segStart, end, pos, at)
		}
	}
	clear(pl.batch) // drop string references held by the buffer
	pl.spare, pl.batch = pl.batch[:0], nil
	return dst, pos
}

// stop ends the helper and returns its workspace.
func (pl *pipeline) stop() {
	if pl.busy { // only when the caller panicked
		<-pl.out
		pl.busy = false
	}
	close(pl.in)
	<-pl.done
	ws := pl.ws
	ws.batch, ws.ids, ws.counts = pl.spare, pl.ids[:0], pl.counts[:0]
	pl.t.putWorkspace(ws)
}

// cancelCheckWork is how much work (bytes of text, merges) passes between
// two reads of a call's context.
const cancelCheckWork = 64 << 10

// workspace is per-call scratch space.
type workspace struct {
	// ctx is the call's context, err its error once seen; work counts
	// toward the next check.
	ctx  context.Context
	err  error
	work int
	// rec records the resume points of a text the prefix cache will
	// keep (reuse.go); nil otherwise.
	rec *recorder

	syms   []symbol
	heap   []uint64
	word   []byte
	runes  []rune
	pieces []piece
	words  []piece
	tmp    []piece
	spans  []span
	// A pipeline helper's (pipeline.spare, ids and counts).
	batch  []piece
	ids    []uint32
	counts []int

	cache *wordCache
}

// wordCache remembers the ids of short pieces already encoded: words
// repeat, and most of a prompt's cost is merging them. ids[v>>32 :
// v>>32+v&0xffffffff] are the ids of the piece cached under key v.
type wordCache struct {
	m   map[string]uint64
	ids []uint32
}

// initPools readies a new BPE's workspace pool and its word caches' free
// list, which holds at most GOMAXPROCS of them (a few hundred KiB each).
func (t *BPE) initPools() {
	t.workspaces.New = func() any { return new(workspace) }
	t.wordCaches = make(chan *wordCache, runtime.GOMAXPROCS(0))
}

// getWorkspace returns a workspace for a call under ctx, with a word cache.
func (t *BPE) getWorkspace(ctx context.Context) *workspace {
	ws := t.workspaces.Get().(*workspace)
	ws.ctx, ws.err, ws.work = ctx, nil, 0
	select {
	case ws.cache = <-t.wordCaches:
	default:
		ws.cache = new(wordCache)
	}
	return ws
}

// putWorkspace takes back a workspace, and its word cache unless the free
// list is full.
func (t *BPE) putWorkspace(ws *workspace) {
	select {
	case t.wordCaches <- ws.cache:
	default:
	}
	ws.ctx, ws.err, ws.cache = nil, nil, nil
	ws.trim()
	t.workspaces.Put(ws)
}

// Word cache bounds: pieces up to cacheMaxPiece bytes are cached, and the
// cache starts over after cacheMaxEntries pieces.
const (
	cacheMaxPiece   = 48
	cacheMaxEntries = 4096
)

// maxKeptScratch bounds the slices a pooled workspace keeps between calls,
// so one huge prompt does not pin its scratch space.
const maxKeptScratch = 1 << 16

// cancelled adds work and reports whether the call's context is done,
// reading it once enough work was done since the last check.
func (ws *workspace) cancelled(work int) bool {
	if ws.err != nil {
		return true
	}
	if ws.work += work; ws.work < cancelCheckWork {
		return false
	}
	ws.work = 0
	runtime.Gosched() // let the small requests' goroutines run
	if ws.ctx != nil {
		ws.err = ws.ctx.Err()
	}
	return ws.err != nil
}

// trim drops oversized scratch slices before the workspace is pooled.
func (ws *workspace) trim() {
	if cap(ws.syms) > maxKeptScratch {
		ws.syms = nil
	}
	if cap(ws.heap) > maxKeptScratch {
		ws.heap = nil
	}
	if cap(ws.word) > maxKeptScratch {
		ws.word = nil
	}
	if cap(ws.runes) > maxKeptScratch {
		ws.runes = nil
	}
	if cap(ws.pieces) > maxKeptScratch || cap(ws.tmp) > maxKeptScratch || cap(ws.spans) > maxKeptScratch {
		ws.pieces, ws.tmp, ws.spans = nil, nil, nil
	}
	if cap(ws.batch) > maxKeptScratch || cap(ws.ids) > maxKeptScratch || cap(ws.counts) > maxKeptScratch {
		ws.batch, ws.ids, ws.counts = nil, nil, nil
	}
}
