package sched

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestCompareKey(t *testing.T) {
	negZero := math.Copysign(0, -1)
	tests := []struct {
		name string
		a, b entry
		want int
	}{
		{"promoted beats a higher tier", entry{promoted: true, seq: 9}, entry{strict: 7, seq: 1}, -1},
		{"higher tier first", entry{strict: 1, seq: 9}, entry{score: 1e9, seq: 1}, -1},
		{"higher score first", entry{score: 2, seq: 9}, entry{score: 1, seq: 1}, -1},
		{"lower seq first", entry{seq: 1}, entry{seq: 2}, -1},
		{"promoted entries order by tier", entry{promoted: true, seq: 1}, entry{promoted: true, strict: 1, seq: 2}, 1},
		{"+0 above -0", entry{score: 0, seq: 2}, entry{score: negZero, seq: 1}, -1},
		{"+Inf above finite", entry{score: math.Inf(1), seq: 2}, entry{score: math.MaxFloat64, seq: 1}, -1},
		{"NaN above +Inf", entry{score: math.NaN(), seq: 2}, entry{score: math.Inf(1), seq: 1}, -1},
		{"-NaN below -Inf", entry{score: math.Copysign(math.NaN(), -1), seq: 1}, entry{score: math.Inf(-1), seq: 2}, 1},
		{"identical keys tie", entry{strict: 3, score: 1.5, seq: 4}, entry{strict: 3, score: 1.5, seq: 4}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := compareKey(&tt.a, &tt.b); got != tt.want {
				t.Fatalf("compareKey = %d, want %d", got, tt.want)
			}
			if got := compareKey(&tt.b, &tt.a); got != -tt.want {
				t.Fatalf("reversed compareKey = %d, want %d", got, -tt.want)
			}
		})
	}
}

func TestTotalOrder(t *testing.T) {
	asc := []float64{
		math.Copysign(math.NaN(), -1), math.Inf(-1), -math.MaxFloat64, -1, -math.SmallestNonzeroFloat64,
		math.Copysign(0, -1), 0, math.SmallestNonzeroFloat64, 1, math.MaxFloat64, math.Inf(1), math.NaN(),
	}
	for i := 1; i < len(asc); i++ {
		if totalOrder(asc[i-1]) >= totalOrder(asc[i]) {
			t.Errorf("totalOrder(%v) >= totalOrder(%v)", asc[i-1], asc[i])
		}
	}
}

// heapTestItem is a minimal heapItem for testing indexedHeap on its own.
type heapTestItem struct {
	v   int
	pos int
}

func (x *heapTestItem) before(o *heapTestItem) bool { return x.v < o.v }
func (x *heapTestItem) setPos(i int)                { x.pos = i }

func TestIndexedHeap_RandomOperations(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 3))
	var h indexedHeap[*heapTestItem]
	var live []*heapTestItem
	check := func(step int) {
		t.Helper()
		if len(h) != len(live) {
			t.Fatalf("seed %d step %d: heap holds %d, want %d", seed, step, len(h), len(live))
		}
		for i, x := range h {
			if x.pos != i {
				t.Fatalf("seed %d step %d: heapTestItem at %d records %d", seed, step, i, x.pos)
			}
			if i > 0 && x.before(h[(i-1)/2]) {
				t.Fatalf("seed %d step %d: order broken at %d", seed, step, i)
			}
		}
	}
	for step := range 5000 {
		switch op := rng.IntN(4); {
		case op == 0 || len(live) == 0:
			x := &heapTestItem{v: rng.IntN(100)}
			h.push(x)
			live = append(live, x)
		case op == 1:
			i := rng.IntN(len(live))
			x := live[i]
			if got := h.removeAt(x.pos); got != x || x.pos != -1 {
				t.Fatalf("seed %d step %d: removeAt returned %v (pos %d)", seed, step, got, x.pos)
			}
			live = slices.Delete(live, i, i+1)
		case op == 2:
			x := live[rng.IntN(len(live))]
			x.v = rng.IntN(100)
			h.fix(x.pos)
		default:
			best := slices.MinFunc(live, func(a, b *heapTestItem) int { return a.v - b.v })
			if h[0].v != best.v {
				t.Fatalf("seed %d step %d: top %d, want %d", seed, step, h[0].v, best.v)
			}
		}
		check(step)
	}
	// Popping everything yields sorted order and leaves no references.
	backing := h[:cap(h)]
	var got []int
	for len(h) > 0 {
		got = append(got, h.removeAt(0).v)
	}
	if !slices.IsSorted(got) {
		t.Fatalf("seed %d: drain order %v not sorted", seed, got)
	}
	for i, x := range backing {
		if x != nil {
			t.Fatalf("seed %d: slot %d still references an heapTestItem", seed, i)
		}
	}
}
