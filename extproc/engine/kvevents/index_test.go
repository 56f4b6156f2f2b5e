package kvevents

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/prefix"
)

func TestIndexChangedIsClosedByEveryChange(t *testing.T) {
	ix := NewIndex(4, 0)
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
			ix.Apply(time.Unix(1, 0), Stream{Worker: "w1"}, &Batch{Events: []Event{
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
		ix.Lookup([]uint64{7}, 4, []string{"w1"}, nil, nil)
		if closed(ch) {
			t.Fatalf("%s: closed by a lookup", c.name)
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

// seqTokens returns n token ids from start on.
func seqTokens(n int, start uint32) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = start + uint32(i)
	}
	return ids
}

// storedEvent is a BlockStored of the whole bs-token blocks of ids, with
// engine hashes from eng on.
func storedEvent(ids []uint32, bs int, eng uint64) Event {
	ev := Event{Kind: KindStored, Tokens: ids, BlockSize: bs}
	for i := range len(ids) / bs {
		ev.Hashes = append(ev.Hashes, eng+uint64(i))
	}
	return ev
}

// TestIndexApplyLetsLookupsInDuringALargeBatch applies a batch of
// maximum-size events: the lock is let go after every applyChunk blocks, and
// a lookup made then sees the batch partly applied.
func TestIndexApplyLetsLookupsInDuringALargeBatch(t *testing.T) {
	const bs, events = 16, 4
	ix := NewIndex(bs, 0)
	var b Batch
	var prompts [][]uint64
	for e := range events {
		ids := seqTokens(MaxEventTokens, uint32(e)<<20)
		b.Events = append(b.Events, storedEvent(ids, bs, uint64(e)<<32))
		prompts = append(prompts, prefix.HashTokens("", ids, bs, nil))
	}
	var holds, most int
	partial := false
	ix.afterHold = func(work int) {
		holds++
		most = max(most, work)
		got, _ := ix.Lookup(prompts[0], bs, nil, nil, nil)
		if len(got) == 1 && got[0].Tokens > 0 && got[0].Tokens < MaxEventTokens {
			partial = true
		}
	}
	g := int64(-1)
	a := ix.Apply(time.Unix(1, 0), Stream{Worker: "w"}, &b, &g)
	if want := events * MaxEventTokens / bs; a.Stored != want {
		t.Fatalf("stored %d blocks, want %d", a.Stored, want)
	}
	if most > applyChunk {
		t.Errorf("one hold of the lock did %d blocks of work, want at most %d (%d holds)", most, applyChunk, holds)
	}
	if !partial {
		t.Errorf("no lookup ran while the batch applied (%d holds)", holds)
	}
	for _, p := range prompts {
		if got, _ := ix.Lookup(p, bs, nil, nil, nil); !slices.Equal(got, []sched.CachedTokens{{Worker: "w", Tokens: MaxEventTokens}}) {
			t.Fatalf("after the batch: %v", got)
		}
	}
}

// TestIndexApplyBoundsRemovalsAndRepeats: repeated blocks, removals and
// clears are applied in chunks too.
func TestIndexApplyBoundsRemovalsAndRepeats(t *testing.T) {
	const bs = 16
	ix := NewIndex(bs, 0)
	ev := storedEvent(seqTokens(MaxEventTokens, 1), bs, 1)
	g := int64(-1)
	apply := func(evs ...Event) Applied {
		return ix.Apply(time.Unix(1, 0), Stream{Worker: "w"}, &Batch{Events: evs}, &g)
	}
	apply(ev)
	most := 0
	ix.afterHold = func(work int) { most = max(most, work) }
	if a := apply(ev, ev); a != (Applied{}) {
		t.Errorf("repeats: %+v", a)
	}
	if a := apply(Event{Kind: KindRemoved, Hashes: ev.Hashes}); a != (Applied{Removed: len(ev.Hashes)}) {
		t.Errorf("removal: %+v", a)
	}
	apply(ev)
	if a := apply(Event{Kind: KindCleared}); a != (Applied{Cleared: 1}) {
		t.Errorf("clear: %+v", a)
	}
	if p, _ := ix.Size(); p != 0 {
		t.Errorf("%d blocks left after a clear", p)
	}
	apply(ev)
	ix.Clear("w", 0)
	if p, _ := ix.Size(); p != 0 {
		t.Errorf("%d blocks left after Index.Clear", p)
	}
	if most > applyChunk {
		t.Errorf("one hold did %d blocks of work, want at most %d", most, applyChunk)
	}
}

// TestIndexTruncatedEvents: a store beyond MaxEventTokens keeps its leading
// blocks; a removal beyond it clears the stream; both are counted.
func TestIndexTruncatedEvents(t *testing.T) {
	const bs = 16
	ix := NewIndex(bs, 0)
	ids := seqTokens(MaxEventTokens+8*bs, 1)
	var b Batch
	payload := storedPayload(storedEvent(ids, bs, 1))
	if err := NewDecoder().Decode(payload, &b); err != nil {
		t.Fatal(err)
	}
	g := int64(-1)
	a := ix.Apply(time.Unix(1, 0), Stream{Worker: "w"}, &b, &g)
	if a != (Applied{Stored: MaxEventTokens / bs, Truncated: 1}) {
		t.Fatalf("Applied %+v", a)
	}
	got, _ := ix.Lookup(prefix.HashTokens("", ids, bs, nil), bs, nil, nil, nil)
	if !slices.Equal(got, []sched.CachedTokens{{Worker: "w", Tokens: MaxEventTokens}}) {
		t.Fatalf("Lookup = %v", got)
	}
	removal := Event{Kind: KindRemoved, Hashes: []uint64{1}, Truncated: true}
	if a := ix.Apply(time.Unix(2, 0), Stream{Worker: "w"}, &Batch{Events: []Event{removal}}, &g); a != (Applied{Removed: MaxEventTokens / bs, Truncated: 1}) {
		t.Fatalf("truncated removal: %+v", a)
	}
	if p, _ := ix.Size(); p != 0 {
		t.Errorf("a truncated removal left %d blocks", p)
	}
}

// TestIndexSeeds: base-model blocks are seeded alike whatever the worker's
// model, so that a worker without one prices the requests it serves; a LoRA
// adapter's blocks are seeded by its name, and a request for it is seeded
// so once the events named it.
func TestIndexSeeds(t *testing.T) {
	const bs = 4
	ix := NewIndex(bs, 0)
	ids := seqTokens(3*bs, 1)
	price := func(model string) []sched.CachedTokens {
		got, _ := ix.Lookup(prefix.HashTokens(ix.SeedFor(model), ids, bs, nil), bs, nil, nil, nil)
		return got
	}
	g1, g2 := int64(-1), int64(-1)
	base := storedEvent(ids, bs, 1)
	ix.Apply(time.Unix(1, 0), Stream{Worker: "base"}, &Batch{Events: []Event{base}}, &g1)
	if got := price("llama"); !slices.Equal(got, []sched.CachedTokens{{Worker: "base", Tokens: 3 * bs}}) {
		t.Fatalf("a model-less worker's events priced a llama request as %v", got)
	}
	if ix.SeedFor("ad") != "" {
		t.Fatal("an adapter no event named seeds by its name")
	}
	lora := storedEvent(ids, bs, 1)
	lora.LoraName = "ad"
	ix.Apply(time.Unix(1, 0), Stream{Worker: "lora"}, &Batch{Events: []Event{lora}}, &g2)
	if got := price("ad"); !slices.Equal(got, []sched.CachedTokens{{Worker: "lora", Tokens: 3 * bs}}) {
		t.Fatalf("the adapter's request: %v, want its worker only", got)
	}
	if got := price("llama"); !slices.Equal(got, []sched.CachedTokens{{Worker: "base", Tokens: 3 * bs}}) {
		t.Fatalf("a base request: %v, want the base worker only", got)
	}
	ix.RemoveWorker("lora")
	if ix.SeedFor("ad") != "" {
		t.Error("an adapter stays known after its last worker went")
	}
}

func TestIndexBoundsLoraNames(t *testing.T) {
	ix := NewIndex(1, 0)
	g := int64(-1)
	var b Batch
	for i := range maxLoraNames + 1 {
		ev := storedEvent([]uint32{uint32(i)}, 1, uint64(i))
		ev.LoraName = fmt.Sprintf("lora-%d", i)
		b.Events = append(b.Events, ev)
	}
	if a := ix.Apply(time.Unix(1, 0), Stream{Worker: "w"}, &b, &g); a.Stored != maxLoraNames || a.Skipped != 1 {
		t.Fatalf("Applied %+v, want %d stored and one skipped", a, maxLoraNames)
	}
	if ix.SeedFor("lora-0") != "lora-0" || ix.SeedFor(fmt.Sprintf("lora-%d", maxLoraNames)) != "" {
		t.Error("SeedFor does not follow the bounded names")
	}
}
