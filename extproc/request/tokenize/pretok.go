package tokenize

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// piece is a span of text on its way to the model.
type piece struct {
	s string
	// bytes marks text that a ByteLevel pre-tokenizer has claimed: the
	// model sees each byte as its byte-alphabet character.
	bytes bool
	// first marks the piece that starts the input (Metaspace "first").
	first bool
}

// preTokenizer splits pieces further. It appends the result of splitting p
// to dst.
type preTokenizer interface {
	split(ws *workspace, dst []piece, p piece) []piece
}

// gpt2Pattern is the ByteLevel pre-tokenizer's split pattern.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// byteRune maps each byte to its character in the GPT-2 byte alphabet:
// printable Latin-1 bytes map to themselves, the rest to U+0100 onwards.
var byteRune = func() (m [256]rune) {
	n := rune(0)
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = 256 + n
			n++
		}
	}
	return m
}()

// appendByteLevel appends the byte-alphabet form of s.
func appendByteLevel(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		dst = utf8.AppendRune(dst, byteRune[s[i]])
	}
	return dst
}

// hfPreTokenizer is one tokenizer.json pre_tokenizer object.
type hfPreTokenizer struct {
	Type           string            `json:"type"`
	AddPrefixSpace *bool             `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
	Pattern        *hfPattern        `json:"pattern"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	Replacement    *string           `json:"replacement"`
	PrependScheme  string            `json:"prepend_scheme"`
	Split          *bool             `json:"split"`
	Individual     bool              `json:"individual_digits"`
	PreTokenizers  []json.RawMessage `json:"pretokenizers"`
}

// hfPattern is a Split or Replace pattern: {"Regex": …} or {"String": …}.
type hfPattern struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

// pattern is a compiled split pattern: a string search for a literal, a
// hand-written matcher when one exists for the expression, else the regexp
// engine.
type pattern struct {
	re   *regexp2.Regexp
	fast *fastSplitter
	// lit is the literal a {"String": …} pattern matches; "" for a regex.
	lit string
}

func newPattern(expr string) (*pattern, error) {
	re, err := regexp2.Compile(expr, regexp2.None)
	if err != nil {
		return nil, err
	}
	return &pattern{re: re, fast: fastSplitterFor(expr)}, nil
}

func (p *hfPattern) compile(where string) (*pattern, error) {
	var expr string
	switch {
	case p == nil:
		return nil, fmt.Errorf("%s: missing pattern", where)
	case p.Regex != nil:
		expr = *p.Regex
	case p.String != nil:
		expr = regexp2.Escape(*p.String)
	default:
		return nil, fmt.Errorf("%s: pattern has neither Regex nor String", where)
	}
	re, err := newPattern(expr)
	if err != nil {
		return nil, fmt.Errorf("%s: compile pattern %q: %w", where, expr, err)
	}
	if p.String != nil {
		re.lit = *p.String
	}
	return re, nil
}

// newPreTokenizer builds the pre-tokenizer of raw; nil raw means none.
// byteLevel reports whether a ByteLevel pre-tokenizer is present.
func newPreTokenizer(raw json.RawMessage) (pt preTokenizer, byteLevel bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false, nil
	}
	var c hfPreTokenizer
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, false, fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch c.Type {
	case "ByteLevel":
		bl := &byteLevelPT{addPrefixSpace: c.AddPrefixSpace != nil && *c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex {
			bl.re = mustPattern(gpt2Pattern)
		}
		return bl, true, nil
	case "Split":
		re, err := c.Pattern.compile("pre_tokenizer Split")
		if err != nil {
			return nil, false, err
		}
		b, ok := behaviors[c.Behavior]
		if !ok {
			return nil, false, fmt.Errorf("pre_tokenizer Split: unknown behavior %q", c.Behavior)
		}
		return &splitPT{re: re, behavior: b, invert: c.Invert}, false, nil
	case "Digits":
		re := mustPattern(`\p{Nd}+`)
		if c.Individual {
			re = mustPattern(`\p{Nd}`)
		}
		return &splitPT{re: re, behavior: isolated}, false, nil
	case "Metaspace":
		m := &metaspacePT{replacement: "▁", scheme: c.PrependScheme, splitOn: c.Split == nil || *c.Split}
		if c.Replacement != nil {
			m.replacement = *c.Replacement
		}
		if m.scheme == "" {
			m.scheme = "always"
			if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
				m.scheme = "never"
			}
		}
		if m.scheme != "always" && m.scheme != "first" && m.scheme != "never" {
			return nil, false, fmt.Errorf("pre_tokenizer Metaspace: unknown prepend_scheme %q", m.scheme)
		}
		if m.replacement == "" {
			return nil, false, fmt.Errorf("pre_tokenizer Metaspace: empty replacement")
		}
		return m, false, nil
	case "Sequence":
		var seq sequencePT
		for i, sub := range c.PreTokenizers {
			pt, bl, err := newPreTokenizer(sub)
			if err != nil {
				return nil, false, err
			}
			if byteLevel {
				return nil, false, fmt.Errorf("pre_tokenizer Sequence: step %d follows ByteLevel; ByteLevel must come last", i)
			}
			byteLevel = bl
			if pt != nil {
				seq = append(seq, pt)
			}
		}
		if fused := fuseDeepSeek(seq); fused != nil {
			return fused, byteLevel, nil
		}
		return seq, byteLevel, nil
	}
	return nil, false, fmt.Errorf("pre_tokenizer type %q is not supported (supported: ByteLevel, Split, Digits, Metaspace, Sequence)", c.Type)
}

