package intake

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/prefix"
)

// TestCacheView_PricingRule walks the pricing rule: a synced worker is
// priced by the engines' events, raised to what was routed to it within
// the speculative TTL unless it reported a removal since; every other
// worker by the approximate index.
func TestCacheView_PricingRule(t *testing.T) {
	ix := kvevents.NewIndex(4, 0)
	c := NewCacheView(CacheConfig{SpeculativeTTL: time.Second, Exact: ix})
	ids := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	h := prefix.HashTokens("", ids, 4, nil)
	g := int64(-1)
	// w1 stores block 0 by events; w2 has no stream (approximate).
	ix.Apply(t0, kvevents.Stream{Worker: "w1"}, &kvevents.Batch{Events: []kvevents.Event{
		{Kind: kvevents.KindStored, Hashes: []uint64{100}, Tokens: ids[:4], BlockSize: 4},
	}}, &g)
	c.approx.Record(t0, "w1", h)
	c.approx.Record(t0, "w2", h[:2])
	want := []sched.CachedTokens{{Worker: "w1", Tokens: 4}, {Worker: "w2", Tokens: 8}}
	if got := c.Lookup(t0, h, 4, true); !slices.Equal(got, want) {
		t.Fatalf("Lookup = %v, want %v", got, want)
	}
	// Byte hashes never reach the exact index.
	if got := c.Lookup(t0, h, 4, false); !slices.Equal(got, []sched.CachedTokens{{Worker: "w1", Tokens: 12}, {Worker: "w2", Tokens: 8}}) {
		t.Fatalf("byte hashes: %v", got)
	}
	// A routed prompt counts on a synced worker until its TTL passes.
	c.Record(t0, "w1", h, true)
	if got := c.Lookup(t0.Add(time.Millisecond), h, 4, true); !slices.Equal(got, []sched.CachedTokens{{Worker: "w1", Tokens: 12}, {Worker: "w2", Tokens: 8}}) {
		t.Fatalf("with a speculative entry: %v", got)
	}
	if got := c.Lookup(t0.Add(2*time.Second), h, 4, true); !slices.Equal(got, []sched.CachedTokens{{Worker: "w1", Tokens: 4}, {Worker: "w2", Tokens: 8}}) {
		t.Fatalf("past the speculative TTL: %v", got)
	}
	// A removal on w1 makes its speculative entries untrusted.
	c.Record(t0.Add(2*time.Millisecond), "w1", h, true)
	ix.Apply(t0.Add(2*time.Millisecond), kvevents.Stream{Worker: "w1"}, &kvevents.Batch{Events: []kvevents.Event{
		{Kind: kvevents.KindRemoved, Hashes: []uint64{100}},
	}}, &g)
	if got := c.Lookup(t0.Add(3*time.Millisecond), h, 4, true); !slices.Equal(got, []sched.CachedTokens{{Worker: "w2", Tokens: 8}}) {
		t.Fatalf("after a removal: %v", got)
	}
	// An unsynced worker falls back to the approximate figure.
	ix.SetSynced("w1", 0, false)
	if got := c.Lookup(t0, h, 4, true); !slices.Equal(got, []sched.CachedTokens{{Worker: "w1", Tokens: 12}, {Worker: "w2", Tokens: 8}}) {
		t.Fatalf("unsynced: %v", got)
	}
	// Workers that left the fleet are forgotten.
	c.Forget([]string{"w1", "w2"})
	if got := c.Lookup(t0, h, 4, true); len(got) != 0 {
		t.Fatalf("after Forget: %v", got)
	}
}

// TestMergeCached_RaceBetweenAnswers: a worker that fell out of sync
// between the exact index's answer and its state is listed once.
func TestMergeCached_RaceBetweenAnswers(t *testing.T) {
	found := []sched.CachedTokens{{Worker: "a", Tokens: 4}}
	approx := []sched.CachedTokens{{Worker: "a", Tokens: 8}, {Worker: "b", Tokens: 8}}
	got, src := mergeCached(t0, time.Second, found, nil, approx, []kvevents.WorkerState{{}, {}})
	if want := []sched.CachedTokens{{Worker: "a", Tokens: 4}, {Worker: "b", Tokens: 8}}; !slices.Equal(got, want) || src.events != 1 || src.approximate != 1 {
		t.Fatalf("merge = %v %+v, want %v", got, src, want)
	}
}

// TestCacheView_DeepBlocks checks the deep blocks rule: a long prompt's
// cached tokens past the first denseBlocks blocks count in steps of
// deepStride blocks, exactly at a multiple, never more than were routed,
// and the index keeps one entry per stride.
func TestCacheView_DeepBlocks(t *testing.T) {
	const bs = 4
	ids := make([]uint32, 1000*bs)
	for i := range ids {
		ids[i] = uint32(i)
	}
	full := prefix.HashTokens("", ids, bs, nil)
	for _, c := range []struct{ routed, want int }{
		{1000, 1000}, // 1000 = 256 + 93*8
		{700, 696},   // counted down to 256 + 55*8
		{263, 256},   // the first deep hash kept is block 263's
		{264, 264},
		{256, 256},
		{100, 100},
	} {
		v := NewCacheView(CacheConfig{})
		routed := prefix.HashTokens("", ids[:c.routed*bs], bs, nil)
		v.Record(t0, "w", routed, true)
		got := v.Lookup(t0, full, bs, true)
		if want := []sched.CachedTokens{{Worker: "w", Tokens: uint64(c.want * bs)}}; !slices.Equal(got, want) {
			t.Errorf("routed %d blocks: Lookup = %v, want %v", c.routed, got, want)
		}
		if n, want := v.approx.Len(), len(thin(routed)); n != want {
			t.Errorf("routed %d blocks: %d index entries, want %d", c.routed, n, want)
		}
	}
}
