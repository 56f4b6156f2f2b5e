package openai

import (
	"fmt"
	"unicode/utf8"

	"github.com/tollgate/tollgate/extproc/request/jsonscan"
)

// MaxNestingDepth bounds how deeply a request body's arrays and objects
// nest, as encoding/json bounds its own.
const MaxNestingDepth = 10000

// syntaxError says where and why a body is not JSON.
type syntaxError struct {
	off    int
	detail string
}

func (e *syntaxError) Error() string { return e.detail }

// unexpected reports the byte at b[i], read while looking for what.
func unexpected(b []byte, i int, what string) *syntaxError {
	if i >= len(b) {
		return &syntaxError{off: i, detail: fmt.Sprintf("unexpected end of input at byte %d, looking for %s", i, what)}
	}
	r, size := utf8.DecodeRune(b[i:])
	var c string
	if r == utf8.RuneError && size <= 1 {
		c = fmt.Sprintf("byte 0x%02x", b[i])
	} else {
		c = fmt.Sprintf("character %q", r)
	}
	return &syntaxError{off: i, detail: fmt.Sprintf("invalid %s at byte %d, looking for %s", c, i, what)}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// nesting records whether each open container is an object.
type nesting struct {
	bits  [MaxNestingDepth/64 + 1]uint64
	depth int
}

func (n *nesting) push(object bool) bool {
	if n.depth == MaxNestingDepth {
		return false
	}
	w, bit := n.depth/64, uint64(1)<<(n.depth%64)
	if object {
		n.bits[w] |= bit
	} else {
		n.bits[w] &^= bit
	}
	n.depth++
	return true
}

func (n *nesting) inObject() bool {
	d := n.depth - 1
	return n.bits[d/64]&(uint64(1)<<(d%64)) != 0
}

// validValue checks the syntax of the JSON value starting at b[i] (after
// any whitespace) as encoding/json does, and returns the offset just past
// it. It reads every byte once, keeps no state on the heap and bounds
// nesting at MaxNestingDepth.
func validValue(b []byte, i int) (int, *syntaxError) {
	var open nesting
	var y yielder
	for {
		// A value starts here.
		y.after(i)
		i = skipSpace(b, i)
		if i >= len(b) {
			return 0, unexpected(b, i, "a value")
		}
		switch c := b[i]; c {
		case '{', '[':
			if !open.push(c == '{') {
				return 0, &syntaxError{off: i, detail: fmt.Sprintf("nesting deeper than %d levels at byte %d", MaxNestingDepth, i)}
			}
			i = skipSpace(b, i+1)
			if i < len(b) && (c == '{' && b[i] == '}' || c == '[' && b[i] == ']') {
				open.depth--
				i++
				break
			}
			if c == '{' {
				var err *syntaxError
				if i, err = validKey(b, i); err != nil {
					return 0, err
				}
			}
			continue
		case '"':
			n, err := validString(b, i)
			if err != nil {
				return 0, err
			}
			i = n
		case 't':
			if i = literal(b, i, "true"); i < 0 {
				return 0, unexpected(b, -i, "the literal true")
			}
		case 'f':
			if i = literal(b, i, "false"); i < 0 {
				return 0, unexpected(b, -i, "the literal false")
			}
		case 'n':
			if i = literal(b, i, "null"); i < 0 {
				return 0, unexpected(b, -i, "the literal null")
			}
		default:
			if c != '-' && (c < '0' || c > '9') {
				return 0, unexpected(b, i, "a value")
			}
			n, err := validNumber(b, i)
			if err != nil {
				return 0, err
			}
			i = n
		}
		// A value ended: close containers until one continues.
		for {
			if open.depth == 0 {
				return i, nil
			}
			i = skipSpace(b, i)
			object := open.inObject()
			if i < len(b) && b[i] == ',' {
				i++
				if object {
					var err *syntaxError
					if i, err = validKey(b, skipSpace(b, i)); err != nil {
						return 0, err
					}
				}
				break
			}
			if i < len(b) && (object && b[i] == '}' || !object && b[i] == ']') {
				open.depth--
				i++
				continue
			}
			if object {
				return 0, unexpected(b, i, "',' or '}' after an object member")
			}
			return 0, unexpected(b, i, "',' or ']' after an array element")
		}
	}
}

// validKey checks an object key and its colon at b[i], returning the offset
// after the colon.
func validKey(b []byte, i int) (int, *syntaxError) {
	if i >= len(b) || b[i] != '"' {
		return 0, unexpected(b, i, "an object key string")
	}
	i, err := validString(b, i)
	if err != nil {
		return 0, err
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return 0, unexpected(b, i, "':' after an object key")
	}
	return i + 1, nil
}

// validString checks the string literal at b[i] (its opening quote) and
// returns the offset after its closing quote.
func validString(b []byte, i int) (int, *syntaxError) {
	for j := i + 1; j < len(b); j++ {
		if j, _ = jsonscan.PlainRun(b, j); j >= len(b) {
			break
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1, nil
		case c == '\\':
			j++
			if j >= len(b) {
				return 0, unexpected(b, j, "an escape code in a string")
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for k := 1; k <= 4; k++ {
					if j+k >= len(b) || !isHex(b[j+k]) {
						return 0, unexpected(b, j+k, "a hexadecimal digit of a \\u escape")
					}
				}
				j += 4
			default:
				return 0, unexpected(b, j, "an escape code in a string")
			}
		case c < 0x20:
			return 0, unexpected(b, j, "the rest of a string (control characters must be escaped)")
		}
	}
	return 0, unexpected(b, len(b), "the end of a string")
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// validNumber checks the number at b[i] against JSON's grammar and returns
// the offset after it.
func validNumber(b []byte, i int) (int, *syntaxError) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return 0, unexpected(b, i, "a digit in a number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return 0, unexpected(b, i, "a digit after a decimal point")
		}
		i = digits(b, i)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return 0, unexpected(b, i, "a digit in an exponent")
		}
		i = digits(b, i)
	}
	return i, nil
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// literal matches word at b[i]; it returns the offset after it, or minus
// the offset of the first byte that differs.
func literal(b []byte, i int, word string) int {
	for k := 0; k < len(word); k++ {
		if i+k >= len(b) || b[i+k] != word[k] {
			return -(i + k)
		}
	}
	return i + len(word)
}

