package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// MaxPayloadBytes bounds one batch payload; larger ones are dropped.
const MaxPayloadBytes = 16 << 20

// MaxEventTokens bounds the token ids, and the block hashes, kept of one
// event. Engines send a few blocks per event (a few KB); one nears the cap
// only when it caches that many tokens of a prompt in one step. Beyond it
// the event is truncated (Event.Truncated), so that neither memory nor the
// index's work per event grows with the payload.
const MaxEventTokens = 1 << 16

// maxDepth bounds the nesting of values the decoder skips.
const maxDepth = 16

// Kind is an event's type.
type Kind uint8

// Event kinds, by their wire tags.
const (
	KindUnknown Kind = iota
	KindStored       // BlockStored
	KindRemoved      // BlockRemoved
	KindCleared      // AllBlocksCleared
)

// String returns the wire tag of k.
func (k Kind) String() string {
	switch k {
	case KindStored:
		return "BlockStored"
	case KindRemoved:
		return "BlockRemoved"
	case KindCleared:
		return "AllBlocksCleared"
	case KindUnknown:
	}
	return "unknown"
}

// Event is one decoded KV-cache event. Slices are reused by the next
// Decode into the same Batch.
type Event struct {
	Kind Kind
	// Hashes are the engine's block hashes, as 64-bit values: integers as
	// sent (signed ones as their two's complement), byte digests by their
	// last 8 bytes, big-endian.
	Hashes    []uint64
	Parent    uint64
	HasParent bool
	Tokens    []uint32
	BlockSize int
	LoraName  string
	Medium    string
	Group     int64
	HasGroup  bool
	// SpecKind is kv_cache_spec_kind ("full_attention", …), empty when absent.
	SpecKind string
	// ExtraKeys is set when some block carries hash inputs beyond its
	// tokens and LoRA name (multimodal hashes, cache salt, …).
	ExtraKeys bool
	// Truncated is set when the event named more than MaxEventTokens token
	// ids or block hashes. A BlockStored then holds the whole blocks of its
	// first MaxEventTokens tokens (no tokens when its counts disagree, so
	// that it is refused as the whole would be); a BlockRemoved holds its
	// first MaxEventTokens hashes.
	Truncated bool
}

// Batch is one decoded event batch.
type Batch struct {
	TS      float64
	Events  []Event
	Rank    uint32
	HasRank bool
}

// Decoder decodes vLLM and SGLang event batches: the batch as an array or a
// map, each event as a positional array with its tag first or as a map
// tagged by "type". A Decoder is not safe for concurrent use; reuse one per
// subscriber so that its buffers are reused.
type Decoder struct {
	payload  []byte
	r        bytes.Reader
	dec      *msgpack.Decoder
	buf      []byte
	interned []string
	// tokens and hashes count the token ids and block hashes the current
	// event named, kept or not.
	tokens, hashes int
}

// NewDecoder returns a Decoder.
func NewDecoder() *Decoder {
	d := &Decoder{}
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}

// ErrMalformed wraps every decoding error.
var ErrMalformed = errors.New("kvevents: malformed payload")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Decode decodes payload into b, reusing b's slices.
func (d *Decoder) Decode(payload []byte, b *Batch) error {
	if len(payload) > MaxPayloadBytes {
		return malformed("payload of %d bytes exceeds %d", len(payload), MaxPayloadBytes)
	}
	d.payload = payload
	d.r.Reset(payload)
	d.dec.Reset(&d.r)
	b.TS, b.Rank, b.HasRank = 0, 0, false
	b.Events = b.Events[:0]
	if err := d.batch(b); err != nil {
		return err
	}
	if d.r.Len() != 0 {
		return malformed("%d trailing bytes", d.r.Len())
	}
	return nil
}

