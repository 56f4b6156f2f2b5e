package kvevents_test

import (
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/test/kvwire"
)

func sampleBatch() *kvevents.Batch {
	return &kvevents.Batch{TS: 1.5, Rank: 2, HasRank: true, Events: []kvevents.Event{
		{Kind: kvevents.KindStored, Hashes: []uint64{0xFFFFFFFFFFFFFFF0, 7}, Tokens: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4, Medium: "GPU", LoraName: "ad"},
		{Kind: kvevents.KindStored, Hashes: []uint64{9}, Parent: 7, HasParent: true, Tokens: []uint32{9, 10, 11, 12}, BlockSize: 4},
		{Kind: kvevents.KindRemoved, Hashes: []uint64{7}, Medium: "CPU"},
		{Kind: kvevents.KindCleared},
	}}
}

var cmpBatch = cmp.Options{cmpopts.EquateEmpty()}

func TestDecodeRoundTrip(t *testing.T) {
	want := sampleBatch()
	for _, enc := range []kvwire.Encoding{
		{Shape: kvwire.ShapeArray}, {Shape: kvwire.ShapeArray, ByteHashes: true},
		{Shape: kvwire.ShapeMap}, {Shape: kvwire.ShapeMap, ByteHashes: true},
	} {
		var got kvevents.Batch
		if err := kvevents.NewDecoder().Decode(kvwire.Encode(want, enc), &got); err != nil {
			t.Fatalf("%+v: %v", enc, err)
		}
		if d := cmp.Diff(want, &got, cmpBatch); d != "" {
			t.Errorf("%+v (-want +got):\n%s", enc, d)
		}
	}
}

// encodeValue marshals v with msgpack, for hand-built payloads.
func encodeValue(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeShapes(t *testing.T) {
	digest := make([]byte, 32)
	digest[31], digest[24] = 0x05, 0x80 // last 8 bytes: 0x8000000000000005
	for _, tc := range []struct {
		name    string
		payload any
		want    kvevents.Batch
	}{{
		// vLLM 0.9-era: positional, only the first five BlockStored fields,
		// no rank; a signed negative hash (SGLang's hash_str_to_int64).
		name:    "positional short",
		payload: []any{2.0, []any{[]any{"BlockStored", []any{int64(-2)}, nil, []any{1, 2}, 2, nil}}},
		want:    kvevents.Batch{TS: 2, Events: []kvevents.Event{{Kind: kvevents.KindStored, Hashes: []uint64{0xFFFFFFFFFFFFFFFE}, Tokens: []uint32{1, 2}, BlockSize: 2}}},
	}, {
		// Newest vLLM: a map batch, "type"-tagged events, byte digests,
		// HMA fields, a field this decoder does not know.
		name: "tagged map",
		payload: map[string]any{"ts": 3.0, "data_parallel_rank": 1, "events": []any{
			map[string]any{"type": "BlockStored", "block_hashes": []any{digest}, "parent_block_hash": digest[16:],
				"token_ids": []any{5}, "block_size": 1, "group_idx": 1, "kv_cache_spec_kind": "sliding_window",
				"kv_cache_spec_sliding_window": 128, "locality": "LOCAL", "extra_keys": []any{[]any{"ad", []any{"mm", 3}}}},
			map[string]any{"block_hashes": []any{uint64(1)}, "type": "BlockRemoved", "group_idx": 1},
		}},
		want: kvevents.Batch{TS: 3, Rank: 1, HasRank: true, Events: []kvevents.Event{
			{Kind: kvevents.KindStored, Hashes: []uint64{0x8000000000000005}, Parent: 0x8000000000000005, HasParent: true, Tokens: []uint32{5}, BlockSize: 1,
				Group: 1, HasGroup: true, SpecKind: "sliding_window", ExtraKeys: true},
			{Kind: kvevents.KindRemoved, Hashes: []uint64{1}, Group: 1, HasGroup: true},
		}},
	}, {
		// An array batch holding tagged-map events (vLLM 0.26 with #42892).
		name:    "array of maps",
		payload: []any{1.0, []any{map[string]any{"type": "AllBlocksCleared"}}, 0},
		want:    kvevents.Batch{TS: 1, HasRank: true, Events: []kvevents.Event{{Kind: kvevents.KindCleared}}},
	}, {
		// LoRA name as the only extra key is not "extra".
		name:    "lora extra key",
		payload: []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{1}, 1, nil, "GPU", "ad", []any{[]any{"ad"}, nil}}}},
		want:    kvevents.Batch{TS: 1, Events: []kvevents.Event{{Kind: kvevents.KindStored, Hashes: []uint64{1}, Tokens: []uint32{1}, BlockSize: 1, Medium: "GPU", LoraName: "ad"}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var got kvevents.Batch
			if err := kvevents.NewDecoder().Decode(encodeValue(t, tc.payload), &got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(&tc.want, &got, cmpBatch); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestDecodeMalformed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"empty", nil},
		{"scalar", encodeValue(t, 5)},
		{"unknown tag", encodeValue(t, []any{1.0, []any{[]any{"BlockMoved"}}})},
		{"untagged map", encodeValue(t, []any{1.0, []any{map[string]any{"block_hashes": []any{}}}})},
		{"negative token", encodeValue(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}, 1}}})},
		{"huge token", encodeValue(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{int64(1) << 40}, 1}}})},
		{"float hash", encodeValue(t, []any{1.0, []any{[]any{"BlockRemoved", []any{1.5}}}})},
		{"nil hash", encodeValue(t, []any{1.0, []any{[]any{"BlockRemoved", []any{nil}}}})},
		{"bad rank", encodeValue(t, []any{1.0, []any{}, -1})},
		{"trailing", append(encodeValue(t, []any{1.0, []any{}}), 0xc0)},
		{"lying length", mustHex("dd7fffffff")},
		{"truncated", encodeValue(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{1, 2, 3}, 1}}})[:12]},
		{"deep", deep(100)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b kvevents.Batch
			err := kvevents.NewDecoder().Decode(tc.payload, &b)
			if !errors.Is(err, kvevents.ErrMalformed) {
				t.Errorf("Decode = %v, want ErrMalformed", err)
			}
		})
	}
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// deep returns a batch whose unknown third field nests n arrays.
func deep(n int) []byte {
	b := []byte{0x94, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90, 0xc0}
	for range n {
		b = append(b, 0x91)
	}
	return append(b, 0xc0)
}

