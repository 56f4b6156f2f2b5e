// Package jsonscan finds the end of a run of plain bytes inside a JSON
// string, eight bytes at a time: the loop every reader of a request body
// spends its time in, since prompts are long strings.
package jsonscan

import (
	"encoding/binary"
	"math/bits"
)

// plain marks the bytes a JSON string holds as they are: not the quote,
// the backslash or a control character.
var plain = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

// PlainRun returns the end of the run of plain bytes at b[i:], and whether
// the run is ASCII.
func PlainRun(b []byte, i int) (end int, ascii bool) {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	var acc uint64
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q, bs := x^(ones*'"'), x^(ones*'\\')
		// (v-ones)&^v&highs flags the bytes of v that are 0, and
		// (x-ones*0x20)&^x&highs those of x below 0x20: exactly up to the
		// first (a borrow can flag bytes after it), which is the end.
		if m := ((x-ones*0x20)&^x | (q-ones)&^q | (bs-ones)&^bs) & highs; m != 0 {
			n := bits.TrailingZeros64(m) / 8
			acc |= x & (1<<(8*n) - 1)
			return i + n, acc&highs == 0
		}
		acc |= x
	}
	var high byte
	for i < len(b) && plain[b[i]] {
		high |= b[i]
		i++
	}
	return i, acc&highs == 0 && high < 0x80
}
