package sched

import (
	"math"
	"time"
)

// bucket is a token bucket with continuous refill, as SMG's TokenBucket and
// its tenant ScopeBucket keep one: level rises at rate tokens per second up
// to capacity, takes lower it, returns raise it (never above capacity), and
// a settle may push it below zero (debt). Time is passed in.
type bucket struct {
	capacity float64
	rate     float64 // tokens per second; 0: no refill
	level    float64
	last     instant
}

// bucketSlack absorbs float rounding, so that a bucket refilled for
// exactly the time one token takes holds that token.
const bucketSlack = 1e-9

// newBucket returns a full bucket.
func newBucket(capacity, rate float64, t instant) bucket {
	return bucket{capacity: capacity, rate: rate, level: capacity, last: t}
}

// refill brings the level up to t.
func (b *bucket) refill(t instant) {
	if t > b.last {
		if b.rate > 0 && b.level < b.capacity {
			b.level = min(b.capacity, b.level+b.rate*(t-b.last).Seconds())
		}
		b.last = t
	}
}

// has reports whether n tokens are available at t.
func (b *bucket) has(t instant, n float64) bool {
	b.refill(t)
	return b.level+bucketSlack >= n
}

// take removes n tokens when they are available at t.
func (b *bucket) take(t instant, n float64) bool {
	if !b.has(t, n) {
		return false
	}
	b.level -= n
	return true
}

// give returns n tokens (a negative n charges them), capped at capacity;
// the level may go below zero.
func (b *bucket) give(t instant, n float64) {
	b.refill(t)
	b.level = min(b.capacity, b.level+n)
}

// wait returns how long after t until n tokens are available, and false
// when they never will be: n is above capacity, or nothing refills.
func (b *bucket) wait(t instant, n float64) (time.Duration, bool) {
	if b.has(t, n) {
		return 0, true
	}
	if n > b.capacity || b.rate <= 0 {
		return 0, false
	}
	secs := (n - b.level - bucketSlack) / b.rate
	if secs >= float64(math.MaxInt64)/1e9 {
		return 0, false
	}
	return max(1, time.Duration(math.Ceil(secs*1e9))), true
}
