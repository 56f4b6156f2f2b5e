package jsonscan

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestPlainRun holds PlainRun, which reads eight bytes at a time, to a
// byte loop, with every kind of byte at every offset of a word.
func TestPlainRun(t *testing.T) {
	naive := func(b []byte, i int) (int, bool) {
		var high byte
		for i < len(b) && plain[b[i]] {
			high |= b[i]
			i++
		}
		return i, high < 0x80
	}
	special := []byte{'"', '\\', 0, 0x1f, 0x20, 0x21, 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff}
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
					for i := 0; i <= n; i++ {
						end, ascii := PlainRun(b, i)
						wantEnd, wantASCII := naive(b, i)
						if end != wantEnd || ascii != wantASCII {
							t.Fatalf("PlainRun(%q, %d) = %d, %v; want %d, %v", b, i, end, ascii, wantEnd, wantASCII)
						}
					}
				}
			}
		}
	}
}

// FuzzPlainRun compares PlainRun with the byte loop on any input.
func FuzzPlainRun(f *testing.F) {
	f.Add([]byte(`hello "world" \n`), 0)
	f.Add([]byte("\xc3\xa9t\xc3\xa9 \x01"), 2)
	f.Fuzz(func(t *testing.T, b []byte, i int) {
		if i < 0 || i > len(b) {
			return
		}
		end, ascii := PlainRun(b, i)
		j, high := i, byte(0)
		for j < len(b) && plain[b[j]] {
			high |= b[j]
			j++
		}
		if end != j || ascii != (high < 0x80) {
			t.Fatalf("PlainRun(%q, %d) = %d, %v; want %d, %v", b, i, end, ascii, j, high < 0x80)
		}
	})
}

func BenchmarkPlainRun(b *testing.B) {
	s := bytes.Repeat([]byte("The quick brown fox jumps over the lazy dog. "), 10000)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if end, _ := PlainRun(s, 0); end != len(s) {
			b.Fatal(end)
		}
	}
}
