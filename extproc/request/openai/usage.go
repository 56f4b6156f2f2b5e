package openai

import (
	"bytes"
	"strconv"
)

// MaxUsageBytes bounds the usage object a UsageScanner buffers; a larger
// one is dropped.
const MaxUsageBytes = 64 << 10

// Usage is the token usage a worker reports for one response.
type Usage struct {
	// PromptTokens is usage.prompt_tokens (input_tokens for Responses,
	// meta_info.prompt_tokens for SGLang's /generate).
	PromptTokens int
	// CachedTokens is usage.prompt_tokens_details.cached_tokens
	// (input_tokens_details for Responses, meta_info.cached_tokens).
	CachedTokens int
	// CompletionTokens is usage.completion_tokens (output_tokens,
	// meta_info.completion_tokens).
	CompletionTokens int
	// Found reports whether any usage was seen.
	Found bool
}

// UsageScanner extracts the usage from a response body fed to it in chunks
// of any size. It understands a server-sent event stream (data: lines, each
// one JSON chunk, ending with data: [DONE]) and a plain JSON body, and finds
// the usage at the top level of a chunk ("usage"), inside a Responses event
// ("response"."usage") or in SGLang's "meta_info". When several chunks carry
// usage (include_usage, continuous usage stats), the last wins.
//
// It never buffers the body: it runs a small JSON state machine over the
// bytes and keeps only the usage object being read, at most MaxUsageBytes.
// A JSON chunk split over several data: lines of one event is not
// reassembled (no OpenAI-compatible server sends one).
//
// The zero value is ready to use. A UsageScanner is not safe for concurrent
// use.
type UsageScanner struct {
	usage Usage

	mode byte // 0 undecided, modeJSON, modeSSE

	// SSE line state.
	lineStart bool
	prefix    int  // bytes of "data:" matched at the start of the line
	inData    bool // the rest of this line is a data payload
	skipLine  bool // the rest of this line is ignored
	sawSpace  bool // the one optional space after "data:" was handled

	// JSON state.
	depth      int
	inString   bool
	escape     bool
	afterColon bool
	expectKey  bool
	objects    uint64 // bit d-1 set when the container at depth d is an object (d <= 64)
	readingKey bool
	keyLen     int
	keyBuf     [16]byte
	keys       [3]usageKey // the last key read at depths 1 and 2

	capturing    bool
	captureDepth int
	captureKind  usageKey
	buf          []byte
}

const (
	modeJSON = 'j'
	modeSSE  = 's'
)

// usageKey names the keys on the path to a usage object.
type usageKey uint8

const (
	keyOther usageKey = iota
	keyUsage
	keyResponse
	keyMetaInfo
)

// Usage returns the usage found so far.
func (s *UsageScanner) Usage() Usage { return s.usage }

// Reset makes s ready for another response, keeping its buffer.
func (s *UsageScanner) Reset() {
	buf := s.buf[:0]
	*s = UsageScanner{buf: buf}
}

// Feed scans the next chunk of the response body.
func (s *UsageScanner) Feed(chunk []byte) {
	for i := 0; i < len(chunk); i++ {
		// Fast paths: skip an ignored SSE line, or the inside of a JSON
		// string that is neither a key nor part of the usage object.
		switch {
		case s.mode == modeSSE && s.skipLine:
			j := indexNewline(chunk[i:])
			if j < 0 {
				return
			}
			i += j
		case s.inString && !s.escape && !s.readingKey && !s.capturing:
			j := indexStringEnd(chunk[i:], s.mode == modeSSE)
			if j < 0 {
				return
			}
			i += j
		}
		c := chunk[i]
		if s.mode == 0 {
			if isSpace(c) || c == 0xEF || c == 0xBB || c == 0xBF { // whitespace or a UTF-8 BOM
				continue
			}
			if c == '{' || c == '[' {
				s.mode = modeJSON
			} else {
				s.mode = modeSSE
				s.lineStart = true
			}
		}
		if s.mode == modeJSON {
			s.json(c)
			continue
		}
		s.sse(c)
	}
}

// indexNewline returns the index of the first \r or \n in b, or -1.
func indexNewline(b []byte) int {
	for i, c := range b {
		if c == '\n' || c == '\r' {
			return i
		}
	}
	return -1
}

