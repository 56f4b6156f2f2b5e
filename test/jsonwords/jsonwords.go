// Package jsonwords yields the byte strings that test a reader of JSON
// strings which reads eight bytes at a time (jsonscan.PlainRun and the
// decoders built on it): every length up to 39, with each byte that ends
// or escapes a string, a control byte, the edges of ASCII and UTF-8 lead
// and continuation bytes at every offset, in an ASCII fill and a UTF-8 one,
// and now and then a second such byte. It is for tests.
package jsonwords

import (
	"bytes"
	"iter"
	"math/rand/v2"
)

// special are the bytes a JSON string reader must tell apart.
var special = []byte{'"', '\\', 0, 0x1f, 0x20, 0x21, 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff}

// All yields the strings, the same ones in the same order each time. A
// yielded slice is the caller's.
func All() iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		r := rand.New(rand.NewPCG(5, 5))
		for n := range 40 {
			for p := range n {
				for _, c := range special {
					for _, fill := range []byte{'a', 0xc3} {
						b := bytes.Repeat([]byte{fill}, n)
						b[p] = c
						if r.IntN(2) == 0 && n > 1 {
							b[r.IntN(n)] = special[r.IntN(len(special))]
						}
						if !yield(b) {
							return
						}
					}
				}
			}
		}
	}
}
