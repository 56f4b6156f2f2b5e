package tokenize

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/test/tokref"
)

// encodeWindowed encodes text with segments pre-tokenized window bytes at
// a time (window 0: whole), their pieces encoded by a helper (pipeline) or
// not.
func encodeWindowed(t testing.TB, tok *BPE, text string, window int, pipelined bool) []uint32 {
	t.Helper()
	defer setWindow(window)()
	ids, _, err := tok.encode(helperContext(pipelined), text, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// setWindow sets segmentWindow (0: no windows) and returns what restores
// it.
func setWindow(window int) func() {
	old := segmentWindow
	segmentWindow = window
	if window == 0 {
		segmentWindow = 1 << 62
	}
	return func() { segmentWindow = old }
}

// helperContext is a context that grants encode's pipeline a helper
// whenever it asks (pipelined) or never.
func helperContext(pipelined bool) context.Context {
	if !pipelined {
		return context.Background()
	}
	return WithHelpers(context.Background(), func() (func(), bool) { return func() {}, true })
}

// checkWindows holds the ids of text encoded with small windows, where
// nearly every piece boundary is a window's edge, to the ids of the whole
// segments at once.
func checkWindows(t *testing.T, name string, tok *BPE, text string) {
	t.Helper()
	want := encodeWindowed(t, tok, text, 0, false)
	for _, window := range []int{1, 5, 13, 64, 500} {
		for _, pipelined := range []bool{false, true} {
			if got := encodeWindowed(t, tok, text, window, pipelined); !slices.Equal(got, want) {
				i := 0
				for i < min(len(got), len(want)) && got[i] == want[i] {
					i++
				}
				t.Fatalf("%s, window %d, pipelined %v: ids differ from the whole segment's at %d of %d/%d\ntext %.300q", name, window, pipelined, i, len(got), len(want), text)
			}
		}
	}
}

// TestSegmentWindows pre-tokenizes long segments a window at a time with
// each tokenizer whose pre-tokenizer allows it (and the others, which
// ignore the window), on texts with the runs where the split patterns
// read furthest past their matches.
func TestSegmentWindows(t *testing.T) {
	rounds := 40
	if testing.Short() || raceEnabled {
		rounds = 10
	}
	for _, rc := range reuseCases(t, 1<<20, 61, 0) {
		t.Run(rc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(11, 11))
			for range rounds {
				checkWindows(t, rc.name, rc.fresh, randomText(r, 20+r.IntN(400)))
				checkWindows(t, rc.name, rc.fresh, spacyText(r, 20+r.IntN(400)))
				checkWindows(t, rc.name, rc.fresh, chatText(r, 200+r.IntN(3000), rc.extra))
			}
			// One long run: no window has a piece boundary to cut at.
			checkWindows(t, rc.name, rc.fresh, strings.Repeat("a", 3000)+" b"+strings.Repeat(" ", 2000)+"\n")
		})
	}
}

// TestSegmentWindowsRealModels is TestSegmentWindows on the real model
// tokenizers of test/tokref.
func TestSegmentWindowsRealModels(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("slow")
	}
	for _, m := range []string{"llama3_1", "qwen3", "gptoss", "deepseek_v3"} {
		t.Run(m, func(t *testing.T) {
			tok, err := LoadHFDir(tokref.Model(t, "tokenizer-"+m, ""))
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(12, 12))
			extra := addedFragments(tok.BPE)[:16]
			for range 10 {
				checkWindows(t, m, tok.BPE, chatText(r, 500+r.IntN(5000), extra))
				checkWindows(t, m, tok.BPE, spacyText(r, 300))
			}
		})
	}
}

// FuzzSegmentWindows holds windowed pre-tokenizing to the whole segment's
// on any text, with windows down to one byte.
func FuzzSegmentWindows(f *testing.F) {
	toks := []*BPE{mustNew(f, "tiktoken:cl100k_base").(*BPE), mustNew(f, "tiktoken:o200k_base").(*BPE), mustNew(f, "hf:testdata/gpt2-style.json").(*BPE)}
	f.Add("hello   world\n\n  it's 12345 \u3000\u0085\n", uint8(3))
	f.Add(strings.Repeat("ab ", 50), uint8(1))
	f.Fuzz(func(t *testing.T, text string, window uint8) {
		if len(text) > 4<<10 {
			return
		}
		for _, tok := range toks {
			want := encodeWindowed(t, tok, text, 0, false)
			for _, pipelined := range []bool{false, true} {
				if got := encodeWindowed(t, tok, text, 1+int(window), pipelined); !slices.Equal(got, want) {
					t.Fatalf("window %d, pipelined %v: %v, want %v", 1+int(window), pipelined, got, want)
				}
			}
		}
	})
}

// TestSegmentWindowsWithReuse encodes conversations that grow turn by
// turn through a prefix cache while segments are pre-tokenized in small
// windows, the two working together as in serve, and holds the ids to a
// fresh encode's.
func TestSegmentWindowsWithReuse(t *testing.T) {
	for _, window := range []int{7, 100} {
		restore := setWindow(window)
		defer restore()
		ctx := helperContext(window == 7)
		for _, rc := range reuseCases(t, 1<<20, 61, 0) {
			r := rand.New(rand.NewPCG(13, uint64(window)))
			for range 10 {
				a := chatText(r, 200+r.IntN(2000), rc.extra)
				rc.checkContext(t, ctx, a, false)
				d := r.IntN(len(a) + 1)
				for _, b := range []string{a, a + chatText(r, 300, rc.extra), a[:d] + spacyText(r, 30)} {
					rc.checkContext(t, ctx, b, false)
				}
			}
			if s := rc.cached.reuse.Load().cache.Stats(); s.Hits == 0 {
				t.Errorf("%s, window %d: no hits: %+v", rc.name, window, s)
			}
		}
	}
}
