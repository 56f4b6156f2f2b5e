package kvevents

import (
	"testing"
	"time"
)

// ingestPayloads returns n distinct vLLM batches (array shape, integer
// hashes) of events BlockStored events of blocks 16-token blocks each,
// chained within a batch.
func ingestPayloads(n, events, blocks int) [][]byte {
	out := make([][]byte, n)
	tok := uint32(1)
	h := uint64(1)
	for i := range out {
		b := Batch{TS: 1, Events: make([]Event, events)}
		for e := range b.Events {
			ev := Event{Kind: KindStored, BlockSize: 16, Medium: "GPU"}
			if e > 0 {
				ev.Parent, ev.HasParent = h-1, true
			}
			for range blocks {
				ev.Hashes = append(ev.Hashes, h)
				h++
				for range 16 {
					ev.Tokens = append(ev.Tokens, tok%150000)
					tok += 7
				}
			}
			b.Events[e] = ev
		}
		out[i] = Encode(&b, Encoding{Shape: ShapeArray})
	}
	return out
}

// BenchmarkIngest decodes and applies batches of 16 BlockStored events of
// 4 blocks (16 tokens each) to one stream, clearing it every 64 batches;
// blocks/s is the ingest rate on one core.
func BenchmarkIngest(b *testing.B) {
	const batches, events, blocks = 64, 16, 4
	payloads := ingestPayloads(batches, events, blocks)
	ix := NewIndex(16, 0, 0)
	d := NewDecoder()
	var batch Batch
	s := Stream{Worker: "w0", Model: "llama"}
	group := int64(-1)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if n%batches == 0 {
			ix.Clear("w0", 0)
		}
		if err := d.Decode(payloads[n%batches], &batch); err != nil {
			b.Fatal(err)
		}
		ix.Apply(time.Time{}, s, &batch, &group)
		n++
	}
	b.ReportMetric(float64(n*events*blocks)/b.Elapsed().Seconds(), "blocks/s")
}
