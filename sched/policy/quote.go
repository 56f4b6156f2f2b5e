package policy

import (
	"fmt"
	"strings"
	"unicode"
)

// debugQuote quotes s the way the upstream messages print names (Rust's
// Debug formatting of a string): in double quotes, with backslash, double
// quote, NUL, tab, CR and LF escaped, other non-printable characters as
// \u{hex}, and printable text, including non-ASCII, kept as is.
func debugQuote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case 0:
			b.WriteString(`\0`)
		case '\t':
			b.WriteString(`\t`)
		case '\r':
			b.WriteString(`\r`)
		case '\n':
			b.WriteString(`\n`)
		default:
			if unicode.IsPrint(r) {
				b.WriteRune(r)
			} else {
				fmt.Fprintf(&b, `\u{%x}`, r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
