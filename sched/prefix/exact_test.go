package prefix

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/sched"
)

// storeBlocks stores the blocks of ids[from:to] (whole blocks of bs) for a
// stream, with engine hashes eng(i) for block i, chained to block from-1.
func storeBlocks(t testing.TB, x *Exact, worker string, rank uint32, seed string, ids []uint32, bs, from, to int, eng func(int) uint64) (int, int) {
	t.Helper()
	ev := Stored{Worker: worker, Rank: rank, Seed: seed, Tokens: ids[from*bs : to*bs], BlockSize: bs}
	if from > 0 {
		ev.Parent, ev.HasParent = eng(from-1), true
	}
	for i := from; i < to; i++ {
		ev.Hashes = append(ev.Hashes, eng(i))
	}
	st, dr, _, err := x.Store(&ev, nil)
	if err != nil {
		t.Fatalf("Store: %v", err)
	}
	return st, dr
}

func engHash(tag uint64) func(int) uint64 {
	return func(i int) uint64 { return tag<<32 | uint64(i) }
}

func TestExactStoreLookup(t *testing.T) {
	x := NewExact(4, 0)
	ids := seqIDs(40, 1) // 10 blocks
	storeBlocks(t, x, "w1", 0, "m", ids, 4, 0, 3, engHash(1))
	storeBlocks(t, x, "w1", 0, "m", ids, 4, 3, 6, engHash(1)) // chained by parent
	storeBlocks(t, x, "w2", 0, "m", ids, 4, 0, 2, engHash(2))
	q := HashTokens("m", ids, 4, nil)
	got := x.Lookup(q, 4, nil)
	want := []sched.CachedTokens{{Worker: "w1", Tokens: 24}, {Worker: "w2", Tokens: 8}}
	if !slices.Equal(got, want) {
		t.Fatalf("Lookup = %v, want %v", got, want)
	}
	if got := x.Lookup(HashTokens("other", ids, 4, nil), 4, nil); len(got) != 0 {
		t.Errorf("another model's prompt matched: %v", got)
	}
	if x.Len() != 8 || x.Hashes() != 6 {
		t.Errorf("Len %d Hashes %d, want 8 and 6", x.Len(), x.Hashes())
	}
	// Removing w1's block 2 (engine hash) cuts its prefix at 2 blocks.
	if n := x.Remove("w1", 0, []uint64{engHash(1)(2)}); n != 1 {
		t.Fatalf("Remove removed %d", n)
	}
	got = x.Lookup(q, 4, nil)
	want = []sched.CachedTokens{{Worker: "w1", Tokens: 8}, {Worker: "w2", Tokens: 8}}
	if !slices.Equal(got, want) {
		t.Fatalf("after remove: %v, want %v", got, want)
	}
	x.Clear("w1", 0)
	if got = x.Lookup(q, 4, nil); !slices.Equal(got, []sched.CachedTokens{{Worker: "w2", Tokens: 8}}) {
		t.Fatalf("after clear: %v", got)
	}
	if x.Len() != 2 || x.Hashes() != 2 {
		t.Errorf("after clear Len %d Hashes %d", x.Len(), x.Hashes())
	}
}

func TestExactErrors(t *testing.T) {
	x := NewExact(4, 0)
	ids := seqIDs(16, 1)
	for _, tc := range []struct {
		ev   Stored
		want error
	}{
		{Stored{Worker: "w", Hashes: []uint64{1}, Tokens: ids[:4], Parent: 99, HasParent: true}, ErrUnknownParent},
		{Stored{Worker: "w", Hashes: []uint64{1}, Tokens: ids[:6], BlockSize: 6}, ErrBlockSize},
		{Stored{Worker: "w", Hashes: []uint64{1, 2}, Tokens: ids[:5], BlockSize: 4}, ErrTokenCount},
		{Stored{Worker: "w", Hashes: []uint64{1}, Tokens: ids[:2]}, ErrBlockSize},
	} {
		if _, _, _, err := x.Store(&tc.ev, nil); !errors.Is(err, tc.want) {
			t.Errorf("Store(%+v) = %v, want %v", tc.ev, err, tc.want)
		}
	}
	if x.Len() != 0 {
		t.Errorf("failed stores left %d blocks", x.Len())
	}
	// A stream's block size may not change.
	storeBlocks(t, x, "w", 0, "m", ids, 4, 0, 1, engHash(1))
	if _, _, _, err := x.Store(&Stored{Worker: "w", Hashes: []uint64{7}, Tokens: ids[:8]}, nil); !errors.Is(err, ErrBlockSize) {
		t.Errorf("changed block size: %v", err)
	}
}

