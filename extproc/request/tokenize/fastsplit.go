package tokenize

import (
	"unicode"
	"unicode/utf8"
)

// Split patterns that have a hand-written matcher. Each matches exactly as
// the regular expression does (leftmost-first alternation, greedy
// quantifiers with backtracking, \s as unicode.IsSpace, \p{L} and \p{N} as
// Unicode letters and numbers), an order of magnitude faster. A
// differential test holds them to the regexp engine.
const (
	// cl100kPattern is tiktoken's cl100k_base pattern, also Llama 3's.
	cl100kPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// qwen2Pattern is Qwen 2's: cl100k's with single digits.
	qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// o200kPattern is tiktoken's o200k_base pattern, also gpt-oss's.
	o200kPattern = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|` +
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|` +
		`\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// fastSplitter is a hand-written matcher for one known pattern. For the
// patterns above every position of any text starts a non-empty match, so
// the matches tile the text; DeepSeek V3's (fastsplit_deepseek.go) leave
// unmatched text between them.
type fastSplitter struct {
	gpt2      bool  // GPT-2's pattern
	o200k     bool  // o200k's pattern; otherwise the cl100k family
	maxDigits int   // cl100k family: \p{N}{1,maxDigits}
	deepseek  uint8 // dsMatchDigits, dsMatchCJK or dsMatchWord: DeepSeek V3's
}

// fastSplitterFor returns the matcher of pattern, or nil.
func fastSplitterFor(pattern string) *fastSplitter {
	switch pattern {
	case gpt2Pattern:
		return &fastSplitter{gpt2: true}
	case cl100kPattern:
		return &fastSplitter{maxDigits: 3}
	case qwen2Pattern:
		return &fastSplitter{maxDigits: 1}
	case o200kPattern:
		return &fastSplitter{o200k: true, maxDigits: 3}
	case deepseekDigitsPattern:
		return &fastSplitter{deepseek: dsMatchDigits}
	case deepseekCJKPattern:
		return &fastSplitter{deepseek: dsMatchCJK}
	case deepseekWordPattern:
		return &fastSplitter{deepseek: dsMatchWord}
	}
	return nil
}

// class bits of a rune.
const (
	clsLetter = 1 << iota
	clsNumber
	clsSpace
	clsNewline // \r or \n (also clsSpace)
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := range utf8.RuneSelf {
		r := rune(c)
		switch {
		case unicode.IsLetter(r):
			t[c] = clsLetter
		case unicode.IsNumber(r):
			t[c] = clsNumber
		case r == '\r' || r == '\n':
			t[c] = clsSpace | clsNewline
		case unicode.IsSpace(r):
			t[c] = clsSpace
		}
	}
	return t
}()

// classAt returns the class and width of the rune at s[i].
func classAt(s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	switch {
	case unicode.IsLetter(r):
		return clsLetter, w
	case unicode.IsNumber(r):
		return clsNumber, w
	case unicode.IsSpace(r):
		return clsSpace, w
	}
	return 0, w
}

// run returns the end of the run of runes from i whose class has a bit of
// want (want 0: runes of class 0, neither letter, number nor space).
func run(s string, i int, want uint8) int {
	for i < len(s) {
		c, w := asciiClass[s[i]&(utf8.RuneSelf-1)], 1 // classAt, inlined for ASCII
		if s[i] >= utf8.RuneSelf {
			c, w = classAt(s, i)
		}
		if (want == 0 && c != 0) || (want != 0 && c&want == 0) {
			break
		}
		i += w
	}
	return i
}

// contraction returns the length of 's, 't, 're, 've, 'm, 'll or 'd at
// s[i] (s[i] is the apostrophe), or 0. fold matches letters in either case.
func contraction(s string, i int, fold bool) int {
	lower := func(k int) byte {
		if k >= len(s) {
			return 0
		}
		c := s[k]
		if fold && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		return c
	}
	switch a := lower(i + 1); a {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if lower(i+2) == 'e' {
			return 3
		}
	case 'l':
		if lower(i+2) == 'l' {
			return 3
		}
	}
	return 0
}

// next returns the end of the match that starts at s[i], i < len(s).
func (f *fastSplitter) next(s string, i int) int {
	if s[i] == '\'' && !f.o200k {
		if n := contraction(s, i, !f.gpt2); n > 0 {
			return i + n
		}
	}
	c, w := classAt(s, i)
	if f.gpt2 {
		// ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`
		if s[i] == ' ' && i+1 < len(s) {
			switch c2, _ := classAt(s, i+1); {
			case c2&clsLetter != 0:
				return run(s, i+1, clsLetter)
			case c2&clsNumber != 0:
				return run(s, i+1, clsNumber)
			case c2 == 0:
				return run(s, i+1, 0)
			}
		}
		switch {
		case c&clsLetter != 0:
			return run(s, i, clsLetter)
		case c&clsNumber != 0:
			return run(s, i, clsNumber)
		case c == 0:
			return run(s, i, 0)
		}
		return whitespace(s, i, false)
	}
	if f.o200k {
		if j := o200kWord(s, i, c, w); j > i {
			return j
		}
	} else if c&clsLetter != 0 { // `[^\r\n\p{L}\p{N}]?\p{L}+`
		return run(s, i, clsLetter)
	}
	if !f.o200k && c&(clsNewline|clsNumber) == 0 && i+w < len(s) {
		if c2, _ := classAt(s, i+w); c2&clsLetter != 0 {
			return run(s, i+w, clsLetter)
		}
	}
	// `\p{N}{1,n}`
	if c&clsNumber != 0 {
		j := i
		for k := 0; k < f.maxDigits && j < len(s); k++ {
			cj, wj := classAt(s, j)
			if cj&clsNumber == 0 {
				break
			}
			j += wj
		}
		return j
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	start := -1
	if c == 0 {
		start = i
	} else if s[i] == ' ' && i+1 < len(s) {
		if c2, _ := classAt(s, i+1); c2 == 0 {
			start = i + 1
		}
	}
	if start >= 0 {
		j := run(s, start, 0)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n' || (f.o200k && s[j] == '/')) {
			j++
		}
		return j
	}
	return whitespace(s, i, true)
}