type sequencePT []preTokenizer

func (s sequencePT) split(ws *workspace, dst []piece, p piece) []piece {
	start := len(dst)
	dst = append(dst, p)
	for _, pt := range s {
		if bl, ok := pt.(*byteLevelPT); ok && bl.re == nil && !bl.addPrefixSpace {
			// It only marks the pieces' bytes: no copy.
			for i := start; i < len(dst); i++ {
				dst[i].bytes = true
			}
			continue
		}
		if len(dst) == start+1 {
			// One piece: split it in place.
			q := dst[start]
			dst = pt.split(ws, dst[:start], q)
			continue
		}
		// Split the pieces in dst[start:] into ws.tmp, then copy back.
		tmp := ws.tmp[:0]
		ws.tmp = nil // a nested sequence must not share this buffer
		for _, q := range dst[start:] {
			tmp = pt.split(ws, tmp, q)
		}
		dst = append(dst[:start], tmp...)
		ws.tmp = tmp[:0]
	}
	return dst
}

func mustPattern(expr string) *pattern {
	p, err := newPattern(expr)
	if err != nil {
		panic(err)
	}
	return p
}

type byteLevelPT struct {
	addPrefixSpace bool
	re             *pattern // nil: use_regex false
}

func (b *byteLevelPT) split(ws *workspace, dst []piece, p piece) []piece {
	if b.addPrefixSpace && !strings.HasPrefix(p.s, " ") {
		p.s = " " + p.s
	}
	start := len(dst)
	if b.re == nil {
		dst = append(dst, p)
	} else {
		dst = regexSplit(ws, dst, p, b.re, isolated, false)
	}
	for i := start; i < len(dst); i++ {
		dst[i].bytes = true
	}
	return dst
}

// splitBehavior is HuggingFace's SplitDelimiterBehavior.
type splitBehavior uint8

const (
	removed splitBehavior = iota
	isolated
	mergedWithPrevious
	mergedWithNext
	contiguous
)

var behaviors = map[string]splitBehavior{
	"Removed": removed, "Isolated": isolated, "MergedWithPrevious": mergedWithPrevious,
	"MergedWithNext": mergedWithNext, "Contiguous": contiguous,
}

type splitPT struct {
	re       *pattern
	behavior splitBehavior
	invert   bool
}

func (s *splitPT) split(ws *workspace, dst []piece, p piece) []piece {
	return regexSplit(ws, dst, p, s.re, s.behavior, s.invert)
}

// span is a byte range of a piece and whether the pattern matched it.
type span struct {
	start, end int
	match      bool
}

