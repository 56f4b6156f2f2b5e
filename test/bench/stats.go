package bench

import (
	"slices"
	"time"
)

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of d,
// or 0 for an empty slice. It sorts d in place.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[rank(len(d), p)]
}

// rank is the zero-based nearest-rank index of the p-th percentile of n
// sorted values: ceil(p/100 × n) − 1, clamped to [0, n−1].
func rank(n int, p float64) int {
	r := int(p / 100 * float64(n))
	if float64(r) < p/100*float64(n) {
		r++
	}
	return min(max(r-1, 0), n-1)
}

// Median returns the median of v (the mean of the two middle values for an
// even count), or 0 for an empty slice. v is not modified.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
