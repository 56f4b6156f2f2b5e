package tokenize

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"

	"github.com/tollgate/tollgate/extproc/request/jsonscan"
)

// The template input decoder: it reads the request's messages and tools
// JSON into template values in one pass, as encoding/json's Decoder with
// UseNumber reads them token by token: the same values, and the same inputs
// rejected (jsonvalue_test.go keeps that decoder as the oracle). Where
// encoding/json scans a string three times, it scans it once (and checks
// the UTF-8 of one that is not ASCII) and converts a string that needs no
// unescaping straight from the input.

// maxNestingDepth bounds how deeply the arrays and objects of one decoded
// document nest. It is the request parser's bound (openai.MaxNestingDepth,
// encoding/json's too), so every body the parser accepts decodes; it keeps
// the decoder's recursion bounded on input that did not come through the
// parser, such as a tool call's arguments string.
const maxNestingDepth = 10000

// jsonDecoder reads JSON values from b, starting at i.
type jsonDecoder struct {
	b     []byte
	i     int
	depth int    // containers open
	buf   []byte // scratch for unescaping strings
}

func (d *jsonDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// syntaxError describes the byte at d.i, read while looking for what.
func (d *jsonDecoder) syntaxError(what string) error {
	if d.i >= len(d.b) {
		return errors.New("unexpected end of JSON input")
	}
	return fmt.Errorf("invalid character %q at byte %d looking for %s", d.b[d.i], d.i, what)
}

// open enters a container at d.i, within the nesting bound.
func (d *jsonDecoder) open() error {
	if d.depth >= maxNestingDepth {
		return fmt.Errorf("JSON nested deeper than %d levels at byte %d", maxNestingDepth, d.i)
	}
	d.depth++
	d.i++
	return nil
}

// next reads, after any space, the ',' between two elements (true) or the
// closing byte of the container (false).
func (d *jsonDecoder) next(closing byte) (bool, error) {
	d.space()
	if d.i < len(d.b) {
		switch d.b[d.i] {
		case ',':
			d.i++
			return true, nil
		case closing:
			d.i++
			d.depth--
			return false, nil
		}
	}
	if closing == '}' {
		return false, d.syntaxError("',' or '}' after an object member")
	}
	return false, d.syntaxError("',' or ']' after an array element")
}

// key reads, after any space, an object key and its colon. The key is a
// slice of the input or of d.buf, valid until the next string is read.
func (d *jsonDecoder) key() ([]byte, error) {
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, d.syntaxError("an object key")
	}
	k, err := d.str()
	if err != nil {
		return nil, err
	}
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != ':' {
		return nil, d.syntaxError("':' after an object key")
	}
	d.i++
	return k, nil
}

