package kvevents

import (
	"encoding/binary"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tollgate/tollgate/extproc/engine/kvevents/zmtp"
)

// storedPayload is a batch of one BlockStored event, in vLLM's positional
// shape. The package's external tests use test/kvwire's encoder, which
// these internal ones cannot import (it imports this package).
func storedPayload(ev Event) []byte {
	b, err := msgpack.Marshal([]any{0.0, []any{[]any{"BlockStored", ev.Hashes, nil, ev.Tokens, ev.BlockSize}}})
	if err != nil {
		panic(err)
	}
	return b
}

// boundBatch is a bind-mode message of worker storing one 16-token block
// of tokens from first.
func boundBatch(worker string, seq uint64, hash uint64, first uint32) *zmtp.Message {
	ev := Event{Kind: KindStored, Hashes: []uint64{hash}, BlockSize: 16}
	for i := range uint32(16) {
		ev.Tokens = append(ev.Tokens, first+i)
	}
	payload := storedPayload(ev)
	return &zmtp.Message{Frames: [][]byte{[]byte("kv@" + worker + "@m"), binary.BigEndian.AppendUint64(nil, seq), payload}}
}

// TestBindLetsGoOfChangedWorkers: SetWorkers leaves the index to bind
// mode's goroutine, the workers' only writer, which forgets a removed or
// changed worker before it handles anything more: an old stream never
// writes after its worker was let go of.
func TestBindLetsGoOfChangedWorkers(t *testing.T) {
	m := makeManager(Config{BlockSize: 16, Bind: "tcp://127.0.0.1:1"})
	bs := boundStreams{streams: make(map[streamKey]*streamState), ranks: make(map[string]int)}
	dec := NewDecoder()
	var b Batch
	m.SetWorkers([]Endpoint{{Worker: "w0"}})
	m.boundMessage(t.Context(), &bs, dec, &b, boundBatch("w0", 0, 1, 100))
	if n := m.idx.StreamLen("w0", 0); n != 1 {
		t.Fatalf("w0 holds %d blocks", n)
	}

	// The worker changes: its old stream goes before its next batch, which
	// starts a new stream (joining mid-stream: its sequence is not 0).
	m.SetWorkers([]Endpoint{{Worker: "w0", DPSize: 1}})
	if n := m.idx.StreamLen("w0", 0); n != 1 {
		t.Errorf("SetWorkers wrote to the index: w0 holds %d blocks", n)
	}
	m.boundMessage(t.Context(), &bs, dec, &b, boundBatch("w0", 1, 2, 200))
	if n := m.idx.StreamLen("w0", 0); n != 1 {
		t.Errorf("w0 holds %d blocks, want the new stream's one", n)
	}

	// The worker leaves: the next tick lets go of it, and its batches are
	// dropped from then on.
	m.SetWorkers(nil)
	m.letGo(&bs, m.boundView(""))
	if m.idx.StreamLen("w0", 0) != 0 || m.idx.Synced("w0") || len(bs.streams) != 0 {
		t.Errorf("the removed worker is still indexed")
	}
	m.boundMessage(t.Context(), &bs, dec, &b, boundBatch("w0", 2, 3, 300))
	if m.idx.StreamLen("w0", 0) != 0 {
		t.Errorf("a removed worker's batch was applied")
	}
}

func TestRankAllowed(t *testing.T) {
	known := Endpoint{DPStart: 4, DPSize: 2}
	for rank, want := range map[uint32]bool{3: false, 4: true, 5: true, 6: false, 0: false} {
		if got := rankAllowed(known, rank, 0); got != want {
			t.Errorf("rank %d of [4, 6): %v", rank, got)
		}
	}
	if !rankAllowed(Endpoint{}, 1000, MaxUnknownRanks-1) || rankAllowed(Endpoint{}, 0, MaxUnknownRanks) {
		t.Error("unknown DP size: the first MaxUnknownRanks ranks only")
	}
}