// indexStringEnd returns the index of the first byte in b that can end or
// escape a JSON string (or, in an event stream, end the line), or -1.
func indexStringEnd(b []byte, lines bool) int {
	for i, c := range b {
		if c == '"' || c == '\\' || (lines && (c == '\n' || c == '\r')) {
			return i
		}
	}
	return -1
}

// sse handles one byte of an event stream.
func (s *UsageScanner) sse(c byte) {
	if c == '\n' || c == '\r' {
		s.lineStart, s.prefix, s.inData, s.skipLine, s.sawSpace = true, 0, false, false, false
		s.resetJSON()
		return
	}
	switch {
	case s.skipLine:
		return
	case s.inData:
		if !s.sawSpace {
			s.sawSpace = true
			if c == ' ' {
				return
			}
		}
		s.json(c)
		return
	}
	const field = "data:"
	if s.lineStart || s.prefix > 0 {
		s.lineStart = false
		if c == field[s.prefix] {
			s.prefix++
			if s.prefix == len(field) {
				s.inData = true
			}
			return
		}
	}
	s.skipLine = true
}

func (s *UsageScanner) resetJSON() {
	buf := s.buf[:0]
	s.depth, s.inString, s.escape, s.afterColon, s.expectKey = 0, false, false, false, false
	s.objects, s.readingKey, s.keyLen, s.keys = 0, false, 0, [3]usageKey{}
	s.capturing, s.captureDepth, s.captureKind, s.buf = false, 0, keyOther, buf
}

func (s *UsageScanner) isObject(depth int) bool {
	return depth >= 1 && depth <= 64 && s.objects&(1<<(depth-1)) != 0
}

// json handles one byte of a JSON text.
func (s *UsageScanner) json(c byte) {
	if s.capturing {
		if len(s.buf) >= MaxUsageBytes {
			s.capturing = false
			s.buf = s.buf[:0]
		} else {
			s.buf = append(s.buf, c)
		}
	}
	if s.inString {
		switch {
		case s.escape:
			s.escape = false
			s.keyLen = len(s.keyBuf) + 1 // an escaped key is never one we want
		case c == '\\':
			s.escape = true
		case c == '"':
			s.inString = false
			if s.readingKey {
				s.readingKey = false
				s.endKey()
			}
		case s.readingKey:
			if s.keyLen < len(s.keyBuf) {
				s.keyBuf[s.keyLen] = c
			}
			s.keyLen++
		}
		return
	}
	switch c {
	case '"':
		s.inString = true
		if s.expectKey && s.isObject(s.depth) {
			s.readingKey, s.keyLen = true, 0
		}
		s.afterColon = false
	case '{', '[':
		if c == '{' && s.afterColon && !s.capturing && s.wanted() != keyOther {
			s.capturing, s.captureDepth, s.captureKind = true, s.depth, s.wanted()
			s.buf = append(s.buf[:0], c)
		}
		s.depth++
		if s.depth <= 64 {
			if c == '{' {
				s.objects |= 1 << (s.depth - 1)
			} else {
				s.objects &^= 1 << (s.depth - 1)
			}
		}
		if s.depth <= 2 {
			s.keys[s.depth] = keyOther
		}
		s.expectKey = c == '{'
		s.afterColon = false
	case '}', ']':
		if s.depth > 0 {
			s.depth--
		}
		if s.capturing && s.depth == s.captureDepth {
			s.capturing = false
			s.parseUsage(s.captureKind)
			s.buf = s.buf[:0]
		}
		s.expectKey, s.afterColon = false, false
	case ':':
		s.afterColon = true
		s.expectKey = false
	case ',':
		s.expectKey = s.isObject(s.depth)
		s.afterColon = false
	default:
		if !isSpace(c) {
			s.afterColon = false
		}
	}
}

// endKey classifies the key just read at the current depth.
func (s *UsageScanner) endKey() {
	if s.depth < 1 || s.depth > 2 {
		return
	}
	k := keyOther
	if s.keyLen <= len(s.keyBuf) {
		switch string(s.keyBuf[:s.keyLen]) {
		case "usage":
			k = keyUsage
		case "response":
			k = keyResponse
		case "meta_info":
			k = keyMetaInfo
		}
	}
	s.keys[s.depth] = k
}

