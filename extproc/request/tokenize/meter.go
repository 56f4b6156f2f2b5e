package tokenize

import (
	"strings"
	"unicode"
)

// meterTemplate rewrites a chat template's source so that rendering it
// reports its work to the meter's functions (meter.callables), which stop
// the render once its budget is spent or its context is done. The Jinja
// engine has no hook of its own: no context, step limit or output limit.
//
// Only the insides of tags change, so whitespace control and line numbers
// stay as they were; each metering function returns its argument, so the
// output does not change either (NewChatTemplate checks both against the
// plain template). The rewrites:
//
//	{{ e }}                      -> {{ __tollgate_print(e) }}
//	{% set t = e %}              -> {% set t = __tollgate_set(e) %}
//	{% for x in e [if c] ... %}  -> {% for x in __tollgate_loop(e) [if c] ... %}
//
// Every loop iteration and every value a template stores or prints is
// counted. What one expression computes and drops inside a tag (a filter
// scanning a list for an if) is not, beyond the values it reads; none of
// the shipped templates does that inside a loop over the conversation.
//
// The scan follows the engine's: tags open with {{, {% or {#, an optional
// - follows the opener and precedes the closer, quotes inside a tag hide
// closers, and raw blocks are left alone. The set and for statements are
// split where the engine splits them (first "=", the "in", "if" and
// "recursive" keywords outside brackets and quotes).
func meterTemplate(src string) string {
	var b strings.Builder
	b.Grow(len(src) + len(src)/4)
	raw := false
	last := 0
	for i := 0; i+1 < len(src); {
		if src[i] != '{' {
			i++
			continue
		}
		var closer string
		switch src[i+1] {
		case '{':
			closer = "}}"
		case '%':
			closer = "%}"
		case '#':
			closer = "#}"
		default:
			i++
			continue
		}
		start := i + 2
		if start < len(src) && src[start] == '-' {
			start++
		}
		end, next := tagEnd(src, start, closer)
		if end < 0 {
			break // unclosed: the engine reports it
		}
		content := src[start:end]
		var repl string
		switch {
		case closer == "#}":
		case closer == "%}" && raw:
			raw = stmtKeyword(content) != "endraw"
		case closer == "%}":
			raw = stmtKeyword(content) == "raw"
			repl = meterStatement(content)
		case !raw:
			repl = wrapExpr(meterPrint, content)
		}
		if repl != "" {
			b.WriteString(src[last:start])
			b.WriteString(repl)
			last = end
		}
		i = next
	}
	b.WriteString(src[last:])
	return b.String()
}

// tagEnd finds the end of a tag's content from start: the index of its
// trim dash or closer, and the index after the closer; -1 when unclosed.
// Quotes hide closers except in comments.
func tagEnd(src string, start int, closer string) (end, next int) {
	for i := start; i < len(src); i++ {
		ch := src[i]
		if closer != "#}" && (ch == '\'' || ch == '"') {
			for i++; i < len(src) && src[i] != ch; i++ {
				if src[i] == '\\' {
					i++
				}
			}
			continue
		}
		if ch == '-' && strings.HasPrefix(src[i+1:], closer) {
			return i, i + 3
		}
		if strings.HasPrefix(src[i:], closer) {
			return i, i + 2
		}
	}
	return -1, len(src)
}

// meterStatement rewrites a set or for statement's content; "" leaves it.
func meterStatement(content string) string {
	text := strings.TrimSpace(content)
	switch stmtKeyword(text) {
	case "set":
		target, value, ok := strings.Cut(strings.TrimPrefix(text, "set"), "=")
		if !ok {
			return "" // a block set: its body's prints are metered
		}
		if v := wrapExpr(meterSet, value); v != "" {
			return " set" + target + "=" + v
		}
	case "for":
		head := strings.TrimPrefix(text, "for")
		in := findKeyword(head, "in")
		if in < 0 {
			return ""
		}
		iter := head[in+2:]
		cut := len(iter)
		if r := findKeyword(iter, "recursive"); r >= 0 {
			cut = r
		}
		if f := findKeyword(iter[:cut], "if"); f >= 0 {
			cut = f
		}
		if v := wrapExpr(meterLoop, iter[:cut]); v != "" {
			return " for" + head[:in] + "in" + v + iter[cut:] + " "
		}
	}
	return ""
}

// wrapExpr wraps an expression in a call of fn; "" for an empty
// expression, a bare tuple (a call would read it as two arguments) or a
// string literal (its cost is the template's, fixed).
func wrapExpr(fn, e string) string {
	if strings.TrimSpace(e) == "" || isStringLiteral(e) || findTopLevel(e, ',') >= 0 {
		return ""
	}
	return " " + fn + "(" + e + ") "
}

// isStringLiteral reports whether e is one quoted string.
func isStringLiteral(e string) bool {
	e = strings.TrimSpace(e)
	return len(e) >= 2 && (e[0] == '\'' || e[0] == '"') && scanTopLevel(e, func(i int) bool { return i > 0 }) < 0
}

// stmtKeyword is a statement's first word, as the engine reads it.
func stmtKeyword(text string) string {
	text = strings.TrimSpace(text)
	for i, r := range text {
		if r != '_' && !unicode.IsLetter(r) {
			return text[:i]
		}
	}
	return text
}

// findKeyword finds kw as a whole word outside brackets and quotes, as the
// engine does; -1 when absent.
func findKeyword(s, kw string) int {
	return scanTopLevel(s, func(i int) bool {
		return strings.HasPrefix(s[i:], kw) &&
			(i == 0 || !isIdentByte(s[i-1])) &&
			(i+len(kw) == len(s) || !isIdentByte(s[i+len(kw)]))
	})
}

// findTopLevel finds the byte c outside brackets and quotes; -1 when
// absent.
func findTopLevel(s string, c byte) int {
	return scanTopLevel(s, func(i int) bool { return s[i] == c })
}

// scanTopLevel returns the first index outside brackets and quotes where
// match holds, or -1.
func scanTopLevel(s string, match func(i int) bool) int {
	depth := 0
	var quote byte
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case quote != 0 && ch == '\\':
			i++ // an escaped character
		case quote != 0:
			if ch == quote {
				quote = 0
			}
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == '(' || ch == '[' || ch == '{':
			depth++
		case ch == ')' || ch == ']' || ch == '}':
			depth--
		case depth == 0 && match(i):
			return i
		}
	}
	return -1
}

func isIdentByte(b byte) bool {
	return b == '_' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}