func TestExactEngineBlockMultiple(t *testing.T) {
	// Engine blocks of 8 tokens over an index of 4: each engine block is
	// two index blocks, and removing it removes both.
	x := NewExact(4, 0)
	ids := seqIDs(32, 3)
	storeBlocks(t, x, "w", 0, "m", ids, 8, 0, 2, engHash(1))
	storeBlocks(t, x, "w", 0, "m", ids, 8, 2, 4, engHash(1))
	q := HashTokens("m", ids, 4, nil)
	if got := x.Lookup(q, 4, nil); !slices.Equal(got, []sched.CachedTokens{{Worker: "w", Tokens: 32}}) {
		t.Fatalf("Lookup = %v", got)
	}
	if n := x.Remove("w", 0, []uint64{engHash(1)(1)}); n != 2 {
		t.Fatalf("removed %d index blocks, want 2", n)
	}
	if got := x.Lookup(q, 4, nil); !slices.Equal(got, []sched.CachedTokens{{Worker: "w", Tokens: 8}}) {
		t.Fatalf("after remove: %v", got)
	}
}

func TestExactDuplicateStores(t *testing.T) {
	// Two engine hashes for the same tokens (e.g. different cache salts):
	// the block stays until both are removed.
	x := NewExact(4, 0)
	ids := seqIDs(8, 1)
	storeBlocks(t, x, "w", 0, "m", ids, 4, 0, 2, engHash(1))
	storeBlocks(t, x, "w", 0, "m", ids, 4, 0, 2, engHash(2))
	storeBlocks(t, x, "w", 0, "m", ids, 4, 0, 2, engHash(2)) // a plain repeat
	q := HashTokens("m", ids, 4, nil)
	x.Remove("w", 0, []uint64{engHash(1)(0), engHash(1)(1)})
	if got := x.Lookup(q, 4, nil); !slices.Equal(got, []sched.CachedTokens{{Worker: "w", Tokens: 8}}) {
		t.Fatalf("after removing one copy: %v", got)
	}
	x.Remove("w", 0, []uint64{engHash(2)(0)})
	if got := x.Lookup(q, 4, nil); len(got) != 0 {
		t.Fatalf("after removing both: %v", got)
	}
	if x.Len() != 1 {
		t.Errorf("Len %d, want 1", x.Len())
	}
}

func TestExactSyncAndRanks(t *testing.T) {
	x := NewExact(4, 0)
	ids := seqIDs(16, 1)
	storeBlocks(t, x, "w", 0, "m", ids, 4, 0, 1, engHash(1))
	storeBlocks(t, x, "w", 1, "m", ids, 4, 0, 3, engHash(2))
	q := HashTokens("m", ids, 4, nil)
	if got := x.Lookup(q, 4, nil); !slices.Equal(got, []sched.CachedTokens{{Worker: "w", Tokens: 12}}) {
		t.Fatalf("best rank: %v", got)
	}
	x.SetSynced("w", 0, false)
	if x.Synced("w") {
		t.Fatal("worker synced with an unsynced rank")
	}
	if got := x.Lookup(q, 4, nil); len(got) != 0 {
		t.Fatalf("unsynced worker reported: %v", got)
	}
	x.SetSynced("w", 0, true)
	if !x.Synced("w") || len(x.Lookup(q, 4, nil)) != 1 {
		t.Fatal("resynced worker not reported")
	}
	if x.Synced("nobody") {
		t.Error("unknown worker is synced")
	}
	x.RemoveWorker("w")
	if x.Len() != 0 || x.Hashes() != 0 || x.Synced("w") || len(x.Lookup(q, 4, nil)) != 0 {
		t.Errorf("RemoveWorker left Len %d Hashes %d", x.Len(), x.Hashes())
	}
	storeBlocks(t, x, "v", 0, "m", ids, 4, 0, 2, engHash(3))
	if got := x.Lookup(q, 4, nil); !slices.Equal(got, []sched.CachedTokens{{Worker: "v", Tokens: 8}}) {
		t.Fatalf("reused slot: %v", got)
	}
}

