package tokenize

import (
	"context"
	"runtime"
	"sync"
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
// once ctx is done it returns dst as it was and the context's error.
func (t *BPE) encode(ctx context.Context, text string, dst []uint32, special bool) ([]uint32, int, error) {
	if !utf8.ValidString(text) {
		text = string([]rune(text))
	}
	start := len(dst)
	if special {
		dst = append(dst, t.prefix...)
	}
	ws := t.workspaces.Get().(*workspace)
	ws.ctx, ws.err, ws.work = ctx, nil, 0
	t.added.split(text,
		func(seg string, first bool) {
			if !ws.cancelled(0) {
				dst = t.encodeSegment(ws, seg, first, dst)
			}
		},
		func(id uint32) { dst = append(dst, id) })
	err := ws.err
	ws.ctx, ws.err = nil, nil
	ws.trim()
	t.workspaces.Put(ws)
	if err != nil {
		return dst[:start], 0, err
	}
	if special {
		dst = append(dst, t.suffix...)
	}
	return dst, len(dst) - start, nil
}

func (t *BPE) encodeSegment(ws *workspace, seg string, first bool, dst []uint32) []uint32 {
	if t.normalize != nil {
		seg = t.normalize(seg)
	}
	p := piece{s: seg, first: first}
	var pieces []piece
	if t.pre == nil {
		pieces = t.model.splitWords(ws.pieces[:0], p)
	} else {
		pieces = t.pre.split(ws, ws.pieces[:0], p)
	}
	for _, q := range pieces {
		if ws.cancelled(len(q.s)) {
			break
		}
		if t.pre == nil || q.bytes || !t.model.metaWords {
			dst = t.model.encodeWord(ws, q, dst)
			continue
		}
		// A char-level piece after a pre-tokenizer (Gemma's Split on " "
		// comes after the normalizer turned spaces into ▁) is still cut
		// into words where no merge can cross.
		words := t.model.splitWords(ws.words[:0], q)
		for _, w := range words {
			dst = t.model.encodeWord(ws, w, dst)
		}
		clear(words)
		ws.words = words[:0]
	}
	clear(pieces) // drop string references held by the pooled buffer
	ws.pieces = pieces[:0]
	return dst
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

	syms   []symbol
	heap   []uint64
	word   []byte
	runes  []rune
	pieces []piece
	words  []piece
	tmp    []piece
	spans  []span

	// cache remembers the ids of short pieces already encoded: words
	// repeat, and most of a prompt's cost is merging them. ids[v>>32 :
	// v>>32+v&0xffffffff] are the ids of the piece cached under key v.
	cache    map[string]uint64
	cacheIDs []uint32
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
}