// Letter categories for o200k: upper-ish U = [Lu Lt Lm Lo M] and
// lower-ish W = [Ll Lm Lo M].
const (
	catU = 1 << iota
	catW
)

// letterCat returns the U/W membership and width of the rune at s[i].
func letterCat(s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		switch {
		case 'a' <= c && c <= 'z':
			return catW, 1
		case 'A' <= c && c <= 'Z':
			return catU, 1
		}
		return 0, 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	switch {
	case unicode.Is(unicode.Ll, r):
		return catW, w
	case unicode.Is(unicode.Lu, r) || unicode.Is(unicode.Lt, r):
		return catU, w
	case unicode.Is(unicode.Lm, r) || unicode.Is(unicode.Lo, r) || unicode.Is(unicode.M, r):
		return catU | catW, w
	}
	return 0, w
}

// catRun returns the end of the run of runes from i in category want.
func catRun(s string, i int, want uint8) int {
	for i < len(s) {
		c, w := letterCat(s, i)
		if c&want == 0 {
			break
		}
		i += w
	}
	return i
}

// o200kWord matches o200k's two word alternatives at s[i] (class c, width
// w), returning i when neither matches:
//
//	P?U*W+C? | P?U+W*C?    P = [^\r\n\p{L}\p{N}], C = a contraction
//
// trying, as the regexp engine does, the optional P taken before not, and
// each greedy run longest first.
func o200kWord(s string, i int, c uint8, w int) int {
	var starts [2]int
	n := 0
	if c&(clsLetter|clsNumber|clsNewline) == 0 {
		starts[n] = i + w
		n++
	}
	starts[n] = i
	n++
	// P?U*W+C?
	for _, start := range starts[:n] {
		uEnd := catRun(s, start, catU)
		// Back off U* one rune at a time until W+ can match.
		for u := uEnd; ; {
			if u < len(s) {
				if cu, _ := letterCat(s, u); cu&catW != 0 {
					return withContraction(s, catRun(s, u, catW))
				}
			}
			if u == start {
				break
			}
			_, back := utf8.DecodeLastRuneInString(s[start:u])
			u -= back
		}
	}
	// P?U+W*C?
	for _, start := range starts[:n] {
		if uEnd := catRun(s, start, catU); uEnd > start {
			return withContraction(s, catRun(s, uEnd, catW))
		}
	}
	return i
}

// withContraction extends a word ending at j by a following contraction.
func withContraction(s string, j int) int {
	if j < len(s) && s[j] == '\'' {
		j += contraction(s, j, true)
	}
	return j
}

// whitespace matches at a whitespace rune: `\s*[\r\n]+` (when newlines is
// set), then `\s+(?!\S)`, then `\s+`.
func whitespace(s string, i int, newlines bool) int {
	j := i
	lastNL, lastStart := -1, i
	for j < len(s) {
		c, w := classAt(s, j)
		if c&clsSpace == 0 {
			break
		}
		if c&clsNewline != 0 {
			lastNL = j
		}
		lastStart = j
		j += w
	}
	switch {
	case newlines && lastNL >= 0:
		return lastNL + 1
	case j == len(s) || lastStart == i:
		return j
	}
	return lastStart
}

// spans appends the matches of f in s, marked match (or, with invert,
// unmatched), and the text between them, marked the other way.
func (f *fastSplitter) spans(dst []span, s string, invert bool) []span {
	if f.deepseek == 0 {
		for i := 0; i < len(s); {
			j := f.next(s, i)
			dst = append(dst, span{i, j, !invert})
			i = j
		}
		return dst
	}
	t := dsClassTable()
	gap := 0
	for i := 0; i < len(s); {
		j := f.dsNext(t, s, i)
		if j == i { // no match starts here
			_, w := utf8.DecodeRuneInString(s[i:])
			i += w
			continue
		}
		if gap < i {
			dst = append(dst, span{gap, i, invert})
		}
		dst = append(dst, span{i, j, !invert})
		i, gap = j, j
	}
	if gap < len(s) {
		dst = append(dst, span{gap, len(s), invert})
	}
	return dst
}