func TestExactBound(t *testing.T) {
	x := NewExact(4, 3)
	ids := seqIDs(20, 1)
	st, dr := storeBlocks(t, x, "w", 0, "m", ids, 4, 0, 5, engHash(1))
	if st != 3 || dr != 2 || x.Len() != 3 {
		t.Fatalf("stored %d dropped %d Len %d, want 3 2 3", st, dr, x.Len())
	}
	// What is held stays exact; the dropped blocks are simply unknown.
	q := HashTokens("m", ids, 4, nil)
	if got := x.Lookup(q, 4, nil); !slices.Equal(got, []sched.CachedTokens{{Worker: "w", Tokens: 12}}) {
		t.Fatalf("Lookup = %v", got)
	}
	x.Remove("w", 0, []uint64{engHash(1)(2)})
	if st, _ := storeBlocks(t, x, "v", 0, "m", ids, 4, 0, 1, engHash(2)); st != 1 {
		t.Errorf("space freed by Remove not reused: stored %d", st)
	}
}

// TestExactMatchesModel drives random stores, removals and clears over many
// streams and checks every lookup against a plain per-stream set model.
func TestExactMatchesModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const bs = 2
	x := NewExact(bs, 0)
	prompts := make([][]uint32, 6)
	for i := range prompts {
		prompts[i] = seqIDs(20, uint32(i%3)) // pairs of prompts share prefixes
		prompts[i][10+i] ^= 0xFFFF
	}
	type key struct {
		w    string
		rank uint32
	}
	model := map[key]map[uint64]uint64{} // engine hash -> tollgate hash
	for step := range 3000 {
		k := key{fmt.Sprintf("w%d", r.IntN(70)), uint32(r.IntN(2))}
		if model[k] == nil {
			model[k] = map[uint64]uint64{}
		}
		p := r.IntN(len(prompts))
		tg := HashTokens("m", prompts[p], bs, nil)
		eng := func(i int) uint64 { return uint64(p)<<32 | uint64(i) | uint64(k.rank)<<48 }
		switch op := r.IntN(10); {
		case op < 6:
			from := r.IntN(10)
			to := from + 1 + r.IntN(10-from)
			if from > 0 {
				if _, ok := model[k][eng(from-1)]; !ok {
					from = 0
				}
			}
			storeBlocks(t, x, k.w, k.rank, "m", prompts[p], bs, from, to, eng)
			for i := from; i < to; i++ {
				model[k][eng(i)] = tg[i]
			}
		case op < 9:
			i := r.IntN(10)
			x.Remove(k.w, k.rank, []uint64{eng(i)})
			delete(model[k], eng(i))
		default:
			x.Clear(k.w, k.rank)
			clear(model[k])
		}
		q := HashTokens("m", prompts[r.IntN(len(prompts))], bs, nil)
		want := map[string]uint64{}
		for k, set := range model {
			held := map[uint64]bool{}
			for _, h := range set {
				held[h] = true
			}
			d := 0
			for d < len(q) && held[q[d]] {
				d++
			}
			if d > 0 {
				want[k.w] = max(want[k.w], uint64(d*bs))
			}
		}
		got := x.Lookup(q, bs, nil)
		if len(got) != len(want) {
			t.Fatalf("step %d: got %v, want %v", step, got, want)
		}
		for i, c := range got {
			if want[c.Worker] != c.Tokens || (i > 0 && got[i-1].Worker >= c.Worker) {
				t.Fatalf("step %d: got %v, want %v", step, got, want)
			}
		}
	}
}

// exactFixture fills an index with workers streams that each hold the first
// depth(w) blocks of one 128-block prompt plus own blocks of their own.
func exactFixture(tb testing.TB, workers, own int) (*Exact, []uint64) {
	const bs = 16
	x := NewExact(bs, 0)
	shared := seqIDs(128*bs, 1)
	for w := range workers {
		name := fmt.Sprintf("worker-%03d", w)
		d := 1 + (w*37)%128
		storeBlocks(tb, x, name, 0, "llama", shared, bs, 0, d, engHash(uint64(w)))
		if own > 0 {
			mine := seqIDs(own*bs, uint32(1_000_000+w*7))
			storeBlocks(tb, x, name, 0, "llama", mine, bs, 0, own, engHash(uint64(1<<20+w)))
		}
	}
	return x, HashTokens("llama", shared, bs, nil)
}

