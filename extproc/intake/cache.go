package intake

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/prefix"
)

// Defaults of CacheConfig.
const (
	// DefaultRouterTTL is how long a routed prefix stays in the approximate
	// index (--router-ttl-secs).
	DefaultRouterTTL = 120 * time.Second
	// DefaultPrefixMaxEntries bounds the approximate index.
	DefaultPrefixMaxEntries = 1 << 20
	// DefaultSpeculativeTTL is how long a routed prompt's blocks count as
	// cached on a synced worker before the engine's own BlockStored
	// arrives (llm-d's speculative entries).
	DefaultSpeculativeTTL = 2 * time.Second
)

// CacheConfig configures a CacheView. Zero values select the defaults.
type CacheConfig struct {
	// RouterTTL is the approximate index's TTL.
	RouterTTL time.Duration
	// MaxEntries bounds the approximate index.
	MaxEntries int
	// SpeculativeTTL: see DefaultSpeculativeTTL.
	SpeculativeTTL time.Duration
	// Exact is the engines' index, fed by the KV-event subscribers; nil
	// without KV events.
	Exact *kvevents.Index
}

// CacheView prices a prompt per worker. It owns tollgate's own record of
// what it routed (the approximate index, and, with KV events, the
// speculative entries) and the pricing rule over it and the engines'
// exact index:
//
//   - a worker whose event streams are in sync is priced by the exact
//     index, raised to its speculative entries (what was routed to it
//     within the speculative TTL) unless it reported a removal within
//     that TTL (they may name blocks the engine has since evicted);
//   - every other worker is priced by the approximate index.
//
// Only exact (token) hashes reach the exact index; byte-block hashes of an
// estimating tokenizer are priced approximately. It is safe for concurrent
// use.
type CacheView struct {
	exact   *kvevents.Index
	specTTL time.Duration
	// mu guards approx and spec.
	mu     sync.Mutex
	approx *prefix.Index
	spec   *prefix.Index
	// priced observes, per lookup, the largest figure of each source.
	priced *prometheus.HistogramVec
}

// NewCacheView returns an empty view.
func NewCacheView(cfg CacheConfig) *CacheView {
	if cfg.RouterTTL <= 0 {
		cfg.RouterTTL = DefaultRouterTTL
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultPrefixMaxEntries
	}
	if cfg.SpeculativeTTL <= 0 {
		cfg.SpeculativeTTL = DefaultSpeculativeTTL
	}
	c := &CacheView{exact: cfg.Exact, specTTL: cfg.SpeculativeTTL, approx: prefix.New(cfg.RouterTTL, cfg.MaxEntries)}
	if c.exact != nil {
		c.spec = prefix.New(cfg.SpeculativeTTL, max(cfg.MaxEntries/8, 1<<16))
		c.priced = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_prefix_cached_tokens",
			Help:    "Largest cached-token estimate of a request over the workers priced by each source (events, approximate), observed when some worker of that source holds part of the prompt.",
			Buckets: prometheus.ExponentialBuckets(16, 4, 8),
		}, []string{"source"})
	}
	return c
}

// Collectors returns the view's metrics: none without KV events.
func (c *CacheView) Collectors() []prometheus.Collector {
	if c.priced == nil {
		return nil
	}
	return []prometheus.Collector{c.priced}
}

// Seed returns the block-hash seed of a request for model: the model when
// the engines' KV events named it as a LoRA adapter, else the base seed "".
func (c *CacheView) Seed(model string) string {
	if c.exact == nil {
		return ""
	}
	return c.exact.SeedFor(model)
}

// Lookup returns the cached tokens of a prompt per worker, sorted by
// worker, by the rule of CacheView. exact says whether hashes are token
// hashes.
func (c *CacheView) Lookup(now time.Time, hashes []uint64, blockTokens uint64, exact bool) []sched.CachedTokens {
	if len(hashes) == 0 {
		return nil
	}
	kept := thin(hashes)
	c.mu.Lock()
	approx := c.approx.Lookup(now, kept, 1, nil)
	var spec []sched.CachedTokens
	if c.exact != nil && exact {
		spec = c.spec.Lookup(now, kept, 1, nil)
	}
	c.mu.Unlock()
	for _, cs := range [][]sched.CachedTokens{approx, spec} {
		for i := range cs {
			cs[i].Tokens = thinBlocks(cs[i].Tokens) * blockTokens
		}
	}
	if c.exact == nil || !exact {
		return approx
	}
	ask := make([]string, 0, len(approx)+len(spec))
	for _, cs := range [][]sched.CachedTokens{spec, approx} {
		for _, e := range cs {
			ask = append(ask, e.Worker)
		}
	}
	found, states := c.exact.Lookup(hashes, blockTokens, ask, nil, nil)
	merged, src := mergeCached(now, c.specTTL, found, spec, approx, states)
	if src.events > 0 {
		c.priced.WithLabelValues("events").Observe(float64(src.bestEvents))
	}
	if src.approximate > 0 {
		c.priced.WithLabelValues("approximate").Observe(float64(src.bestApproximate))
	}
	return merged
}