func (d *Decoder) batch(b *Batch) error {
	c, err := d.dec.PeekCode()
	if err != nil {
		return malformed("empty payload")
	}
	if isArray(c) {
		n, err := d.length(true)
		if err != nil {
			return err
		}
		for i := range n {
			if err := d.batchField(b, i, ""); err != nil {
				return err
			}
		}
		return nil
	}
	if !isMap(c) {
		return malformed("batch is neither an array nor a map (code %#x)", c)
	}
	n, err := d.length(false)
	if err != nil {
		return err
	}
	for range n {
		key, err := d.strBytes()
		if err != nil {
			return err
		}
		if err := d.batchField(b, -1, batchKey(key)); err != nil {
			return err
		}
	}
	return nil
}

// batchKey returns the known batch key spelled by b, or "".
func batchKey(b []byte) string {
	for _, k := range []string{"ts", "events", "data_parallel_rank"} {
		if string(b) == k {
			return k
		}
	}
	return ""
}

// batchField decodes field i (positional) or key of a batch.
func (d *Decoder) batchField(b *Batch, i int, key string) error {
	switch {
	case i == 0 || key == "ts":
		f, err := d.dec.DecodeFloat64()
		if err != nil || math.IsNaN(f) {
			return malformed("ts: not a number")
		}
		b.TS = f
	case i == 1 || key == "events":
		return d.events(b)
	case i == 2 || key == "data_parallel_rank":
		if d.nilNext() {
			return nil
		}
		r, err := d.dec.DecodeInt64()
		if err != nil || r < 0 || r > math.MaxUint32 {
			return malformed("data_parallel_rank: not a rank")
		}
		b.Rank, b.HasRank = uint32(r), true
	default:
		return d.skip(0)
	}
	return nil
}

func (d *Decoder) events(b *Batch) error {
	n, err := d.length(true)
	if err != nil {
		return malformed("events: %v", err)
	}
	for range n {
		if len(b.Events) < cap(b.Events) {
			b.Events = b.Events[:len(b.Events)+1]
		} else {
			b.Events = append(b.Events, Event{})
		}
		ev := &b.Events[len(b.Events)-1]
		*ev = Event{Hashes: ev.Hashes[:0], Tokens: ev.Tokens[:0]}
		d.tokens, d.hashes = 0, 0
		if err := d.event(ev); err != nil {
			return err
		}
		if ev.Truncated && ev.Kind == KindStored {
			trimStored(ev, d.tokens, d.hashes)
		}
	}
	return nil
}

// storedFields are BlockStored's fields in positional order (after the tag);
// BlockRemoved's positional order is removedFields.
var (
	storedFields = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
		"medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"}
	removedFields = []string{"block_hashes", "medium", "group_idx"}
	clearedFields = []string{"medium"}
)

func (d *Decoder) event(ev *Event) error {
	c, err := d.dec.PeekCode()
	if err != nil {
		return malformed("truncated event")
	}
	if isArray(c) {
		n, err := d.length(true)
		if err != nil {
			return err
		}
		if n == 0 {
			return malformed("empty event")
		}
		tag, err := d.strBytes()
		if err != nil {
			return malformed("event tag: %v", err)
		}
		if ev.Kind = kindOf(tag); ev.Kind == KindUnknown {
			return malformed("unknown event type %.40q", tag)
		}
		fields := storedFields
		switch ev.Kind {
		case KindRemoved:
			fields = removedFields
		case KindCleared:
			fields = clearedFields
		case KindStored, KindUnknown: // storedFields; unknown returned above
		}
		for i := 1; i < n; i++ {
			key := ""
			if i-1 < len(fields) {
				key = fields[i-1]
			}
			if err := d.eventField(ev, key); err != nil {
				return err
			}
		}
		return nil
	}
	if !isMap(c) {
		return malformed("event is neither an array nor a map (code %#x)", c)
	}
	n, err := d.length(false)
	if err != nil {
		return err
	}
	for range n {
		kb, err := d.strBytes()
		if err != nil {
			return malformed("event key: %v", err)
		}
		key := fieldName(kb)
		if key == "type" {
			tag, err := d.strBytes()
			if err != nil {
				return malformed("event type: %v", err)
			}
			if ev.Kind = kindOf(tag); ev.Kind == KindUnknown {
				return malformed("unknown event type %.40q", tag)
			}
			continue
		}
		if err := d.eventField(ev, key); err != nil {
			return err
		}
	}
	if ev.Kind == KindUnknown {
		return malformed("event without a type")
	}
	return nil
}