func TestExactLookupAllocs(t *testing.T) {
	x, q := exactFixture(t, 256, 0)
	dst := make([]sched.CachedTokens, 0, 256)
	dst = x.Lookup(q, 16, dst[:0])
	if len(dst) != 256 {
		t.Fatalf("%d workers matched, want 256", len(dst))
	}
	if a := testing.AllocsPerRun(50, func() { dst = x.Lookup(q, 16, dst[:0]) }); a != 0 {
		t.Errorf("Lookup allocates %v times", a)
	}
}

// BenchmarkExactLookup128x256 looks up a 128-block prompt over 256 workers
// that each hold a different leading part of it.
func BenchmarkExactLookup128x256(b *testing.B) {
	x, q := exactFixture(b, 256, 0)
	dst := make([]sched.CachedTokens, 0, 256)
	var lat []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		dst = x.Lookup(q, 16, dst[:0])
		if len(lat) < 1<<16 {
			lat = append(lat, time.Since(t0))
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
}

// BenchmarkExactStore measures Store alone (hashing included), in blocks.
func BenchmarkExactStore(b *testing.B) {
	const bs = 16
	ids := seqIDs(64*bs, 1)
	x := NewExact(bs, 0)
	ev := Stored{Worker: "w", Seed: "llama", BlockSize: bs}
	var scratch []uint64
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		blk := n % 64
		ev.Tokens = ids[blk*bs : (blk+1)*bs]
		ev.Hashes = append(ev.Hashes[:0], uint64(n))
		ev.Parent, ev.HasParent = uint64(n-1), blk > 0
		_, _, scratch, _ = x.Store(&ev, scratch)
		if blk == 63 {
			x.Clear("w", 0)
		}
		n++
	}
}

// BenchmarkExactMemory reports the heap bytes per (stream, block) pair of
// 256 workers that share a prompt's leading blocks and hold 512 blocks
// each of their own.
func BenchmarkExactMemory(b *testing.B) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		x, _ := exactFixture(b, 256, 512)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(x.Len()), "B/block")
		b.ReportMetric(float64(x.Len()), "blocks")
		runtime.KeepAlive(x)
	}
}

// TestExactBoundCountsRepeats: the same block stored again under other
// engine hashes takes room under the bound, so that an engine cannot grow
// the index by renaming its blocks.
func TestExactBoundCountsRepeats(t *testing.T) {
	x := NewExact(4, 3)
	ids := seqIDs(4, 1)
	stored, dropped := 0, 0
	for i := range 5 {
		st, dr := storeBlocks(t, x, "w", 0, "m", ids, 4, 0, 1, engHash(uint64(i)))
		stored += st
		dropped += dr
	}
	if stored != 3 || dropped != 2 {
		t.Fatalf("stored %d dropped %d, want 3 and 2", stored, dropped)
	}
	x.Clear("w", 0)
	if st, _ := storeBlocks(t, x, "w", 0, "m", seqIDs(12, 50), 4, 0, 3, engHash(9)); st != 3 || x.Len() != 3 {
		t.Errorf("after Clear: stored %d, Len %d, want 3 and 3", st, x.Len())
	}
}

