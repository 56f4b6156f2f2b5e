package tokenize

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// DeepSeek V3's pre-tokenizer is a Sequence of three Isolated Splits, each
// applied to every piece the one before produced, then ByteLevel without
// its regex. Each pattern has a hand-written matcher (fastSplitterFor), and
// the whole Sequence a fused one (deepseekPT) that newPreTokenizer uses in
// its place. Unlike the patterns in fastsplit.go these do not match at
// every position: text no alternative matches is left between matches (an
// unmatched span, which Isolated keeps as a piece).
const (
	// deepseekDigitsPattern cuts numbers into groups of up to three.
	deepseekDigitsPattern = `\p{N}{1,3}`
	// deepseekCJKPattern isolates runs of CJK ideographs (U+4E00–U+9FA5),
	// hiragana (U+3040–U+309F) and katakana (U+30A0–U+30FF).
	deepseekCJKPattern = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	// deepseekWordPattern is cl100k's pattern with an ASCII punctuation
	// character joined to the ASCII letters after it, marks in words,
	// punctuation as \p{P} and \p{S}, and no alternative for numbers
	// (the first Split has cut them out). \r and \n are the characters
	// themselves, as in tokenizer.json.
	deepseekWordPattern = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|" +
		"[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|" +
		" ?[\\p{P}\\p{S}]+[\r\n]*|" +
		"\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

// The DeepSeek matchers of a fastSplitter (its deepseek field).
const (
	dsMatchDigits = 1 + iota
	dsMatchCJK
	dsMatchWord
)

// DeepSeek class bits of a rune. A rune has at most one of dsL, dsM, dsN,
// dsPS and dsSpace (Unicode's categories are disjoint, and \s is Z plus
// controls); dsCJK comes with dsL, dsM, dsPS or none (unassigned).
const (
	dsL     = 1 << iota // \p{L}
	dsM                 // \p{M}
	dsN                 // \p{N}
	dsPS                // \p{P} or \p{S}
	dsSpace             // \s (unicode.IsSpace)
	dsNL                // \r or \n (also dsSpace)
	dsCJK               // U+4E00–U+9FA5, U+3040–U+30FF
)

// dsClassOf returns the DeepSeek class of r.
func dsClassOf(r rune) uint8 {
	var c uint8
	if ('\u4e00' <= r && r <= '\u9fa5') || ('\u3040' <= r && r <= '\u30ff') {
		c = dsCJK
	}
	switch {
	case unicode.IsLetter(r):
		c |= dsL
	case unicode.IsMark(r):
		c |= dsM
	case unicode.IsNumber(r):
		c |= dsN
	case unicode.IsPunct(r) || unicode.IsSymbol(r):
		c |= dsPS
	case r == '\r' || r == '\n':
		c |= dsSpace | dsNL
	case unicode.IsSpace(r):
		c |= dsSpace
	}
	return c
}

// dsClasses holds the DeepSeek class of every rune of the Basic
// Multilingual Plane: looking up a table is several times faster than
// searching Unicode's, and this text is mostly in the BMP.
type dsClasses [0x10000]uint8

// dsClassTable builds the table on first use (64 KiB, a fraction of a
// millisecond).
var dsClassTable = sync.OnceValue(func() *dsClasses {
	t := new(dsClasses)
	for _, c := range []struct {
		tab *unicode.RangeTable
		bit uint8
	}{
		{unicode.L, dsL}, {unicode.M, dsM}, {unicode.N, dsN}, {unicode.P, dsPS}, {unicode.S, dsPS},
		{unicode.White_Space, dsSpace}, // unicode.IsSpace's table
	} {
		for _, rg := range c.tab.R16 {
			for r := uint32(rg.Lo); r <= uint32(rg.Hi); r += uint32(rg.Stride) {
				t[r] |= c.bit
			}
		}
	}
	t['\r'] |= dsNL
	t['\n'] |= dsNL
	for r := 0x4e00; r <= 0x9fa5; r++ {
		t[r] |= dsCJK
	}
	for r := 0x3040; r <= 0x30ff; r++ {
		t[r] |= dsCJK
	}
	return t
})

// at returns the class and width of the rune at s[i]. An invalid byte is
// U+FFFD (a symbol) of width 1, as the regexp path decodes it.
func (t *dsClasses) at(s string, i int) (uint8, int) {
	c0 := s[i]
	if c0 < utf8.RuneSelf {
		return t[c0], 1
	}
	// Decode two- and three-byte runes here: utf8.DecodeRuneInString
	// does not inline them. Overlong forms and surrogates fall through.
	if c0 >= 0xc2 && c0 < 0xe0 && i+1 < len(s) && s[i+1]&0xc0 == 0x80 {
		return t[rune(c0&0x1f)<<6|rune(s[i+1]&0x3f)], 2
	}
	if c0&0xf0 == 0xe0 && i+2 < len(s) && s[i+1]&0xc0 == 0x80 && s[i+2]&0xc0 == 0x80 {
		r := rune(c0&0x0f)<<12 | rune(s[i+1]&0x3f)<<6 | rune(s[i+2]&0x3f)
		if r >= 0x800 && (r < 0xd800 || r > 0xdfff) {
			return t[r], 3
		}
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		return t[r], w
	}
	return dsClassOf(r), w
}

// run returns the end of the run of runes from i with a bit of want.
func (t *dsClasses) run(s string, i int, want uint8) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if t[c]&want == 0 {
				break
			}
			i++
			continue
		}
		c, w := t.at(s, i)
		if c&want == 0 {
			break
		}
		i += w
	}
	return i
}

