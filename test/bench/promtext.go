package bench

import (
	"bufio"
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Sample is one sample of the Prometheus text exposition format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// ParsePromText parses the samples of a Prometheus text exposition
// (comments and blank lines skipped, timestamps ignored). It reports the
// first malformed line.
func ParsePromText(text string) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' {
			continue
		}
		s, err := parseSample(l)
		if err != nil {
			return nil, fmt.Errorf("bench: metrics line %d %q: %w", line, l, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(l string) (Sample, error) {
	s := Sample{}
	i := strings.IndexAny(l, "{ \t")
	if i <= 0 {
		return s, fmt.Errorf("no value")
	}
	s.Name, l = l[:i], l[i:]
	if l[0] == '{' {
		labels, rest, err := parseLabels(l[1:])
		if err != nil {
			return s, err
		}
		s.Labels, l = labels, rest
	}
	f := strings.Fields(l)
	if len(f) == 0 || len(f) > 2 {
		return s, fmt.Errorf("want a value and an optional timestamp")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, fmt.Errorf("value: %w", err)
	}
	s.Value = v
	return s, nil
}

// parseLabels parses `name="value",...}` and returns what follows the brace.
func parseLabels(l string) (map[string]string, string, error) {
	labels := map[string]string{}
	for {
		l = strings.TrimLeft(l, " ,")
		if l == "" {
			return nil, "", fmt.Errorf("unterminated labels")
		}
		if l[0] == '}' {
			return labels, l[1:], nil
		}
		eq := strings.IndexByte(l, '=')
		if eq <= 0 || len(l) < eq+2 || l[eq+1] != '"' {
			return nil, "", fmt.Errorf("malformed label")
		}
		name := strings.TrimSpace(l[:eq])
		l = l[eq+1:]
		q, err := strconv.QuotedPrefix(l)
		if err != nil {
			return nil, "", fmt.Errorf("label %s: %w", name, err)
		}
		v, err := strconv.Unquote(q)
		if err != nil {
			return nil, "", fmt.Errorf("label %s: %w", name, err)
		}
		labels[name] = v
		l = l[len(q):]
	}
}

// SumSamples adds the values of every sample named name; found is false
// when there is none.
func SumSamples(samples []Sample, name string) (sum float64, found bool) {
	for _, s := range samples {
		if s.Name == name {
			sum += s.Value
			found = true
		}
	}
	return sum, found
}

// HistogramQuantile estimates quantile q (0..1) of the observations a
// Prometheus histogram named name gained between two scrapes, by linear
// interpolation inside the bucket that holds it, as PromQL's
// histogram_quantile does. It reports false when no observation was added.
func HistogramQuantile(before, after []Sample, name string, q float64) (float64, bool) {
	type bucket struct{ le, count float64 }
	counts := func(samples []Sample) map[float64]float64 {
		m := map[float64]float64{}
		for _, s := range samples {
			if s.Name != name+"_bucket" {
				continue
			}
			le, err := strconv.ParseFloat(s.Labels["le"], 64)
			if err == nil {
				m[le] += s.Value
			}
		}
		return m
	}
	b0, b1 := counts(before), counts(after)
	var bs []bucket
	for le, c := range b1 {
		bs = append(bs, bucket{le, c - b0[le]})
	}
	slices.SortFunc(bs, func(a, b bucket) int { return cmp.Compare(a.le, b.le) })
	if len(bs) == 0 || bs[len(bs)-1].count <= 0 {
		return 0, false
	}
	rank := q * bs[len(bs)-1].count
	lower, below := 0.0, 0.0
	for _, b := range bs {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				return lower, true // beyond the last finite bound
			}
			if b.count == below {
				return b.le, true
			}
			return lower + (b.le-lower)*(rank-below)/(b.count-below), true
		}
		lower, below = b.le, b.count
	}
	return lower, true
}
