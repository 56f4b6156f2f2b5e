package jsonscan

import (
	"bytes"
	"testing"

	"github.com/tollgate/tollgate/test/jsonwords"
)

// TestPlainRun holds PlainRun, which reads eight bytes at a time, to a
// byte loop, with every kind of byte at every offset of a word.
func TestPlainRun(t *testing.T) {
	for b := range jsonwords.All() {
		for i := 0; i <= len(b); i++ {
			end, ascii := PlainRun(b, i)
			wantEnd, wantASCII := plainRunLoop(b, i)
			if end != wantEnd || ascii != wantASCII {
				t.Fatalf("PlainRun(%q, %d) = %d, %v; want %d, %v", b, i, end, ascii, wantEnd, wantASCII)
			}
		}
	}
}

// plainRunLoop is PlainRun one byte at a time, its oracle.
func plainRunLoop(b []byte, i int) (int, bool) {
	var high byte
	for i < len(b) && plain[b[i]] {
		high |= b[i]
		i++
	}
	return i, high < 0x80
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
		if wantEnd, wantASCII := plainRunLoop(b, i); end != wantEnd || ascii != wantASCII {
			t.Fatalf("PlainRun(%q, %d) = %d, %v; want %d, %v", b, i, end, ascii, wantEnd, wantASCII)
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