func TestDecodeReusesBuffers(t *testing.T) {
	payload := kvwire.Encode(sampleBatch(), kvwire.Encoding{Shape: kvwire.ShapeMap})
	d := kvevents.NewDecoder()
	var b kvevents.Batch
	if err := d.Decode(payload, &b); err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(100, func() { _ = d.Decode(payload, &b) }); a > 0 {
		t.Errorf("Decode allocates %v times per batch once warm", a)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(kvwire.Encode(sampleBatch(), kvwire.Encoding{Shape: kvwire.ShapeArray}))
	f.Add(kvwire.Encode(sampleBatch(), kvwire.Encoding{Shape: kvwire.ShapeMap, ByteHashes: true}))
	f.Add(deep(20))
	f.Fuzz(func(t *testing.T, payload []byte) {
		var b kvevents.Batch
		d := kvevents.NewDecoder()
		if err := d.Decode(payload, &b); err != nil {
			if !errors.Is(err, kvevents.ErrMalformed) {
				t.Fatalf("error not wrapping ErrMalformed: %v", err)
			}
			return
		}
		// Whatever decodes applies to an index without panicking, and the
		// index stays consistent.
		ix := kvevents.NewIndex(1, 1<<10)
		var g int64 = -1
		ix.Apply(time.Time{}, kvevents.Stream{Worker: "w"}, &b, &g)
		if p, _ := ix.Size(); p < 0 || p > 1<<10 {
			t.Fatalf("index size %d", p)
		}
		ix.Clear("w", 0)
		if p, h := ix.Size(); p != 0 || h != 0 {
			t.Fatalf("after Clear: %d pairs, %d blocks", p, h)
		}
		// Re-encoding what was decoded decodes to the same.
		var again kvevents.Batch
		for _, shape := range []kvwire.Shape{kvwire.ShapeArray, kvwire.ShapeMap} {
			if err := d.Decode(kvwire.Encode(&b, kvwire.Encoding{Shape: shape}), &again); err != nil {
				t.Fatalf("re-encoded batch: %v", err)
			}
		}
	})
}

// TestDecodeTruncatesLongEvents: an event naming more than MaxEventTokens
// tokens or blocks keeps only that many, whole blocks of a store.
func TestDecodeTruncatesLongEvents(t *testing.T) {
	seq := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = i % 100
		}
		return out
	}
	stored := func(hashes, tokens int, bs any) []any {
		return []any{1.0, []any{[]any{"BlockStored", seq(hashes), nil, seq(tokens), bs}}}
	}
	for _, tc := range []struct {
		name               string
		payload            any
		hashes, tokens, bs int
		truncated          bool
	}{
		{"within the cap", stored(kvevents.MaxEventTokens/16, kvevents.MaxEventTokens, 16), kvevents.MaxEventTokens / 16, kvevents.MaxEventTokens, 16, false},
		{"whole blocks kept", stored(kvevents.MaxEventTokens/16+3, kvevents.MaxEventTokens+48, 16), kvevents.MaxEventTokens / 16, kvevents.MaxEventTokens, 16, true},
		{"inferred block size", stored(1000, 70000, nil), 936, 936 * 70, 70, true},
		{"counts disagree", stored(kvevents.MaxEventTokens/16, kvevents.MaxEventTokens+16, 16), kvevents.MaxEventTokens / 16, 0, 16, true},
		{"too many hashes", stored(kvevents.MaxEventTokens+1, kvevents.MaxEventTokens+1, 1), kvevents.MaxEventTokens, kvevents.MaxEventTokens, 1, true},
		{"removal", []any{1.0, []any{[]any{"BlockRemoved", seq(kvevents.MaxEventTokens + 1)}}}, kvevents.MaxEventTokens, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b kvevents.Batch
			if err := kvevents.NewDecoder().Decode(encodeValue(t, tc.payload), &b); err != nil {
				t.Fatal(err)
			}
			ev := b.Events[0]
			if len(ev.Hashes) != tc.hashes || len(ev.Tokens) != tc.tokens || ev.BlockSize != tc.bs || ev.Truncated != tc.truncated {
				t.Errorf("kept %d hashes, %d tokens, block size %d, truncated %v; want %d, %d, %d, %v",
					len(ev.Hashes), len(ev.Tokens), ev.BlockSize, ev.Truncated, tc.hashes, tc.tokens, tc.bs, tc.truncated)
			}
		})
	}
}