// regexSplit splits p by the matches of re as HuggingFace's
// NormalizedString::split does: the text is cut into alternating matched
// and unmatched spans, which behavior then keeps, drops or merges.
func regexSplit(ws *workspace, dst []piece, p piece, re *pattern, behavior splitBehavior, invert bool) []piece {
	if f := re.fast; behavior == isolated && f != nil && f.deepseek == 0 {
		// The matches tile the text and every one is kept: the pieces
		// are the matches, with no spans in between.
		for i := 0; i < len(p.s); {
			j := f.next(p.s, i)
			dst = append(dst, piece{s: p.s[i:j], bytes: p.bytes, first: p.first && i == 0})
			i = j
		}
		return dst
	}
	spans := re.spans(ws, p.s, invert)
	var merged []span
	switch behavior {
	case isolated, removed:
		merged = spans
	case contiguous:
		merged = spans[:0:0]
		prevMatch := false
		for i, sp := range spans {
			if i > 0 && sp.match == prevMatch {
				merged[len(merged)-1].end = sp.end
			} else {
				merged = append(merged, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
	case mergedWithPrevious:
		merged = spans[:0:0]
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(merged) > 0 {
				merged[len(merged)-1].end = sp.end
			} else {
				merged = append(merged, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
	case mergedWithNext:
		merged = spans[:0:0]
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(merged) > 0 {
				merged[len(merged)-1].start = sp.start
			} else {
				merged = append(merged, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
		for i, j := 0, len(merged)-1; i < j; i, j = i+1, j-1 {
			merged[i], merged[j] = merged[j], merged[i]
		}
	}
	for _, sp := range merged {
		if sp.start == sp.end || (behavior == removed && sp.match) {
			continue
		}
		dst = append(dst, piece{s: p.s[sp.start:sp.end], bytes: p.bytes, first: p.first && sp.start == 0})
	}
	return dst
}

// spans cuts s into matched and unmatched spans of p, in order; with
// invert, the roles swap. The result lives in ws until the next call.
func (p *pattern) spans(ws *workspace, s string, invert bool) []span {
	if s == "" {
		return nil
	}
	switch {
	case p.lit != "":
		ws.spans = literalSpans(ws.spans[:0], s, p.lit, invert)
		return ws.spans
	case p.fast != nil:
		ws.spans = p.fast.spans(ws.spans[:0], s, invert)
		return ws.spans
	}
	return p.regexpSpans(ws, s, invert)
}

// regexpSpans is spans by the regexp engine.
func (p *pattern) regexpSpans(ws *workspace, s string, invert bool) []span {
	re := p.re
	// regexp2 matches over runes. Matches come in order, so a cursor
	// turns their rune indexes into byte offsets.
	runes := ws.runes[:0]
	if n := utf8.RuneCountInString(s); cap(runes) < n {
		runes = make([]rune, 0, n)
	}
	for _, r := range s {
		runes = append(runes, r)
	}
	ws.runes = runes
	var cur runeCursor
	spans := ws.spans[:0]
	prev := 0
	m, err := re.FindRunesMatch(runes)
	for err == nil && m != nil {
		start := cur.offset(s, m.Index)
		end := cur.offset(s, m.Index+m.Length)
		if start > prev {
			spans = append(spans, span{prev, start, invert})
		}
		if end > start {
			spans = append(spans, span{start, end, !invert})
		}
		prev = end
		if ws.cancelled(m.Length + 1) {
			break // the caller stops at its next check
		}
		m, err = re.FindNextMatch(m)
	}
	if prev < len(s) {
		spans = append(spans, span{prev, len(s), invert})
	}
	ws.spans = spans
	return spans
}

// literalSpans appends the spans of s cut at the non-overlapping
// occurrences of lit, leftmost first, as the regexp engine matches a
// quoted literal.
func literalSpans(dst []span, s, lit string, invert bool) []span {
	prev := 0
	for prev < len(s) {
		i := strings.Index(s[prev:], lit)
		if i < 0 {
			break
		}
		if i > 0 {
			dst = append(dst, span{prev, prev + i, invert})
		}
		dst = append(dst, span{prev + i, prev + i + len(lit), !invert})
		prev += i + len(lit)
	}
	if prev < len(s) {
		dst = append(dst, span{prev, len(s), invert})
	}
	return dst
}

// runeCursor walks a string forward, turning rune indexes into byte
// offsets.
type runeCursor struct{ runes, bytes int }

// offset is the byte offset of rune index i in s; i never decreases from
// one call to the next.
func (c *runeCursor) offset(s string, i int) int {
	for ; c.runes < i; c.runes++ {
		_, size := utf8.DecodeRuneInString(s[c.bytes:])
		c.bytes += size
	}
	return c.bytes
}

type metaspacePT struct {
	replacement string
	scheme      string
	splitOn     bool
}

func (m *metaspacePT) split(_ *workspace, dst []piece, p piece) []piece {
	s := strings.ReplaceAll(p.s, " ", m.replacement)
	if !strings.HasPrefix(s, m.replacement) && (m.scheme == "always" || (m.scheme == "first" && p.first)) {
		s = m.replacement + s
	}
	if !m.splitOn {
		return append(dst, piece{s: s, bytes: p.bytes, first: p.first})
	}
	// Split before every replacement character (MergedWithNext).
	for start := 0; start < len(s); {
		end := len(s)
		if rest := s[start:]; strings.HasPrefix(rest, m.replacement) {
			if i := strings.Index(rest[len(m.replacement):], m.replacement); i >= 0 {
				end = start + len(m.replacement) + i
			}
		} else if i := strings.Index(rest, m.replacement); i >= 0 {
			end = start + i
		}
		dst = append(dst, piece{s: s[start:end], bytes: p.bytes, first: p.first && start == 0})
		start = end
	}
	return dst
}
