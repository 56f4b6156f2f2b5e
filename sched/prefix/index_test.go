package prefix

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/sched"
)

var t0 = time.Unix(1_700_000_000, 0)

func chain(model string, n int, start uint32) []uint64 {
	return HashTokens(model, seqIDs(n*16, start), 16, nil)
}

func lookup(x *Index, now time.Time, hashes []uint64) []sched.CachedTokens {
	return x.Lookup(now, hashes, 16, nil)
}

func TestIndexLookupLeadingBlocks(t *testing.T) {
	x := New(time.Minute, 100)
	prompt := chain("m", 6, 1)
	x.Record(t0, "w1", prompt[:4])
	x.Record(t0, "w2", prompt[:2])
	x.Record(t0, "w3", chain("m", 6, 999)) // unrelated prompt
	got := lookup(x, t0, prompt)
	want := []sched.CachedTokens{{Worker: "w1", Tokens: 64}, {Worker: "w2", Tokens: 32}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Lookup (-want +got):\n%s", diff)
	}
	if got := lookup(x, t0, chain("m", 3, 5)); len(got) != 0 {
		t.Errorf("unrelated prompt matched: %v", got)
	}
	if got := lookup(x, t0, nil); len(got) != 0 {
		t.Errorf("empty prompt matched: %v", got)
	}
}

func TestIndexStopsAtFirstMiss(t *testing.T) {
	x := New(time.Minute, 100)
	p := chain("m", 5, 1)
	// w1 holds blocks 0, 1, 3, 4 but not 2: only two leading blocks count.
	x.Record(t0, "w1", []uint64{p[0], p[1], p[3], p[4]})
	// w2 holds every block but the first: nothing counts.
	x.Record(t0, "w2", p[1:])
	want := []sched.CachedTokens{{Worker: "w1", Tokens: 32}}
	if diff := cmp.Diff(want, lookup(x, t0, p)); diff != "" {
		t.Errorf("Lookup (-want +got):\n%s", diff)
	}
}

func TestIndexChainedPrefixSharing(t *testing.T) {
	// Two conversations share a 3-block history and then diverge; a third
	// request extends the first. Hashing the token ids end to end is what
	// makes the match.
	x := New(time.Minute, 1000)
	history := seqIDs(48, 1)
	a := append(slices.Clone(history), seqIDs(32, 500)...)
	b := append(slices.Clone(history), seqIDs(32, 900)...)
	x.Record(t0, "wa", HashTokens("m", a, 16, nil))
	x.Record(t0, "wb", HashTokens("m", b, 16, nil))
	next := append(slices.Clone(a), seqIDs(16, 7)...)
	want := []sched.CachedTokens{{Worker: "wa", Tokens: 80}, {Worker: "wb", Tokens: 48}}
	if diff := cmp.Diff(want, lookup(x, t0, HashTokens("m", next, 16, nil))); diff != "" {
		t.Errorf("Lookup (-want +got):\n%s", diff)
	}
	// The same tokens under another model match nothing.
	if got := lookup(x, t0, HashTokens("other", next, 16, nil)); len(got) != 0 {
		t.Errorf("other model matched: %v", got)
	}
}

func TestIndexTTLBoundary(t *testing.T) {
	ttl := 120 * time.Second
	x := New(ttl, 100)
	p := chain("m", 2, 1)
	x.Record(t0, "w", p)
	if got := lookup(x, t0.Add(ttl-time.Nanosecond), p); len(got) != 1 || got[0].Tokens != 32 {
		t.Errorf("1ns before expiry: %v, want a 32-token match", got)
	}
	if got := lookup(x, t0.Add(ttl), p); len(got) != 0 {
		t.Errorf("at expiry: %v, want no match", got)
	}
	// Lookup does not refresh; Record does.
	x.Record(t0.Add(ttl/2), "w", p[:1])
	at := t0.Add(ttl)
	if diff := cmp.Diff([]sched.CachedTokens{{Worker: "w", Tokens: 16}}, lookup(x, at, p)); diff != "" {
		t.Errorf("after refreshing block 0 (-want +got):\n%s", diff)
	}
	if x.Len() != 2 {
		t.Errorf("Len = %d before pruning, want 2 (expired entries linger)", x.Len())
	}
	if n := x.Prune(at); n != 1 || x.Len() != 1 {
		t.Errorf("Prune removed %d, Len %d; want 1 and 1", n, x.Len())
	}
	if n := x.Prune(t0.Add(ttl/2 + ttl)); n != 1 || x.Len() != 0 {
		t.Errorf("second Prune removed %d, Len %d; want 1 and 0", n, x.Len())
	}
}

func TestIndexRecordReclaimsExpired(t *testing.T) {
	x := New(time.Second, 100)
	x.Record(t0, "w", chain("m", 10, 1))
	x.Record(t0.Add(time.Second), "w", chain("m", 1, 77))
	if x.Len() != 1 {
		t.Errorf("Len = %d after recording past the TTL, want 1", x.Len())
	}
}