// end checks that only space follows the value.
func (d *jsonDecoder) end() error {
	d.space()
	if d.i != len(d.b) {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// value reads the value after any space.
func (d *jsonDecoder) value() (jinja.Value, error) {
	d.space()
	if d.i >= len(d.b) {
		return jinja.Undefined(), d.syntaxError("a value")
	}
	switch c := d.b[d.i]; c {
	case '"':
		s, err := d.str()
		if err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewString(string(s)), nil
	case '[':
		if err := d.open(); err != nil {
			return jinja.Undefined(), err
		}
		var items []jinja.Value
		d.space()
		if d.i < len(d.b) && d.b[d.i] == ']' {
			d.i++
			d.depth--
			return jinja.NewList(items), nil
		}
		for more := true; more; {
			v, err := d.value()
			if err != nil {
				return jinja.Undefined(), err
			}
			items = append(items, v)
			if more, err = d.next(']'); err != nil {
				return jinja.Undefined(), err
			}
		}
		return jinja.NewList(items), nil
	case '{':
		if err := d.open(); err != nil {
			return jinja.Undefined(), err
		}
		out := jinja.NewDict()
		dict := out.AsDict()
		d.space()
		if d.i < len(d.b) && d.b[d.i] == '}' {
			d.i++
			d.depth--
			return out, nil
		}
		for more := true; more; {
			k, err := d.key()
			if err != nil {
				return jinja.Undefined(), err
			}
			name := string(k)
			v, err := d.value()
			if err != nil {
				return jinja.Undefined(), err
			}
			dict.Set(name, v)
			if more, err = d.next('}'); err != nil {
				return jinja.Undefined(), err
			}
		}
		return out, nil
	case 't':
		return jinja.NewBool(true), d.literal("true")
	case 'f':
		return jinja.NewBool(false), d.literal("false")
	case 'n':
		return jinja.None(), d.literal("null")
	}
	return d.number()
}

// skip checks the syntax of the value after any space, as encoding/json
// checks a value it skips: numbers are not converted, and strings are not
// unescaped (their escapes are checked).
func (d *jsonDecoder) skip() error {
	d.space()
	if d.i >= len(d.b) {
		return d.syntaxError("a value")
	}
	switch c := d.b[d.i]; c {
	case '"':
		return d.skipString()
	case '[', '{':
		if err := d.open(); err != nil {
			return err
		}
		closing := byte(']')
		if c == '{' {
			closing = '}'
		}
		d.space()
		if d.i < len(d.b) && d.b[d.i] == closing {
			d.i++
			d.depth--
			return nil
		}
		for more := true; more; {
			if c == '{' {
				d.space()
				if d.i >= len(d.b) || d.b[d.i] != '"' {
					return d.syntaxError("an object key")
				}
				if err := d.skipString(); err != nil {
					return err
				}
				d.space()
				if d.i >= len(d.b) || d.b[d.i] != ':' {
					return d.syntaxError("':' after an object key")
				}
				d.i++
			}
			if err := d.skip(); err != nil {
				return err
			}
			var err error
			if more, err = d.next(closing); err != nil {
				return err
			}
		}
		return nil
	case 't':
		return d.literal("true")
	case 'f':
		return d.literal("false")
	case 'n':
		return d.literal("null")
	}
	_, err := d.numberEnd()
	return err
}

func (d *jsonDecoder) literal(lit string) error {
	if len(d.b)-d.i < len(lit) || string(d.b[d.i:d.i+len(lit)]) != lit {
		for j := 0; j < len(lit) && d.i < len(d.b) && d.b[d.i] == lit[j]; j++ {
			d.i++
		}
		return d.syntaxError("the literal " + lit)
	}
	d.i += len(lit)
	return nil
}

// numberEnd checks the JSON number at d.i and moves past it, reporting
// whether it is an integer (no fraction or exponent).
func (d *jsonDecoder) numberEnd() (integer bool, err error) {
	b, i := d.b, d.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() bool {
		start := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i > start
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		digits()
	default:
		d.i = i
		return false, d.syntaxError("a value")
	}
	integer = true
	if i < len(b) && b[i] == '.' {
		integer = false
		i++
		if !digits() {
			d.i = i
			return false, d.syntaxError("a digit after the decimal point")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		integer = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			d.i = i
			return false, d.syntaxError("a digit in the exponent")
		}
	}
	d.i = i
	return integer, nil
}

// number reads a number as encoding/json's Number converts it: an integer
// that fits int64 is an int, anything else a float64, and a float out of
// range is an error.
func (d *jsonDecoder) number() (jinja.Value, error) {
	start := d.i
	integer, err := d.numberEnd()
	if err != nil {
		return jinja.Undefined(), err
	}
	num := d.b[start:d.i]
	if integer {
		digits := num
		if digits[0] == '-' {
			digits = digits[1:]
		}
		if len(digits) <= 18 { // below 10^18: fits int64
			var n int64
			for _, c := range digits {
				n = n*10 + int64(c-'0')
			}
			if num[0] == '-' {
				n = -n
			}
			return jinja.NewInt(n), nil
		}
		if n, err := strconv.ParseInt(string(num), 10, 64); err == nil {
			return jinja.NewInt(n), nil
		}
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewFloat(f), nil
}

// str reads the string at d.i (its opening quote) and returns its text,
// unescaped as encoding/json unescapes it: invalid UTF-8 bytes and unpaired
// surrogate escapes become U+FFFD. The text is a slice of the input when
// it needs no unescaping, else of d.buf; it is valid until the next call.
func (d *jsonDecoder) str() ([]byte, error) {
	start := d.i + 1
	end, ascii := jsonscan.PlainRun(d.b, start)
	valid := ascii || utf8.Valid(d.b[start:end])
	if end < len(d.b) && d.b[end] == '"' && valid {
		d.i = end + 1
		return d.b[start:end], nil
	}
	return d.unquote(appendRun(d.buf[:0], d.b[start:end], valid), end)
}

// appendRun appends a run of plain bytes, with each byte of an invalid
// UTF-8 sequence as U+FFFD unless valid says there is none. (A run ends at
// an ASCII byte, which no sequence spans, so this is what encoding/json
// does decoding the string's runes one by one.)
func appendRun(out, run []byte, valid bool) []byte {
	if valid {
		return append(out, run...)
	}
	for i := 0; i < len(run); {
		r, size := utf8.DecodeRune(run[i:])
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, run[i:i+size]...)
		}
		i += size
	}
	return out
}

// unquote is str's general case: out holds the string's text up to b[i],
// which is not a plain byte.
func (d *jsonDecoder) unquote(out []byte, i int) ([]byte, error) {
	b := d.b
	for {
		if i >= len(b) {
			d.i = i
			return nil, d.syntaxError("the end of a string")
		}
		switch c := b[i]; c {
		case '"':
			d.i = i + 1
			d.buf = out
			return out, nil
		case '\\':
			if i+1 >= len(b) {
				d.i = i + 1
				return nil, d.syntaxError("an escape")
			}
			switch e := b[i+1]; e {
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
				r := hexRune(b, i)
				if r < 0 {
					d.i = i
					return nil, fmt.Errorf("invalid \\u escape at byte %d", i)
				}
				i += 4 // and 2 below: past \uXXXX
				if utf16.IsSurrogate(r) {
					// A pair when a low half follows, else U+FFFD (and
					// the next escape is read on its own).
					if dec := utf16.DecodeRune(r, hexRune(b, i+2)); dec != unicode.ReplacementChar {
						r = dec
						i += 6
					} else {
						r = unicode.ReplacementChar
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				d.i = i + 1
				return nil, d.syntaxError("an escape")
			}
			i += 2
		default: // a control character
			d.i = i
			return nil, d.syntaxError("the end of a string")
		}
		end, ascii := jsonscan.PlainRun(b, i)
		out = appendRun(out, b[i:end], ascii || utf8.Valid(b[i:end]))
		i = end
	}
}

// skipString checks the string at d.i and moves past it.
func (d *jsonDecoder) skipString() error {
	b := d.b
	i := d.i + 1
	for {
		i, _ = jsonscan.PlainRun(b, i)
		if i >= len(b) {
			d.i = i
			return d.syntaxError("the end of a string")
		}
		switch b[i] {
		case '"':
			d.i = i + 1
			return nil
		case '\\':
			if i+1 >= len(b) {
				d.i = i + 1
				return d.syntaxError("an escape")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if hexRune(b, i) < 0 {
					d.i = i
					return fmt.Errorf("invalid \\u escape at byte %d", i)
				}
				i += 6
			default:
				d.i = i + 1
				return d.syntaxError("an escape")
			}
		default: // a control character
			d.i = i
			return d.syntaxError("the end of a string")
		}
	}
}

// hexRune reads the escape \uXXXX at b[i:], or returns -1.
func hexRune(b []byte, i int) rune {
	if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range b[i+2 : i+6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}