// TestExactStoreInSteps stores an event in steps, as a caller that hashes
// without its lock does, and checks that a step after the stream was
// cleared stores nothing.
func TestExactStoreInSteps(t *testing.T) {
	const bs = 4
	ids := seqIDs(10*8, 1)
	event := func() Stored {
		ev := Stored{Worker: "w", Seed: "m", Tokens: ids, BlockSize: 8}
		for i := range 10 {
			ev.Hashes = append(ev.Hashes, uint64(100+i))
		}
		return ev
	}
	whole := NewExact(bs, 0)
	ev := event()
	if _, _, _, err := whole.Store(&ev, nil); err != nil {
		t.Fatal(err)
	}
	x := NewExact(bs, 0)
	ev = event()
	parent, err := x.Prepare(&ev)
	if err != nil {
		t.Fatal(err)
	}
	hs := x.HashStored(&ev, parent, nil)
	stored := 0
	for next := 0; next < len(ev.Hashes); {
		var st int
		if next, st, _, err = x.StoreHashed(&ev, parent, hs, next, 3); err != nil {
			t.Fatal(err)
		}
		stored += st
	}
	q := HashTokens("m", ids, bs, nil)
	if stored != 20 || !slices.Equal(x.Lookup(q, bs, nil), whole.Lookup(q, bs, nil)) || x.Len() != whole.Len() {
		t.Fatalf("in steps: stored %d, %v; at once: %v", stored, x.Lookup(q, bs, nil), whole.Lookup(q, bs, nil))
	}
	// Cleared between two steps: the rest no longer continues a chain.
	x.Clear("w", 0)
	next, st, _, err := x.StoreHashed(&ev, parent, hs, 0, 5)
	if err != nil || st != 10 {
		t.Fatalf("first step after a clear: stored %d, %v", st, err)
	}
	x.Clear("w", 0)
	if _, st, _, err := x.StoreHashed(&ev, parent, hs, next, 5); !errors.Is(err, ErrUnknownParent) || st != 0 || x.Len() != 0 {
		t.Errorf("step after a clear: stored %d, %v, Len %d", st, err, x.Len())
	}
	// Removed, and the slot taken by another worker.
	ev2 := Stored{Worker: "w", Seed: "m", Tokens: ids[8:16], BlockSize: 8, Hashes: []uint64{101}, Parent: 100, HasParent: true}
	if _, _, _, err := x.StoreHashed(&ev, parent, hs, 0, 1); err != nil {
		t.Fatal(err)
	}
	p2, err := x.Prepare(&ev2)
	if err != nil {
		t.Fatal(err)
	}
	hs2 := x.HashStored(&ev2, p2, nil)
	x.RemoveWorker("w")
	storeBlocks(t, x, "v", 0, "m", ids, 8, 0, 1, engHash(1))
	if _, st, _, err := x.StoreHashed(&ev2, p2, hs2, 0, 1); !errors.Is(err, ErrUnknownParent) || st != 0 || x.Len() != 2 {
		t.Errorf("step after RemoveWorker: stored %d, %v, Len %d", st, err, x.Len())
	}
}

// TestExactClearReleasesEveryHold clears a stream whose engine blocks span
// two index blocks and repeat under two engine hashes, next to a stream
// sharing its blocks.
func TestExactClearReleasesEveryHold(t *testing.T) {
	x := NewExact(4, 8)
	ids := seqIDs(16, 1)
	storeBlocks(t, x, "w", 0, "m", ids, 8, 0, 2, engHash(1))
	storeBlocks(t, x, "w", 0, "m", ids, 8, 0, 1, engHash(2))
	storeBlocks(t, x, "v", 0, "m", ids, 8, 0, 1, engHash(3))
	x.Clear("w", 0)
	q := HashTokens("m", ids, 4, nil)
	if got := x.Lookup(q, 4, nil); !slices.Equal(got, []sched.CachedTokens{{Worker: "v", Tokens: 8}}) || x.Len() != 2 || x.Hashes() != 2 || x.StreamLen("w", 0) != 0 {
		t.Fatalf("after Clear: %v, Len %d, Hashes %d", got, x.Len(), x.Hashes())
	}
	// Every hold went: the bound has room for 6 more.
	if st, dr := storeBlocks(t, x, "w", 0, "m", seqIDs(24, 100), 8, 0, 3, engHash(4)); st != 6 || dr != 0 {
		t.Errorf("after Clear: stored %d dropped %d, want 6 and 0", st, dr)
	}
}

// TestExactClearSome clears a stream in steps.
func TestExactClearSome(t *testing.T) {
	x := NewExact(4, 0)
	ids := seqIDs(80, 1)
	storeBlocks(t, x, "w", 0, "m", ids, 8, 0, 10, engHash(1))
	storeBlocks(t, x, "v", 0, "m", ids, 8, 0, 1, engHash(2))
	steps, removed := 0, 0
	for done := false; !done; steps++ {
		var n int
		n, done = x.ClearSome("w", 0, 4)
		removed += n
		if steps > 10 {
			t.Fatal("ClearSome does not finish")
		}
	}
	if steps < 5 || removed != 20 || x.StreamLen("w", 0) != 0 || x.Len() != 2 {
		t.Errorf("%d steps removed %d; StreamLen %d, Len %d", steps, removed, x.StreamLen("w", 0), x.Len())
	}
	if n, done := x.ClearSome("nobody", 0, 4); n != 0 || !done {
		t.Errorf("unknown stream: %d %v", n, done)
	}
}