func TestIndexLRUEviction(t *testing.T) {
	x := New(time.Hour, 4)
	a := chain("m", 3, 1)
	b := chain("m", 3, 100)
	x.Record(t0, "w1", a)
	x.Record(t0.Add(time.Second), "w2", b[:1])
	if x.Len() != 4 {
		t.Fatalf("Len = %d, want 4", x.Len())
	}
	// The bound is full; recording evicts the least recently recorded entry,
	// which is a's deepest block (blocks are recorded deepest first).
	x.Record(t0.Add(2*time.Second), "w2", b[1:2])
	if x.Len() != 4 {
		t.Fatalf("Len = %d, want the bound 4", x.Len())
	}
	if diff := cmp.Diff([]sched.CachedTokens{{Worker: "w1", Tokens: 32}}, lookup(x, t0, a)); diff != "" {
		t.Errorf("a after eviction (-want +got):\n%s", diff)
	}
	// Refreshing a's first block makes a's second block the oldest.
	x.Record(t0.Add(3*time.Second), "w1", a[:1])
	x.Record(t0.Add(4*time.Second), "w2", b[2:3])
	if diff := cmp.Diff([]sched.CachedTokens{{Worker: "w1", Tokens: 16}}, lookup(x, t0, a)); diff != "" {
		t.Errorf("a after second eviction (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]sched.CachedTokens{{Worker: "w2", Tokens: 48}}, lookup(x, t0, b)); diff != "" {
		t.Errorf("b (-want +got):\n%s", diff)
	}
	// A single prompt longer than the bound keeps its leading blocks.
	y := New(time.Hour, 3)
	long := chain("m", 8, 1)
	y.Record(t0, "w", long)
	if diff := cmp.Diff([]sched.CachedTokens{{Worker: "w", Tokens: 48}}, lookup(y, t0, long)); diff != "" {
		t.Errorf("long prompt under a small bound (-want +got):\n%s", diff)
	}
}

func TestIndexRemoveWorker(t *testing.T) {
	x := New(time.Minute, 100)
	p := chain("m", 3, 1)
	x.Record(t0, "w1", p)
	x.Record(t0, "w2", p)
	x.Record(t0, "w3", p[:1])
	x.RemoveWorker("w2")
	x.RemoveWorker("nobody")
	if x.Len() != 4 {
		t.Errorf("Len = %d after removing w2, want 4", x.Len())
	}
	want := []sched.CachedTokens{{Worker: "w1", Tokens: 48}, {Worker: "w3", Tokens: 16}}
	if diff := cmp.Diff(want, lookup(x, t0, p)); diff != "" {
		t.Errorf("Lookup (-want +got):\n%s", diff)
	}
	// A new worker reuses the freed id without inheriting anything.
	x.Record(t0, "w4", p[:2])
	want = []sched.CachedTokens{{Worker: "w1", Tokens: 48}, {Worker: "w3", Tokens: 16}, {Worker: "w4", Tokens: 32}}
	if diff := cmp.Diff(want, lookup(x, t0, p)); diff != "" {
		t.Errorf("Lookup after reuse (-want +got):\n%s", diff)
	}
	x.RemoveWorker("w1")
	x.RemoveWorker("w3")
	x.RemoveWorker("w4")
	if x.Len() != 0 || len(x.byHash) != 0 {
		t.Errorf("Len %d, %d hashes after removing everyone", x.Len(), len(x.byHash))
	}
}

func TestIndexLookupAppendsSorted(t *testing.T) {
	x := New(time.Minute, 100)
	p := chain("m", 1, 1)
	for _, w := range []string{"d", "b", "c", "a"} {
		x.Record(t0, w, p)
	}
	dst := []sched.CachedTokens{{Worker: "keep", Tokens: 1}}
	got := x.Lookup(t0, p, 16, dst)
	want := []sched.CachedTokens{{Worker: "keep", Tokens: 1}, {Worker: "a", Tokens: 16}, {Worker: "b", Tokens: 16}, {Worker: "c", Tokens: 16}, {Worker: "d", Tokens: 16}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Lookup (-want +got):\n%s", diff)
	}
}

func TestIndexDefaults(t *testing.T) {
	x := New(0, 0)
	if x.ttl != int64(DefaultTTL) || x.maxEntries != DefaultMaxEntries {
		t.Errorf("New(0, 0): ttl %v max %d", time.Duration(x.ttl), x.maxEntries)
	}
	x.Record(t0, "w", nil) // no blocks: nothing to record
	if x.Len() != 0 || len(x.workerIDs) != 0 {
		t.Error("recording no blocks created state")
	}
}

// model is a slow, obviously correct reference for Index.
type model struct {
	ttl     time.Duration
	max     int
	entries []modelEntry // most recent first
}

type modelEntry struct {
	hash    uint64
	worker  string
	expires time.Time
}

func (m *model) record(now time.Time, worker string, hashes []uint64) {
	if len(hashes) == 0 {
		return
	}
	for len(m.entries) > 0 && !now.Before(m.entries[len(m.entries)-1].expires) {
		m.entries = m.entries[:len(m.entries)-1]
	}
	for i := len(hashes) - 1; i >= 0; i-- {
		k := slices.IndexFunc(m.entries, func(e modelEntry) bool { return e.hash == hashes[i] && e.worker == worker })
		if k >= 0 {
			m.entries = slices.Delete(m.entries, k, k+1)
		} else if len(m.entries) >= m.max {
			m.entries = m.entries[:len(m.entries)-1]
		}
		m.entries = slices.Insert(m.entries, 0, modelEntry{hashes[i], worker, now.Add(m.ttl)})
	}
}

func (m *model) lookup(now time.Time, hashes []uint64) []sched.CachedTokens {
	holds := func(h uint64, w string) bool {
		return slices.ContainsFunc(m.entries, func(e modelEntry) bool {
			return e.hash == h && e.worker == w && now.Before(e.expires)
		})
	}
	var out []sched.CachedTokens
	seen := map[string]bool{}
	for _, e := range m.entries {
		if seen[e.worker] || len(hashes) == 0 {
			continue
		}
		seen[e.worker] = true
		n := 0
		for n < len(hashes) && holds(hashes[n], e.worker) {
			n++
		}
		if n > 0 {
			out = append(out, sched.CachedTokens{Worker: e.worker, Tokens: uint64(n) * 16})
		}
	}
	slices.SortFunc(out, func(a, b sched.CachedTokens) int { return strings.Compare(a.Worker, b.Worker) })
	return out
}

func (m *model) remove(worker string) {
	m.entries = slices.DeleteFunc(m.entries, func(e modelEntry) bool { return e.worker == worker })
}

// TestIndexMatchesModel drives the index and the reference with the same
// random operations and compares every lookup.
func TestIndexMatchesModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			ttl := time.Duration(1+r.IntN(20)) * time.Second
			maxEntries := 1 + r.IntN(40)
			x := New(ttl, maxEntries)
			m := &model{ttl: ttl, max: maxEntries}
			prompts := make([][]uint64, 6)
			for i := range prompts {
				// Prompts share prefixes: each extends a random shorter one.
				base := seqIDs(16*r.IntN(4), 1)
				prompts[i] = HashTokens("m", append(base, seqIDs(16*(1+r.IntN(5)), uint32(100*i))...), 16, nil)
			}
			workers := []string{"a", "b", "c", "d"}
			now := t0
			for step := range 400 {
				now = now.Add(time.Duration(r.IntN(1500)) * time.Millisecond)
				p := prompts[r.IntN(len(prompts))]
				switch op := r.IntN(10); {
				case op < 5:
					w := workers[r.IntN(len(workers))]
					k := r.IntN(len(p) + 1)
					x.Record(now, w, p[:k])
					m.record(now, w, p[:k])
				case op < 9:
					got := lookup(x, now, p)
					want := m.lookup(now, p)
					if diff := cmp.Diff(want, got); diff != "" {
						t.Fatalf("step %d: Lookup (-model +index):\n%s", step, diff)
					}
				default:
					w := workers[r.IntN(len(workers))]
					x.RemoveWorker(w)
					m.remove(w)
				}
				if x.Len() > maxEntries || x.Len() != len(m.entries) {
					t.Fatalf("step %d: Len %d, model %d, bound %d", step, x.Len(), len(m.entries), maxEntries)
				}
			}
		})
	}
}

