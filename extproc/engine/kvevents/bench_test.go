package kvevents_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/prefix"
	"github.com/tollgate/tollgate/test/kvwire"
)

// ingestPayloads returns n distinct vLLM batches (array shape, integer
// hashes) of events BlockStored events of blocks 16-token blocks each,
// chained within a batch.
func ingestPayloads(n, events, blocks int) [][]byte {
	out := make([][]byte, n)
	tok := uint32(1)
	h := uint64(1)
	for i := range out {
		b := kvevents.Batch{TS: 1, Events: make([]kvevents.Event, events)}
		for e := range b.Events {
			ev := kvevents.Event{Kind: kvevents.KindStored, BlockSize: 16, Medium: "GPU"}
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
		out[i] = kvwire.Encode(&b, kvwire.Encoding{Shape: kvwire.ShapeArray})
	}
	return out
}

// BenchmarkIngest decodes and applies batches of 16 BlockStored events of
// 4 blocks (16 tokens each) to one stream, clearing it every 64 batches;
// blocks/s is the ingest rate on one core.
func BenchmarkIngest(b *testing.B) {
	const batches, events, blocks = 64, 16, 4
	payloads := ingestPayloads(batches, events, blocks)
	ix := kvevents.NewIndex(16, 0)
	d := kvevents.NewDecoder()
	var batch kvevents.Batch
	s := kvevents.Stream{Worker: "w0"}
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

// floodPayload encodes one batch of BlockStored events of 16-token blocks
// with the given token counts; token ids are below 128 (one byte each), so
// that a payload under MaxPayloadBytes carries as many as it can.
func floodPayload(eventTokens ...int) []byte {
	var b kvevents.Batch
	h := uint64(1) << 20
	for _, n := range eventTokens {
		ev := kvevents.Event{Kind: kvevents.KindStored, BlockSize: 16, Medium: "GPU", Tokens: make([]uint32, n)}
		for i := range ev.Tokens {
			ev.Tokens[i] = uint32(i*7+len(b.Events)) % 128
		}
		for range n / 16 {
			ev.Hashes = append(ev.Hashes, h)
			h++
		}
		b.Events = append(b.Events, ev)
	}
	p := kvwire.Encode(&b, kvwire.Encoding{Shape: kvwire.ShapeArray})
	if len(p) > kvevents.MaxPayloadBytes {
		panic("flood payload over the payload cap")
	}
	return p
}

// BenchmarkLookupDuringFlood measures the latency of exact-index lookups
// (an 8k-token prompt over 8 workers) made every 200µs while one stream
// floods the index with maximum-size batches: "huge-event" is one event of
// 12M token ids, "max-events" a batch of 180 events of 64k tokens; "fresh"
// clears the stream between batches so that every block is stored anew.
// Latency counts from when each lookup was due, so that a stalled lookup
// also delays the ones behind it; call- latency is the Lookup call alone.
// It reports p50, p99 and max in µs.
func BenchmarkLookupDuringFlood(b *testing.B) {
	const bs = 16
	many := make([]int, 180)
	for i := range many {
		many[i] = 1 << 16
	}
	huge, maxEvents := floodPayload(12_000_000), floodPayload(many...)
	cleared := kvwire.Encode(&kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.KindCleared}}}, kvwire.Encoding{Shape: kvwire.ShapeArray})
	for _, fl := range []struct {
		name    string
		payload []byte
		fresh   bool
	}{{"idle", nil, false}, {"huge-event", huge, false}, {"max-events", maxEvents, false}, {"max-events-fresh", maxEvents, true}} {
		b.Run(fl.name, func(b *testing.B) {
			ix := kvevents.NewIndex(bs, 0)
			prompt := make([]uint32, 8192)
			for i := range prompt {
				prompt[i] = uint32(1000 + i)
			}
			var victims kvevents.Batch
			victims.Events = []kvevents.Event{{Kind: kvevents.KindStored, BlockSize: bs, Tokens: prompt}}
			for i := range len(prompt) / bs {
				victims.Events[0].Hashes = append(victims.Events[0].Hashes, uint64(i))
			}
			for w := range 8 {
				g := int64(-1)
				ix.Apply(time.Time{}, kvevents.Stream{Worker: fmt.Sprintf("v%d", w)}, &victims, &g)
			}
			q := prefix.HashTokens("", prompt, bs, nil)
			stop, done := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				if fl.payload == nil {
					return
				}
				d, g := kvevents.NewDecoder(), int64(-1)
				var batch kvevents.Batch
				apply := func(p []byte) {
					if err := d.Decode(p, &batch); err != nil {
						panic(err)
					}
					ix.Apply(time.Time{}, kvevents.Stream{Worker: "flood"}, &batch, &g)
				}
				for {
					select {
					case <-stop:
						return
					default:
					}
					apply(fl.payload)
					if fl.fresh {
						apply(cleared)
					}
				}
			}()
			const every = 200 * time.Microsecond
			var lat, call []time.Duration
			var dst []sched.CachedTokens
			start := time.Now()
			i := 0
			for b.Loop() {
				due := start.Add(time.Duration(i) * every)
				i++
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
				t0 := time.Now()
				dst, _ = ix.Lookup(q, bs, nil, dst[:0], nil)
				lat = append(lat, time.Since(due))
				call = append(call, time.Since(t0))
			}
			b.StopTimer()
			close(stop)
			<-done
			if len(dst) != 8 {
				b.Fatalf("lookup found %d workers, want 8", len(dst))
			}
			for _, m := range []struct {
				name string
				d    []time.Duration
			}{{"", lat}, {"call-", call}} {
				slices.Sort(m.d)
				us := func(q float64) float64 { return float64(m.d[int(q*float64(len(m.d)-1))]) / 1e3 }
				b.ReportMetric(us(0.5), m.name+"p50-µs")
				b.ReportMetric(us(0.99), m.name+"p99-µs")
				b.ReportMetric(us(1), m.name+"max-µs")
			}
		})
	}
}