// fieldName returns the known field name spelled by b, or "" (so that no
// string is allocated per key).
func fieldName(b []byte) string {
	if string(b) == "type" {
		return "type"
	}
	for _, f := range storedFields {
		if string(b) == f {
			return f
		}
	}
	return ""
}

func kindOf(tag []byte) Kind {
	switch string(tag) {
	case "BlockStored":
		return KindStored
	case "BlockRemoved":
		return KindRemoved
	case "AllBlocksCleared":
		return KindCleared
	}
	return KindUnknown
}

func (d *Decoder) eventField(ev *Event, key string) error {
	var err error
	switch key {
	case "block_hashes":
		n, lerr := d.length(true)
		if lerr != nil {
			return malformed("block_hashes: %v", lerr)
		}
		for range n {
			h, herr := d.hash()
			if herr != nil {
				return herr
			}
			if len(ev.Hashes) < MaxEventTokens {
				ev.Hashes = append(ev.Hashes, h)
			} else {
				ev.Truncated = true
			}
		}
		d.hashes += n
	case "parent_block_hash":
		if d.nilNext() {
			return nil
		}
		ev.Parent, err = d.hash()
		ev.HasParent = err == nil
	case "token_ids":
		n, lerr := d.length(true)
		if lerr != nil {
			return malformed("token_ids: %v", lerr)
		}
		if terr := d.tokenIDs(n, ev); terr != nil {
			return terr
		}
	case "block_size":
		if d.nilNext() {
			return nil
		}
		v, verr := d.dec.DecodeInt64()
		if verr != nil || v <= 0 || v > 1<<20 {
			return malformed("block_size: not a block size")
		}
		ev.BlockSize = int(v)
	case "medium":
		ev.Medium, err = d.optStr()
	case "lora_name":
		ev.LoraName, err = d.optStr()
	case "kv_cache_spec_kind":
		ev.SpecKind, err = d.optStr()
	case "group_idx":
		if d.nilNext() {
			return nil
		}
		ev.Group, err = d.dec.DecodeInt64()
		ev.HasGroup = err == nil
	case "extra_keys":
		err = d.extraKeys(ev)
	default:
		return d.skip(0)
	}
	if err != nil {
		return malformed("%s: %v", key, err)
	}
	return nil
}

// extraKeys notes whether any block's extra keys hold more than LoRA names.
func (d *Decoder) extraKeys(ev *Event) error {
	if d.nilNext() {
		return nil
	}
	n, err := d.length(true)
	if err != nil {
		return err
	}
	for range n {
		if d.nilNext() {
			continue
		}
		m, err := d.length(true)
		if err != nil {
			return err
		}
		for range m {
			c, err := d.dec.PeekCode()
			if err != nil {
				return err
			}
			if msgpcode.IsString(c) {
				if _, err := d.strBytes(); err != nil {
					return err
				}
				// A LoRA name is already in the seed; anything else is not.
				continue
			}
			ev.ExtraKeys = true
			if err := d.skip(0); err != nil {
				return err
			}
		}
	}
	return nil
}