// benchIndex returns an index holding 64 prompts of 4096 tokens spread
// over 8 workers, all sharing a 1024-token system prompt, and one such
// prompt to look up.
func benchIndex() (*Index, []uint64) {
	x := New(DefaultTTL, DefaultMaxEntries)
	system := seqIDs(1024, 1)
	var probe []uint64
	for i := range 64 {
		ids := append(slices.Clone(system), seqIDs(3072, uint32(1000*(i+1)))...)
		h := HashTokens("llama", ids, 16, nil)
		x.Record(t0, fmt.Sprintf("worker-%d", i%8), h)
		probe = h
	}
	return x, probe
}

func BenchmarkLookup4k(b *testing.B) {
	x, probe := benchIndex()
	dst := make([]sched.CachedTokens, 0, 8)
	b.ReportAllocs()
	for b.Loop() {
		dst = x.Lookup(t0, probe, 16, dst[:0])
	}
	if len(dst) != 8 {
		b.Fatalf("got %d matches, want 8", len(dst))
	}
}

func BenchmarkRecord4k(b *testing.B) {
	x, probe := benchIndex()
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		x.Record(now, "worker-3", probe)
	}
}

func BenchmarkRecordNew4kAtBound(b *testing.B) {
	x := New(DefaultTTL, 4096)
	ids := seqIDs(4096, 1)
	hashes := make([]uint64, 0, 256)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ids[0] = uint32(i) // a fresh chain every time: all inserts, all evictions
		hashes = HashTokens("llama", ids, 16, hashes[:0])
		x.Record(t0, "w", hashes)
	}
}