// runNot returns the end of the run of runes from i with no bit of stop.
func (t *dsClasses) runNot(s string, i int, stop uint8) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if t[c]&stop != 0 {
				break
			}
			i++
			continue
		}
		c, w := t.at(s, i)
		if c&stop != 0 {
			break
		}
		i += w
	}
	return i
}

func isASCIILetter(c byte) bool { return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') }

// dsNext returns the end of the match of f's DeepSeek pattern that starts
// at s[i], or i when none does.
func (f *fastSplitter) dsNext(t *dsClasses, s string, i int) int {
	switch f.deepseek {
	case dsMatchDigits:
		return t.digitGroup(s, i)
	case dsMatchCJK:
		return t.run(s, i, dsCJK)
	}
	return t.wordNext(s, i)
}

// digitGroup matches `\p{N}{1,3}` at s[i], returning i when s[i] is not
// a number.
func (t *dsClasses) digitGroup(s string, i int) int {
	j := i
	for k := 0; k < 3 && j < len(s); k++ {
		c, w := t.at(s, j)
		if c&dsN == 0 {
			break
		}
		j += w
	}
	return j
}

// wordNext matches deepseekWordPattern at s[i], returning i when no
// alternative matches (a number or a control or format character not
// followed by a letter or mark). The alternatives are tried in order, as
// the regexp engine does; the optional leading characters are taken before
// not, and every run is greedy with nothing after it that could make it
// give back.
func (t *dsClasses) wordNext(s string, i int) int {
	c, w := t.at(s, i)
	// `[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+`: the class is
	// every ASCII punctuation or symbol character.
	if s[i] < utf8.RuneSelf && c&dsPS != 0 && i+1 < len(s) && isASCIILetter(s[i+1]) {
		j := i + 2
		for j < len(s) && isASCIILetter(s[j]) {
			j++
		}
		return j
	}
	// `[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+`. A leading mark is both the
	// optional character and a first [\p{L}\p{M}]: the match is the same.
	if c&(dsL|dsM) != 0 {
		return t.run(s, i+w, dsL|dsM)
	}
	if c&(dsPS|dsNL) == 0 && i+w < len(s) {
		if c2, w2 := t.at(s, i+w); c2&(dsL|dsM) != 0 {
			return t.run(s, i+w+w2, dsL|dsM)
		}
	}
	// ` ?[\p{P}\p{S}]+[\r\n]*`
	start := -1
	if c&dsPS != 0 {
		start = i
	} else if s[i] == ' ' && i+1 < len(s) {
		if c2, _ := t.at(s, i+1); c2&dsPS != 0 {
			start = i + 1
		}
	}
	if start >= 0 {
		j := t.run(s, start, dsPS)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// `\s*[\r\n]+|\s+(?!\S)|\s+`
	if c&dsSpace != 0 {
		return whitespace(s, i, true)
	}
	return i
}

// deepseekPT is DeepSeek V3's pre-tokenizer in one pass: Sequence of
// Split(deepseekDigitsPattern), Split(deepseekCJKPattern),
// Split(deepseekWordPattern), all Isolated, then ByteLevel without regex.
// The first two Splits cut the text into groups of up to three numbers,
// runs of CJK characters and runs of everything else (no number is a CJK
// character, so the second Split never cuts a group of numbers); the third
// then cuts each of those on its own, its ends being the text's ends for
// the look-ahead. It leaves a group of numbers whole: every alternative
// needs a letter, mark, punctuation, symbol or space.
type deepseekPT struct{ cls *dsClasses }

func (d deepseekPT) split(_ *workspace, dst []piece, p piece) []piece {
	t, s := d.cls, p.s
	for i := 0; i < len(s); {
		c, w := t.at(s, i)
		var j int
		switch {
		case c&dsN != 0:
			j = t.digitGroup(s, i)
			dst = append(dst, piece{s: s[i:j], bytes: true, first: p.first && i == 0})
			i = j
			continue
		case c&dsCJK != 0:
			j = t.run(s, i+w, dsCJK)
		default:
			j = t.runNot(s, i+w, dsN|dsCJK)
		}
		dst = t.words(dst, s, i, j, p.first)
		i = j
	}
	return dst
}

// words appends the pieces deepseekWordPattern cuts s[start:end] into:
// its matches and the unmatched text between them.
func (t *dsClasses) words(dst []piece, s string, start, end int, first bool) []piece {
	seg := s[start:end]
	gap := 0
	for i := 0; i < len(seg); {
		j := t.wordNext(seg, i)
		if j == i {
			_, w := utf8.DecodeRuneInString(seg[i:])
			i += w
			continue
		}
		if gap < i {
			dst = append(dst, piece{s: seg[gap:i], bytes: true, first: first && start+gap == 0})
		}
		dst = append(dst, piece{s: seg[i:j], bytes: true, first: first && start+i == 0})
		i, gap = j, j
	}
	if gap < len(seg) {
		dst = append(dst, piece{s: seg[gap:], bytes: true, first: first && start+gap == 0})
	}
	return dst
}

// fuseDeepSeek returns deepseekPT when seq is DeepSeek V3's pre-tokenizer,
// else nil.
func fuseDeepSeek(seq sequencePT) preTokenizer {
	if len(seq) != 4 {
		return nil
	}
	for k, want := range []uint8{dsMatchDigits, dsMatchCJK, dsMatchWord} {
		sp, ok := seq[k].(*splitPT)
		if !ok || sp.behavior != isolated || sp.invert || sp.re.fast == nil || sp.re.fast.deepseek != want {
			return nil
		}
	}
	if bl, ok := seq[3].(*byteLevelPT); !ok || bl.addPrefixSpace || bl.re != nil {
		return nil
	}
	return deepseekPT{cls: dsClassTable()}
}