// hash reads one block hash: an integer, or a byte or string digest whose
// last 8 bytes are the big-endian value (vLLM's int.from_bytes & 2^64-1).
func (d *Decoder) hash() (uint64, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, malformed("truncated hash")
	}
	if msgpcode.IsBin(c) || msgpcode.IsString(c) {
		n, err := d.bytesLen()
		if err != nil || n == 0 {
			return 0, malformed("hash: empty or truncated digest")
		}
		var buf [8]byte
		if n > 8 {
			if err := d.discard(n - 8); err != nil {
				return 0, err
			}
			n = 8
		}
		if err := d.dec.ReadFull(buf[8-n:]); err != nil {
			return 0, malformed("hash: truncated digest")
		}
		return binary.BigEndian.Uint64(buf[:]), nil
	}
	h, size, _, ok := intAt(d.payload[d.pos():])
	if !ok {
		return 0, malformed("hash: neither an integer nor bytes (code %#x)", c)
	}
	if err := d.advance(size); err != nil {
		return 0, malformed("hash: %v", err)
	}
	return h, nil
}

// bytesLen reads the header of a bin or str value and returns its length,
// bounded by what is left of the payload.
func (d *Decoder) bytesLen() (int, error) {
	n, err := d.dec.DecodeBytesLen()
	if err != nil || n < 0 || n > d.r.Len() {
		return 0, malformed("string or bytes length exceeds the payload")
	}
	return n, nil
}

func (d *Decoder) discard(n int) error {
	if n > d.r.Len() {
		return malformed("truncated")
	}
	_, err := d.r.Seek(int64(n), 1)
	return err
}

// strBytes reads a string into the decoder's scratch buffer, valid until
// the next read.
func (d *Decoder) strBytes() ([]byte, error) {
	c, err := d.dec.PeekCode()
	if err != nil || !msgpcode.IsString(c) {
		return nil, malformed("not a string")
	}
	n, err := d.bytesLen()
	if err != nil {
		return nil, err
	}
	d.buf = slices.Grow(d.buf[:0], n)[:n]
	if err := d.dec.ReadFull(d.buf); err != nil {
		return nil, malformed("truncated string")
	}
	return d.buf, nil
}

// str reads a string, reusing the last one read when equal (model and LoRA
// names, media and kinds repeat in every event).
func (d *Decoder) str() (string, error) {
	b, err := d.strBytes()
	if err != nil {
		return "", err
	}
	for _, s := range d.interned {
		if s == string(b) {
			return s, nil
		}
	}
	s := string(b)
	if len(d.interned) < 8 {
		d.interned = append(d.interned, s)
	}
	return s, nil
}

// optStr reads a string or nil.
func (d *Decoder) optStr() (string, error) {
	if d.nilNext() {
		return "", nil
	}
	return d.str()
}

// nilNext consumes a nil and reports whether there was one.
func (d *Decoder) nilNext() bool {
	c, err := d.dec.PeekCode()
	if err == nil && c == msgpcode.Nil {
		_ = d.dec.DecodeNil()
		return true
	}
	return false
}

// length reads an array (or map) header, bounded by what is left of the
// payload: every element takes at least one byte.
func (d *Decoder) length(array bool) (int, error) {
	var n int
	var err error
	if array {
		n, err = d.dec.DecodeArrayLen()
	} else {
		n, err = d.dec.DecodeMapLen()
	}
	if err != nil || n < 0 {
		return 0, malformed("expected an %s", map[bool]string{true: "array", false: "map"}[array])
	}
	if n > d.r.Len() {
		return 0, malformed("length %d exceeds the payload", n)
	}
	return n, nil
}

