package sched

import (
	"cmp"
	"math"
)

// heapItem is an element of an indexedHeap: it orders itself against another
// element and records its own position, so that it can be fixed or removed
// in O(log n) without a search.
type heapItem[T any] interface {
	// before reports whether the receiver must sit above o.
	before(o T) bool
	// setPos records the element's index in the heap, or -1 once removed.
	setPos(i int)
}

// indexedHeap is a binary heap whose best element (by before) is at index
// 0 and whose elements know their own index. push, removeAt and fix are
// O(log n); the best element is read in O(1). It is the container/heap
// algorithm without the interface boxing.
type indexedHeap[T heapItem[T]] []T

// push adds x.
func (h *indexedHeap[T]) push(x T) {
	n := len(*h)
	*h = append(*h, x)
	x.setPos(n)
	h.up(n)
}

// removeAt removes and returns the element at index i.
func (h *indexedHeap[T]) removeAt(i int) T {
	s := *h
	n := len(s) - 1
	x := s[i]
	if i != n {
		s[i] = s[n]
		s[i].setPos(i)
	}
	var zero T
	s[n] = zero // drop the reference so a pooled heap retains nothing
	*h = s[:n]
	if i != n {
		h.fix(i)
	}
	x.setPos(-1)
	return x
}

// fix restores heap order after the element at index i changed its key.
func (h indexedHeap[T]) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h indexedHeap[T]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h[j].before(h[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts the element at i0 towards the leaves and reports whether it moved.
func (h indexedHeap[T]) down(i0 int) bool {
	n := len(h)
	i := i0
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && h[r].before(h[j]) {
			j = r
		}
		if !h[j].before(h[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

func (h indexedHeap[T]) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].setPos(i)
	h[j].setPos(j)
}

// compareKey orders two queued entries by the queue key: a promoted entry
// first, then the higher strict tier, the higher score (IEEE 754 total
// order, as Rust's f64::total_cmp), and the lower enqueue sequence. It
// returns a negative number when a goes first, positive when b goes first,
// and 0 only for identical keys.
func compareKey(a, b *entry) int { return a.sortKey().compare(b.sortKey()) }

// sortKey is the queue key in a form that compares as plain integers.
type sortKey struct {
	tier  uint64 // promoted<<63 | strict, higher first
	score int64  // totalOrder(score), higher first
	seq   uint64 // lower first
}

func (e *entry) sortKey() sortKey {
	t := e.strict
	if e.promoted {
		t |= 1 << 63
	}
	return sortKey{tier: t, score: totalOrder(e.score), seq: e.seq}
}

// compare returns a negative number when k goes before o, positive when
// after, 0 when equal.
func (k sortKey) compare(o sortKey) int {
	if k.tier != o.tier {
		return cmp.Compare(o.tier, k.tier)
	}
	if k.score != o.score {
		return cmp.Compare(o.score, k.score)
	}
	return cmp.Compare(k.seq, o.seq)
}

// totalOrder maps a float64 to an int64 whose signed order is the IEEE 754
// totalOrder predicate: -NaN < -Inf < … < -0 < +0 < … < +Inf < +NaN.
func totalOrder(f float64) int64 {
	k := int64(math.Float64bits(f))
	return k ^ int64(uint64(k>>63)>>1)
}

// before orders entries inside a lane heap.
func (e *entry) before(o *entry) bool { return compareKey(e, o) < 0 }

// setPos records e's index in its lane heap.
func (e *entry) setPos(i int) { e.q.heapIndex = i }