// wanted returns what the object value about to start at the current depth
// holds, or keyOther.
func (s *UsageScanner) wanted() usageKey {
	switch {
	case s.depth == 1 && s.isObject(1) && (s.keys[1] == keyUsage || s.keys[1] == keyMetaInfo):
		return s.keys[1]
	case s.depth == 2 && s.isObject(1) && s.isObject(2) && s.keys[1] == keyResponse && s.keys[2] == keyUsage:
		return keyUsage
	}
	return keyOther
}

// parseUsage decodes the captured object and records it if it has counts.
func (s *UsageScanner) parseUsage(kind usageKey) {
	f, ok := decodeUsageFields(s.buf)
	if !ok {
		return
	}
	prompt := f.ints[usagePrompt].or(f.ints[usageInput])
	completion := f.ints[usageCompletion].or(f.ints[usageOutput])
	if !prompt.set && !completion.set {
		return
	}
	var cached optInt
	switch {
	case kind == keyMetaInfo:
		cached = f.ints[usageCached]
	case f.details[0].set:
		cached = f.details[0].cached
	case f.details[1].set:
		cached = f.details[1].cached
	}
	s.usage = Usage{PromptTokens: prompt.count(), CompletionTokens: completion.count(), CachedTokens: cached.count(), Found: true}
}

// The integer members of a usage object, and its two details objects
// (prompt_tokens_details, input_tokens_details), which hold cached_tokens.
const (
	usagePrompt = iota
	usageInput
	usageCompletion
	usageOutput
	usageCached // SGLang meta_info
	numUsageInts
)

var (
	usageIntNames     = [numUsageInts]string{"prompt_tokens", "input_tokens", "completion_tokens", "output_tokens", "cached_tokens"}
	usageDetailsNames = [2]string{"prompt_tokens_details", "input_tokens_details"}
)

// usageFields is what decodeUsageFields reads.
type usageFields struct {
	ints    [numUsageInts]optInt
	details [2]struct {
		set    bool // an object, not absent or null
		cached optInt
	}
}

// optInt is a count that may be absent (or null).
type optInt struct {
	v   int
	set bool
}

// or is o, or else p.
func (o optInt) or(p optInt) optInt {
	if o.set {
		return o
	}
	return p
}

// count is the count, 0 when absent or negative.
func (o optInt) count() int { return max(o.v, 0) }

// decodeUsageFields decodes a usage object as encoding/json decodes it
// into a struct of *int fields and two *struct{CachedTokens *int} fields,
// without reflection: the whole text must be one valid JSON object (the
// one pass of topFields, which validates request bodies too), members
// match their field exactly or else ignoring case (the last one wins, null
// clears, a second details object updates the first), and a count must be
// an integer literal that fits an int; any other value of a known member
// fails the object, as it fails json.Unmarshal.
func decodeUsageFields(b []byte) (usageFields, bool) {
	var f usageFields
	ok := true // false once a known member has a value json.Unmarshal refuses
	if err := topFields(b, func(key, val []byte, _ int) *Error {
		if i := matchField(key, usageIntNames[:]); i >= 0 {
			ok = decodeCount(val, &f.ints[i]) && ok
		} else if i := matchField(key, usageDetailsNames[:]); i >= 0 {
			d := &f.details[i]
			switch valueKind(val) {
			case kindNull:
				d.set, d.cached = false, optInt{}
			case kindObject:
				d.set = true
				_ = forFields(val, "", "", func(key, val []byte) *Error {
					if matchField(key, usageIntNames[usageCached:usageCached+1]) == 0 {
						ok = decodeCount(val, &d.cached) && ok
					}
					return nil
				})
			default:
				ok = false
			}
		}
		return nil
	}); err != nil {
		return usageFields{}, false
	}
	return f, ok
}

// matchField returns the index of the name key matches as encoding/json
// matches a struct field (exactly, else bytes.EqualFold), or -1.
func matchField(key []byte, names []string) int {
	fold := -1
	for i, n := range names {
		if string(key) == n {
			return i
		}
		if fold < 0 && bytes.EqualFold(key, []byte(n)) {
			fold = i
		}
	}
	return fold
}

// decodeCount decodes a count into *p: null clears it, an integer literal
// that fits an int sets it; anything else fails.
func decodeCount(val []byte, p *optInt) bool {
	switch valueKind(val) {
	case kindNull:
		*p = optInt{}
		return true
	case kindNumber:
		v, err := strconv.ParseInt(string(trimSpace(val)), 10, 0)
		if err != nil {
			return false
		}
		*p = optInt{int(v), true}
		return true
	}
	return false
}