// skip skips one value, refusing deep nesting.
func (d *Decoder) skip(depth int) error {
	c, err := d.dec.PeekCode()
	if err != nil {
		return malformed("truncated")
	}
	switch {
	case isArray(c) || isMap(c):
		if depth >= maxDepth {
			return malformed("nesting deeper than %d", maxDepth)
		}
		n, err := d.length(isArray(c))
		if err != nil {
			return err
		}
		if isMap(c) {
			n *= 2
		}
		for range n {
			if err := d.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case msgpcode.IsString(c) || msgpcode.IsBin(c):
		n, err := d.bytesLen()
		if err != nil {
			return err
		}
		return d.discard(n)
	}
	if err := d.dec.Skip(); err != nil {
		return malformed("%v", err)
	}
	return nil
}

func isArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isMap(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}

// intAt reads the msgpack integer at the start of b: its value as 64 bits
// (a negative value as its two's complement), its encoded size, whether it
// is negative. ok is false for anything but a complete integer.
func intAt(b []byte) (v uint64, size int, neg, ok bool) {
	if len(b) == 0 {
		return 0, 0, false, false
	}
	c := b[0]
	switch {
	case c <= 0x7f:
		return uint64(c), 1, false, true
	case c >= 0xe0: // negative fixint
		return uint64(int64(int8(c))), 1, true, true
	}
	switch c {
	case msgpcode.Uint8, msgpcode.Int8:
		size = 2
	case msgpcode.Uint16, msgpcode.Int16:
		size = 3
	case msgpcode.Uint32, msgpcode.Int32:
		size = 5
	case msgpcode.Uint64, msgpcode.Int64:
		size = 9
	default:
		return 0, 0, false, false
	}
	if len(b) < size {
		return 0, 0, false, false
	}
	switch c {
	case msgpcode.Uint8:
		v = uint64(b[1])
	case msgpcode.Int8:
		v, neg = uint64(int64(int8(b[1]))), b[1] >= 0x80
	case msgpcode.Uint16:
		v = uint64(binary.BigEndian.Uint16(b[1:]))
	case msgpcode.Int16:
		x := int16(binary.BigEndian.Uint16(b[1:]))
		v, neg = uint64(int64(x)), x < 0
	case msgpcode.Uint32:
		v = uint64(binary.BigEndian.Uint32(b[1:]))
	case msgpcode.Int32:
		x := int32(binary.BigEndian.Uint32(b[1:]))
		v, neg = uint64(int64(x)), x < 0
	case msgpcode.Uint64:
		v = binary.BigEndian.Uint64(b[1:])
	case msgpcode.Int64:
		v = binary.BigEndian.Uint64(b[1:])
		neg = int64(v) < 0
	}
	return v, size, neg, true
}

// pos is the decoder's offset in the payload.
func (d *Decoder) pos() int { return len(d.payload) - d.r.Len() }

// advance moves the decoder n bytes on.
func (d *Decoder) advance(n int) error {
	_, err := d.r.Seek(int64(d.pos()+n), 0)
	return err
}

// tokenIDs reads n token ids straight from the payload (they are the bulk
// of every BlockStored, too many for the generic decoder's per-value
// reads) and appends those within MaxEventTokens to ev.Tokens.
func (d *Decoder) tokenIDs(n int, ev *Event) error {
	b := d.payload[d.pos():]
	keep := max(0, min(n, MaxEventTokens-len(ev.Tokens)))
	ev.Truncated = ev.Truncated || keep < n
	i := 0
	for j := range n {
		v, size, neg, ok := intAt(b[i:])
		if !ok || neg || v > math.MaxUint32 {
			return malformed("token_ids: not a token id")
		}
		if j < keep {
			ev.Tokens = append(ev.Tokens, uint32(v))
		}
		i += size
	}
	d.tokens += n
	if err := d.advance(i); err != nil {
		return malformed("token_ids: %v", err)
	}
	return nil
}

// trimStored cuts a truncated BlockStored that named tokens token ids and
// hashes blocks to the whole blocks of the tokens it kept, or to no tokens
// when the counts disagree.
func trimStored(ev *Event, tokens, hashes int) {
	bs := ev.BlockSize
	if bs == 0 && hashes > 0 {
		bs = tokens / hashes
	}
	if bs <= 0 || tokens != bs*hashes {
		ev.Tokens = ev.Tokens[:0]
		return
	}
	k := min(len(ev.Hashes), len(ev.Tokens)/bs)
	ev.Hashes, ev.Tokens, ev.BlockSize = ev.Hashes[:k], ev.Tokens[:k*bs], bs
}
