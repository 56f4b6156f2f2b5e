package bench

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tt := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{ms(7), 99, 7 * time.Millisecond},
		{ms(5, 1, 4, 2, 3), 50, 3 * time.Millisecond},
		{ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 90, 9 * time.Millisecond},
		{ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 99, 10 * time.Millisecond},
		{ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 100, 10 * time.Millisecond},
		{ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 1, time.Millisecond},
	} {
		if got := Percentile(tt.in, tt.p); got != tt.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tt.in, tt.p, got, tt.want)
		}
	}
}

func TestMedian(t *testing.T) {
	in := []float64{5, 1, 3}
	if got := Median(in); got != 3 {
		t.Errorf("odd count: %v, want 3", got)
	}
	if in[0] != 5 {
		t.Error("Median reordered its argument")
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("even count: %v, want 2.5", got)
	}
	if got := Median(nil); got != 0 {
		t.Errorf("empty: %v, want 0", got)
	}
}

func TestMemStatsLines(t *testing.T) {
	text := "heap profile: 1: 2 [3: 4] @ heap/1048576\n\n# runtime.MemStats\n# Alloc = 100\n# HeapInuse = 4096\n# Stack = 8192 / 16384\n# MSpan = 1 / 2\n"
	stack, heap := memStatsLines(text)
	if stack != 8192 || heap != 4096 {
		t.Errorf("stack %v heap %v, want 8192 and 4096", stack, heap)
	}
}
