package kvevents

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/prefix"
)

func TestIndexLookupMergesSources(t *testing.T) {
	ix := NewIndex(4, 0, time.Second)
	ids := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	h := prefix.HashTokens("m", ids, 4, nil)
	t0 := time.Unix(1000, 0)
	g := int64(-1)
	// w1 stores block 0 by events; w2 has no stream (approximate).
	ix.Apply(t0, Stream{Worker: "w1", Model: "m"}, &Batch{Events: []Event{
		{Kind: KindStored, Hashes: []uint64{100}, Tokens: ids[:4], BlockSize: 4},
	}}, &g)
	approx := []sched.CachedTokens{{Worker: "w1", Tokens: 12}, {Worker: "w2", Tokens: 8}}
	got, src := ix.Lookup(t0, h, 4, approx, nil)
	want := []sched.CachedTokens{{Worker: "w1", Tokens: 4}, {Worker: "w2", Tokens: 8}}
	if !slices.Equal(got, want) || src != (Sources{Events: 1, Approximate: 1, BestEvents: 4, BestApproximate: 8}) {
		t.Fatalf("Lookup = %v %+v, want %v and one of each", got, src, want)
	}
	// A routed prompt counts on a synced worker until its TTL passes.
	ix.Record(t0, "w1", h)
	if got, _ := ix.Lookup(t0.Add(time.Millisecond), h, 4, nil, nil); !slices.Equal(got, []sched.CachedTokens{{Worker: "w1", Tokens: 12}}) {
		t.Fatalf("with a speculative entry: %v", got)
	}
	// A removal on w1 makes its speculative entries untrusted.
	ix.Apply(t0.Add(2*time.Millisecond), Stream{Worker: "w1", Model: "m"}, &Batch{Events: []Event{
		{Kind: KindRemoved, Hashes: []uint64{100}},
	}}, &g)
	if got, _ := ix.Lookup(t0.Add(3*time.Millisecond), h, 4, nil, nil); len(got) != 0 {
		t.Fatalf("after a removal: %v", got)
	}
	// An unsynced worker falls back to the approximate figure.
	ix.SetSynced("w1", 0, false)
	if got, _ := ix.Lookup(t0, h, 4, approx, nil); !slices.Equal(got, approx) {
		t.Fatalf("unsynced: %v, want %v", got, approx)
	}
}

func TestIndexChangedIsClosedByEveryChange(t *testing.T) {
	ix := NewIndex(4, 0, time.Second)
	g := int64(-1)
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	for _, c := range []struct {
		name   string
		change func()
	}{
		{"apply", func() {
			ix.Apply(time.Unix(1, 0), Stream{Worker: "w1", Model: "m"}, &Batch{Events: []Event{
				{Kind: KindStored, Hashes: []uint64{100}, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 4}}}, &g)
		}},
		{"clear", func() { ix.Clear("w1", 0) }},
		{"set synced", func() { ix.SetSynced("w1", 0, false) }},
		{"remove worker", func() { ix.RemoveWorker("w1") }},
	} {
		ch := ix.Changed()
		if ix.Changed() != ch {
			t.Fatalf("%s: two waiters got different channels", c.name)
		}
		ix.Record(time.Unix(1, 0), "w1", []uint64{7})
		ix.Lookup(time.Unix(1, 0), []uint64{7}, 4, nil, nil)
		if closed(ch) {
			t.Fatalf("%s: closed by a speculative record or a lookup", c.name)
		}
		c.change()
		if !closed(ch) {
			t.Fatalf("%s: Changed not closed", c.name)
		}
		if closed(ix.Changed()) {
			t.Fatalf("%s: the next Changed is already closed", c.name)
		}
	}
}
