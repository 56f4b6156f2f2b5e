package kvevents

import (
	"encoding/binary"
	"math"
	"time"
)

// verdict is what a stream does with a sequence number.
type verdict uint8

const (
	vApply     verdict = iota // the next batch
	vDuplicate                // already applied
	vGap                      // batches are missing before it
	vRestart                  // the publisher restarted (the sequence went back)
)

// tracker follows one publisher's sequence numbers. vLLM numbers batches
// from 0 per publisher process, +1 per batch.
type tracker struct {
	started bool
	last    uint64
	// floor: live numbers in [floor, last] were already applied through a
	// replay and are duplicates, not a restart.
	floor uint64
}

func (t *tracker) check(seq uint64) verdict {
	switch {
	case !t.started:
		if seq == 0 {
			return vApply
		}
		return vGap
	case seq == t.last+1:
		return vApply
	case seq > t.last:
		return vGap
	case seq >= t.floor:
		return vDuplicate
	}
	return vRestart
}

// applied moves the tracker past seq.
func (t *tracker) applied(seq uint64) {
	if !t.started || seq > t.last {
		t.last, t.floor = seq, seq
	}
	t.started = true
}

// reset forgets the publisher (after a restart).
func (t *tracker) reset() { *t = tracker{} }

// endOfReplay is the sequence number of the replay socket's end marker.
const endOfReplay = math.MaxUint64

// parseSeq reads an 8-byte big-endian sequence number.
func parseSeq(b []byte) (uint64, bool) {
	if len(b) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(b), true
}

// streamState is one publisher's sync state, driven by the subscriber that
// owns it; it is not safe for concurrent use.
type streamState struct {
	Stream
	tr     tracker
	group  int64
	synced bool
	since  time.Time // when the stream went out of sync
	// down is why the stream's connection last failed, "" once it received
	// a message since (or before its first attempt): connection failures
	// are logged once per change.
	down string
	// truncated is set once an oversized event was logged.
	truncated bool
}

func newStreamState(s Stream, now time.Time) *streamState {
	return &streamState{Stream: s, group: -1, since: now}
}