// Deep blocks. Of a prompt's block hashes, tollgate's own indexes (the
// approximate one and the speculative entries) keep the first denseBlocks,
// then one in deepStride: a block's hash commits to the whole prompt
// before it, so the one kept stands for the blocks it skips. A 100k-token
// prompt in 16-token blocks then costs about 1,000 index entries and
// lookups instead of 6,250 (llm-d and the Gateway API Inference Extension
// match at most 256 blocks), and its cached tokens past the first
// denseBlocks blocks are counted down to a multiple of deepStride blocks.
// The engines' exact index gets every hash.
const (
	denseBlocks = 256
	deepStride  = 8
)

// thin returns the hashes the indexes keep of a prompt's.
func thin(hashes []uint64) []uint64 {
	if len(hashes) <= denseBlocks {
		return hashes
	}
	out := make([]uint64, denseBlocks, denseBlocks+(len(hashes)-denseBlocks)/deepStride)
	copy(out, hashes)
	for i := denseBlocks + deepStride - 1; i < len(hashes); i += deepStride {
		out = append(out, hashes[i])
	}
	return out
}

// thinBlocks is the number of blocks the first n kept hashes stand for.
func thinBlocks(n uint64) uint64 {
	if n <= denseBlocks {
		return n
	}
	return denseBlocks + (n-denseBlocks)*deepStride
}

// sources counts the workers of one lookup by where their figure came
// from, with the largest figure of each source.
type sources struct {
	events, approximate         int
	bestEvents, bestApproximate uint64
}

// mergeCached is the pricing rule: found (the exact index, synced workers
// only), raised to spec for synced workers without a removal within
// specTTL, then approx for every worker that is not synced. states holds
// the state of spec's workers and then approx's, in order. Every list is
// sorted by worker; so is the result.
func mergeCached(now time.Time, specTTL time.Duration, found, spec, approx []sched.CachedTokens, states []kvevents.WorkerState) ([]sched.CachedTokens, sources) {
	var src sources
	merged := found
	for i, e := range spec {
		st := states[i]
		if !st.Synced || now.Sub(st.RemovedAt) < specTTL {
			continue
		}
		if j := slices.IndexFunc(merged, func(m sched.CachedTokens) bool { return m.Worker == e.Worker }); j >= 0 {
			merged[j].Tokens = max(merged[j].Tokens, e.Tokens)
		} else {
			merged = insertSorted(merged, e)
		}
	}
	for _, e := range merged {
		src.bestEvents = max(src.bestEvents, e.Tokens)
	}
	src.events = len(merged)
	for i, e := range approx {
		if states[len(spec)+i].Synced {
			continue
		}
		// A worker that fell out of sync between the indexes' answers may
		// already be listed; the exact figure stands.
		if slices.ContainsFunc(merged, func(m sched.CachedTokens) bool { return m.Worker == e.Worker }) {
			continue
		}
		merged = insertSorted(merged, e)
		src.approximate++
		src.bestApproximate = max(src.bestApproximate, e.Tokens)
	}
	return merged, src
}

func insertSorted(cs []sched.CachedTokens, c sched.CachedTokens) []sched.CachedTokens {
	i, _ := slices.BinarySearchFunc(cs, c.Worker, func(e sched.CachedTokens, w string) int {
		switch {
		case e.Worker < w:
			return -1
		case e.Worker > w:
			return 1
		}
		return 0
	})
	return slices.Insert(cs, i, c)
}

// Record notes that a prompt's blocks were routed to worker: in the
// approximate index and, for token hashes with KV events, as speculative
// entries.
func (c *CacheView) Record(now time.Time, worker string, hashes []uint64, exact bool) {
	if len(hashes) == 0 {
		return
	}
	kept := thin(hashes)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.approx.Record(now, worker, kept)
	if c.exact != nil && exact {
		c.spec.Record(now, worker, kept)
	}
}

// Forget drops workers that left the fleet from tollgate's own records.
// The exact index forgets a worker when its KV-event subscriber stops.
func (c *CacheView) Forget(workers []string) {
	if len(workers) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range workers {
		c.approx.RemoveWorker(w)
		if c.spec != nil {
			c.spec.RemoveWorker(w)
		}
	}
}
