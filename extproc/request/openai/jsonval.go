package openai

import (
	"bytes"
	"math"
	"runtime"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The helpers in this file read single JSON values inside a body whose
// syntax topFields (syntax.go) has already checked, in the same pass that
// split it into members, so each byte of the body is scanned a small, fixed
// number of times and nothing is decoded twice. They still bounds-check
// every access: malformed input yields an error, never a panic.

// JSON value kinds, by first byte.
const (
	kindAbsent = 0
	kindNull   = 'n'
	kindBool   = 't'
	kindNumber = '0'
	kindString = '"'
	kindArray  = '['
	kindObject = '{'
)

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func trimSpace(raw []byte) []byte {
	for len(raw) > 0 && isSpace(raw[0]) {
		raw = raw[1:]
	}
	for len(raw) > 0 && isSpace(raw[len(raw)-1]) {
		raw = raw[:len(raw)-1]
	}
	return raw
}

// valueKind classifies a raw value; an absent value and null are both
// "not given" to callers that check for kindAbsent or kindNull.
func valueKind(raw []byte) byte {
	raw = trimSpace(raw)
	if len(raw) == 0 {
		return kindAbsent
	}
	switch c := raw[0]; c {
	case 'n':
		return kindNull
	case 't', 'f':
		return kindBool
	case '"', '[', '{':
		return c
	}
	return kindNumber
}

// given reports whether a field is present and not null.
func given(raw []byte) bool {
	k := valueKind(raw)
	return k != kindAbsent && k != kindNull
}

// scanValue returns the length of the JSON value at the start of b, or -1.
func scanValue(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	switch b[0] {
	case '"':
		return scanString(b)
	case '[', '{':
		depth := 0
		for i := 0; i < len(b); i++ {
			switch b[i] {
			case '"':
				n := scanString(b[i:])
				if n < 0 {
					return -1
				}
				i += n - 1
			case '[', '{':
				depth++
			case ']', '}':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	i := 0
	for i < len(b) && b[i] != ',' && b[i] != ']' && b[i] != '}' && !isSpace(b[i]) {
		i++
	}
	return i
}

// scanString returns the length of the string literal at the start of b,
// quotes included, or -1.
func scanString(b []byte) int {
	// topFields checked the string, so only quotes and escapes matter:
	// two vectorized searches find them, the quote once per escaped one.
	q := 0 // the next quote at or after i, once q >= i
	for i := 1; ; {
		if q < i {
			k := bytes.IndexByte(b[i:], '"')
			if k < 0 {
				return -1
			}
			q = i + k
		}
		e := bytes.IndexByte(b[i:q], '\\')
		if e < 0 {
			return q + 1
		}
		i += e + 2
	}
}

// yieldBytes is how much of a body a parse reads between two yields of its
// thread: a large body is parsed in slices of about a millisecond, so the
// small requests parsed beside it wait for a slice, not for the whole body.
const yieldBytes = 64 << 10

// yielder yields the thread every yieldBytes of progress.
type yielder struct{ next int }

// after notes that off bytes were read, yielding when a slice is done.
func (y *yielder) after(off int) {
	if off >= y.next {
		if y.next > 0 {
			runtime.Gosched()
		}
		y.next = off + yieldBytes
	}
}

// forEach calls fn with the index and raw bytes of each element of the JSON
// array raw. It stops at the first error fn returns.
func forEach(raw []byte, field string, fn func(i int, elem []byte) *Error) *Error {
	raw = trimSpace(raw)
	if len(raw) < 2 || raw[0] != '[' {
		return wrongType(field, "an array")
	}
	b := raw[1:]
	var y yielder
	for i := 0; ; i++ {
		b = trimSpace(b)
		if len(b) == 0 {
			return wrongType(field, "an array")
		}
		if b[0] == ']' && i == 0 {
			return nil
		}
		y.after(len(raw) - len(b))
		n := scanValue(b)
		if n <= 0 {
			return wrongType(field, "an array")
		}
		if err := fn(i, b[:n]); err != nil {
			return err
		}
		b = trimSpace(b[n:])
		if len(b) == 0 {
			return wrongType(field, "an array")
		}
		switch b[0] {
		case ']':
			return nil
		case ',':
			b = b[1:]
		default:
			return wrongType(field, "an array")
		}
	}
}

// stringValue decodes a JSON string.
func stringValue(raw []byte, field string) (string, *Error) {
	b, err := stringBytes(raw, field)
	return string(b), err
}

// stringBytes decodes a JSON string; the result shares raw's bytes when
// there is nothing to undo.
func stringBytes(raw []byte, field string) ([]byte, *Error) {
	raw = trimSpace(raw)
	if valueKind(raw) != kindString || len(raw) < 2 || raw[len(raw)-1] != '"' {
		return nil, wrongType(field, "a string")
	}
	b, ok := unquote(raw[1 : len(raw)-1])
	if !ok {
		return nil, wrongType(field, "a string")
	}
	return b, nil
}

// unquote undoes JSON string escapes in s, the text between the quotes. As
// encoding/json does, it turns invalid UTF-8 and unpaired surrogates into
// U+FFFD. It returns s itself when there is nothing to undo.
func unquote(s []byte) ([]byte, bool) {
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return s, true
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 >= len(s) {
				return nil, false
			}
			i++
			switch e := s[i]; e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hex4(s[i+1:])
				if !ok {
					return nil, false
				}
				i += 4
				if utf16.IsSurrogate(r) {
					r2, ok := rune(-1), false
					if i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
						r2, ok = hex4(s[i+3:])
					}
					if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				return nil, false
			}
			i++
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			out = utf8.AppendRune(out, r) // RuneError for invalid bytes
			i += size
		}
	}
	return out, true
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// members reads the named members of the JSON object raw into dst, in the
// order of names; other members are skipped.
func members(raw []byte, field string, names []string, dst ...*[]byte) *Error {
	return forFields(raw, field, "an object", func(key, val []byte) *Error {
		for i, n := range names {
			if string(key) == n {
				*dst[i] = val
			}
		}
		return nil
	})
}

// forFields calls fn with the unquoted key and raw value of each member of
// the JSON object raw, in order; it stops at the first error fn returns.
// want completes the type error ("'field' must be …").
func forFields(raw []byte, field, want string, fn func(key, val []byte) *Error) *Error {
	raw = trimSpace(raw)
	if len(raw) < 2 || raw[0] != '{' {
		return wrongType(field, want)
	}
	b := trimSpace(raw[1:])
	if len(b) > 0 && b[0] == '}' {
		return nil
	}
	for {
		b = trimSpace(b)
		n := scanString(b)
		if n < 2 {
			return wrongType(field, want)
		}
		key, ok := unquote(b[1 : n-1])
		if !ok {
			return wrongType(field, want)
		}
		b = trimSpace(b[n:])
		if len(b) == 0 || b[0] != ':' {
			return wrongType(field, want)
		}
		b = trimSpace(b[1:])
		n = scanValue(b)
		if n <= 0 {
			return wrongType(field, want)
		}
		if err := fn(key, b[:n]); err != nil {
			return err
		}
		b = trimSpace(b[n:])
		if len(b) == 0 {
			return wrongType(field, want)
		}
		switch b[0] {
		case '}':
			return nil
		case ',':
			b = b[1:]
		default:
			return wrongType(field, want)
		}
	}
}

// optString decodes an optional string: absent or null gives "".
func optString(raw []byte, field string) (string, *Error) {
	if !given(raw) {
		return "", nil
	}
	return stringValue(raw, field)
}

// optBool decodes an optional boolean: absent or null gives false.
func optBool(raw []byte, field string) (bool, *Error) {
	switch string(trimSpace(raw)) {
	case "", "null", "false":
		return false, nil
	case "true":
		return true, nil
	}
	return false, wrongType(field, "a boolean")
}

// integer decodes a JSON number that must be an integer in [lo, hi]. An
// integral value written with a fraction or exponent (3.0, 1e3) counts.
func integer(raw []byte, field string, lo, hi int64, want string) (int64, *Error) {
	raw = trimSpace(raw)
	if valueKind(raw) != kindNumber {
		return 0, wrongType(field, want)
	}
	s := string(raw)
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		if v < lo || v > hi {
			return 0, invalid(field, want)
		}
		return v, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		return 0, invalid(field, want)
	}
	return int64(f), nil
}

// optCount decodes an optional non-negative integer; absent or null gives 0.
func optCount(raw []byte, field string) (int, *Error) {
	if !given(raw) {
		return 0, nil
	}
	v, err := integer(raw, field, 0, math.MaxInt32, "a non-negative integer")
	return int(v), err
}

// tokenID parses one token id: an integer in [0, 2^32-1].
func tokenID(num []byte) (uint32, bool) {
	if len(num) == 0 {
		return 0, false
	}
	// Fast path: plain decimal digits.
	var v uint64
	plain := true
	for _, c := range num {
		if c < '0' || c > '9' {
			plain = false
			break
		}
		v = v*10 + uint64(c-'0')
		if v > math.MaxUint32 {
			return 0, false
		}
	}
	if plain {
		return uint32(v), true
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil || math.IsNaN(f) || f != math.Trunc(f) || f < 0 || f > math.MaxUint32 {
		return 0, false
	}
	return uint32(f), true
}

// appendIDs appends the token ids of the flat JSON array raw to dst. Every
// element must be an integer in [0, 2^32-1].
func appendIDs(dst []uint32, raw []byte, field string) ([]uint32, *Error) {
	err := forEach(raw, field, func(i int, elem []byte) *Error {
		if valueKind(elem) != kindNumber {
			return wrongType(field, "an array of token ids")
		}
		id, ok := tokenID(elem)
		if !ok {
			return invalid(field+"["+strconv.Itoa(i)+"]", "a token id: an integer in [0, 4294967295]")
		}
		dst = append(dst, id)
		return nil
	})
	return dst, err
}
