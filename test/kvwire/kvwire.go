// Package kvwire encodes KV-event batches as vLLM and SGLang publish them
// (msgpack, positional or "type"-tagged shapes, integer or digest hashes):
// what the project's simulated engines and tests send to tollgate, whose
// kvevents package only decodes.
package kvwire

import (
	"bytes"
	"encoding/binary"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tollgate/tollgate/extproc/engine/kvevents"
)

// Shape selects an encoding of batches and events.
type Shape uint8

// Shapes a publisher may use; kvevents.Decoder accepts all of them.
const (
	// ShapeArray is vLLM before PR #42892 (and older SGLang): the batch and
	// every event are positional arrays, the event's tag first.
	ShapeArray Shape = iota
	// ShapeMap is the newest vLLM and SGLang: the batch is a map and every
	// event a map tagged by "type".
	ShapeMap
)

// Encoding configures Encode.
type Encoding struct {
	Shape Shape
	// ByteHashes sends each hash as an 8-byte big-endian digest instead of
	// an integer (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
	ByteHashes bool
}

// Encode encodes b as an engine publishes it.
func Encode(b *kvevents.Batch, enc Encoding) []byte {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	hash := func(h uint64) {
		if enc.ByteHashes {
			var d [8]byte
			binary.BigEndian.PutUint64(d[:], h)
			_ = e.EncodeBytes(d[:])
			return
		}
		_ = e.EncodeUint(h)
	}
	hashes := func(hs []uint64) {
		_ = e.EncodeArrayLen(len(hs))
		for _, h := range hs {
			hash(h)
		}
	}
	optStr := func(s string) {
		if s == "" {
			_ = e.EncodeNil()
			return
		}
		_ = e.EncodeString(s)
	}
	field := func(name string) {
		if enc.Shape == ShapeMap {
			_ = e.EncodeString(name)
		}
	}
	rank := func() {
		if b.HasRank {
			_ = e.EncodeUint(uint64(b.Rank))
		} else {
			_ = e.EncodeNil()
		}
	}
	if enc.Shape == ShapeMap {
		_ = e.EncodeMapLen(3)
	} else {
		_ = e.EncodeArrayLen(3)
	}
	field("ts")
	_ = e.EncodeFloat64(b.TS)
	field("events")
	_ = e.EncodeArrayLen(len(b.Events))
	for i := range b.Events {
		ev := &b.Events[i]
		var n int
		switch ev.Kind {
		case kvevents.KindStored:
			n = 7
		case kvevents.KindRemoved:
			n = 2
		case kvevents.KindCleared, kvevents.KindUnknown:
		}
		if enc.Shape == ShapeMap {
			_ = e.EncodeMapLen(n + 1)
			_ = e.EncodeString("type")
		} else {
			_ = e.EncodeArrayLen(n + 1)
		}
		_ = e.EncodeString(ev.Kind.String())
		switch ev.Kind {
		case kvevents.KindStored:
			field("block_hashes")
			hashes(ev.Hashes)
			field("parent_block_hash")
			if ev.HasParent {
				hash(ev.Parent)
			} else {
				_ = e.EncodeNil()
			}
			field("token_ids")
			_ = e.EncodeArrayLen(len(ev.Tokens))
			for _, t := range ev.Tokens {
				_ = e.EncodeUint(uint64(t))
			}
			field("block_size")
			if ev.BlockSize > 0 {
				_ = e.EncodeInt(int64(ev.BlockSize))
			} else {
				_ = e.EncodeNil()
			}
			field("lora_id")
			_ = e.EncodeNil()
			field("medium")
			optStr(ev.Medium)
			field("lora_name")
			optStr(ev.LoraName)
		case kvevents.KindRemoved:
			field("block_hashes")
			hashes(ev.Hashes)
			field("medium")
			optStr(ev.Medium)
		case kvevents.KindCleared, kvevents.KindUnknown:
		}
	}
	field("data_parallel_rank")
	rank()
	return buf.Bytes()
}