// topFields checks that body is one JSON object, and nothing else but
// whitespace, and calls fn with the unquoted key and raw value of each of
// its members in order. It is the one pass that validates a request body:
// the values fn receives are well-formed JSON, which the readers in
// jsonval.go rely on. A body that is valid JSON of another type is "must be
// a JSON object"; anything else names the first byte that is wrong.
func topFields(body []byte, fn func(key, val []byte, off int) *Error) *Error {
	i := skipSpace(body, 0)
	if i == len(body) {
		return badRequest(CodeInvalidJSON, "", "the request body is empty; it must be a JSON object")
	}
	if body[i] != '{' {
		end, err := validValue(body, i)
		if err == nil && skipSpace(body, end) == len(body) {
			return badRequest(CodeInvalidJSON, "", "the request body must be a JSON object")
		}
		if err == nil {
			err = unexpected(body, skipSpace(body, end), "the end of the body")
		}
		return notJSON(err)
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return trailing(body, i+1)
	}
	for {
		if i >= len(body) || body[i] != '"' {
			return notJSON(unexpected(body, i, "an object key string"))
		}
		keyEnd, err := validString(body, i)
		if err != nil {
			return notJSON(err)
		}
		key, ok := unquote(body[i+1 : keyEnd-1])
		if !ok { // unreachable: validString checked the escapes
			return notJSON(unexpected(body, i, "an object key string"))
		}
		if i = skipSpace(body, keyEnd); i >= len(body) || body[i] != ':' {
			return notJSON(unexpected(body, i, "':' after an object key"))
		}
		start := skipSpace(body, i+1)
		end, err := validValue(body, start)
		if err != nil {
			return notJSON(err)
		}
		if e := fn(key, body[start:end], start); e != nil {
			return e
		}
		i = skipSpace(body, end)
		switch {
		case i < len(body) && body[i] == ',':
			i = skipSpace(body, i+1)
		case i < len(body) && body[i] == '}':
			return trailing(body, i+1)
		default:
			return notJSON(unexpected(body, i, "',' or '}' after an object member"))
		}
	}
}

// trailing checks that only whitespace follows the body's object.
func trailing(body []byte, i int) *Error {
	if i = skipSpace(body, i); i < len(body) {
		return notJSON(unexpected(body, i, "the end of the body"))
	}
	return nil
}

func notJSON(err *syntaxError) *Error {
	return badRequest(CodeInvalidJSON, "", "the request body is not valid JSON: %s", err.detail)
}

// ModelField is the top-level "model" member of a request body.
type ModelField struct {
	// Name is the model; "" when the member is absent or null.
	Name string
	// Start and End delimit the member's raw value in the body (the
	// quotes included); both are 0 when it is absent.
	Start, End int
}

// FindModel reads the model of a request body in the same single pass that
// Parse makes: the body must be a JSON object, and its "model" member,
// matched exactly (the last one when repeated), a string or null. It is
// for requests outside admission, which are routed by model, and for
// model rewrites, which replace the value in place. Every error is an
// *Error with status 400.
func FindModel(body []byte) (ModelField, error) {
	var m ModelField
	err := topFields(body, func(key, val []byte, off int) *Error {
		if string(key) == "model" {
			m.Start, m.End = off, off+len(val)
		}
		return nil
	})
	if err != nil {
		return ModelField{}, err
	}
	if m.End == 0 {
		return m, nil
	}
	name, err := optString(body[m.Start:m.End], "model")
	if err != nil {
		return ModelField{}, err
	}
	m.Name = name
	return m, nil
}
