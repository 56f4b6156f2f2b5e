package intake

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/extproc/request/tokenize"
)

// Tokenizer counts prompt tokens (--tokenizer); see extproc/request/tokenize. It
// must be safe for concurrent use.
type Tokenizer = tokenize.Tokenizer

// Heavy tokenizations. A prompt of heavyPromptBytes or more (messages,
// tools and text together) is tokenized in one of heavySlots() slots, so
// that a few large bodies cannot take every core, or a few hundred MB
// each, from the small requests. A heavy prompt waits at most heavyWait
// for a slot, behind at most heavyMaxWaiting() others; otherwise it is
// priced by the estimate. While it runs, its encode may take a second,
// free slot for a helper goroutine (tokenize.WithHelpers), never waiting.
const (
	heavyPromptBytes = 64 << 10
	heavyWait        = 250 * time.Millisecond
	maxHeavySlots    = 4
)

// heavySlots is half the cores, at least one and at most maxHeavySlots.
func heavySlots() int { return min(max(1, runtime.GOMAXPROCS(0)/2), maxHeavySlots) }

// heavyMaxWaiting is four waiters per slot.
func heavyMaxWaiting() int { return 4 * heavySlots() }

// Reasons a prompt an exact tokenizer serves is priced by the estimate.
const (
	estimatedRenderBudget = "render_budget"
	estimatedBusy         = "busy"
)

// errHeavyBusy is the error of a heavy prompt that got no slot.
var errHeavyBusy = errors.New("no heavy tokenization slot free")

// promptTokenizer tokenizes the planner's prompts: it bounds the heavy
// tokenizations that run at once and prices by the estimate what it
// cannot tokenize exactly within the render budget or a slot's wait. It is
// safe for concurrent use.
type promptTokenizer struct {
	tok        Tokenizer
	log        *slog.Logger
	heavyBytes int
	wait       time.Duration
	// slots holds a token per running heavy tokenization.
	slots      chan struct{}
	waiting    atomic.Int64
	maxWaiting int64

	estimated *prometheus.CounterVec
	cancelled prometheus.Counter
	// warned is set per reason once it was logged.
	warnedBudget, warnedBusy atomic.Bool
}

func newPromptTokenizer(tok Tokenizer, reg prometheus.Registerer, log *slog.Logger) *promptTokenizer {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	pt := &promptTokenizer{
		tok:        tok,
		log:        log,
		heavyBytes: heavyPromptBytes,
		wait:       heavyWait,
		slots:      make(chan struct{}, heavySlots()),
		maxWaiting: int64(heavyMaxWaiting()),
		estimated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_tokenize_estimated_total",
			Help: "Prompts of a model with an exact tokenizer priced by the estimate instead, by reason: render_budget (the chat template exceeded its render budget), busy (no heavy tokenization slot within the wait).",
		}, []string{"reason"}),
		cancelled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_tokenize_cancelled_total",
			Help: "Tokenizations stopped because the request's stream ended.",
		}),
	}
	for _, r := range []string{estimatedRenderBudget, estimatedBusy} {
		pt.estimated.WithLabelValues(r)
	}
	if c := tokenize.ReuseCacheOf(tok); c != nil {
		reg.MustRegister(reuseCollector{c})
	}
	reg.MustRegister(pt.estimated, pt.cancelled,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_tokenize_heavy_running",
			Help: "Heavy tokenization slots in use now: a prompt of 64 KiB or more takes one, and a second for its encode helper while one is free.",
		}, func() float64 { return float64(len(pt.slots)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_tokenize_heavy_waiting",
			Help: "Heavy tokenizations waiting for a slot now.",
		}, func() float64 { return float64(pt.waiting.Load()) }))
	return pt
}

// tokens tokenizes r's prompt as promptTokens does, in a heavy slot when
// it is large. A prompt that exceeds the render budget, gets no slot, or
// whose stream ends first is priced by the estimate (for a stream that
// ended, the submit that follows fails).
func (pt *promptTokenizer) tokens(ctx context.Context, r *openai.Request) (ids []uint32, n int, exact bool, rej *Rejection) {
	if len(r.Messages)+len(r.Tools)+len(r.Text) >= pt.heavyBytes && tokenize.ExactFor(pt.tok, r.Model) {
		release, err := pt.acquire(ctx)
		if err != nil {
			pt.fellBack(r.Model, err)
			return nil, estimateTokens(r), false, nil
		}
		defer release()
		ctx = tokenize.WithHelpers(ctx, pt.tryAcquire)
	}
	c, rej := promptTokens(ctx, pt.tok, r)
	if c.fallback != nil {
		pt.fellBack(r.Model, c.fallback)
	}
	return c.ids, c.n, c.exact, rej
}

// tryAcquire takes a heavy slot if one is free; a heavy tokenization's
// long segment takes one for its encode helper (tokenize.WithHelpers).
func (pt *promptTokenizer) tryAcquire() (release func(), ok bool) {
	select {
	case pt.slots <- struct{}{}:
		return pt.release, true
	default:
		return nil, false
	}
}

func (pt *promptTokenizer) release() { <-pt.slots }

// acquire takes a heavy slot, waiting at most pt.wait behind at most
// maxWaiting others while ctx lives.
func (pt *promptTokenizer) acquire(ctx context.Context) (release func(), err error) {
	if release, ok := pt.tryAcquire(); ok {
		return release, nil
	}
	if pt.waiting.Add(1) > pt.maxWaiting {
		pt.waiting.Add(-1)
		return nil, errHeavyBusy
	}
	defer pt.waiting.Add(-1)
	t := time.NewTimer(pt.wait)
	defer t.Stop()
	select {
	case pt.slots <- struct{}{}:
		return pt.release, nil
	case <-t.C:
		return nil, errHeavyBusy
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fellBack counts a prompt priced by the estimate, logging the first of
// each reason.
func (pt *promptTokenizer) fellBack(model string, why error) {
	switch {
	case errors.Is(why, tokenize.ErrRenderBudget):
		pt.estimated.WithLabelValues(estimatedRenderBudget).Inc()
		if !pt.warnedBudget.Swap(true) {
			pt.log.Warn("a chat template exceeded its render budget: such requests are priced by the estimate (tollgate_tokenize_estimated_total counts them; logged once)", "model", model, "error", why)
		}
	case errors.Is(why, errHeavyBusy):
		pt.estimated.WithLabelValues(estimatedBusy).Inc()
		if !pt.warnedBusy.Swap(true) {
			pt.log.Warn("every heavy tokenization slot stayed busy: large prompts are priced by the estimate while it lasts (tollgate_tokenize_estimated_total counts them; logged once)", "model", model, "slots", cap(pt.slots))
		}
	default:
		pt.cancelled.Inc()
	}
}

// reuseCollector exports the tokenizer's prefix id cache (--tokenizer-cache-bytes).
type reuseCollector struct{ c *tokenize.ReuseCache }

var (
	reuseLookups = prometheus.NewDesc("tollgate_tokenize_cache_lookups_total",
		"Prompts of 16 KiB or more looked up in the tokenizer's prefix id cache, by result: hit (a seen prefix was not encoded again) or miss.", []string{"result"}, nil)
	reuseBytes = prometheus.NewDesc("tollgate_tokenize_cache_bytes_total",
		"Bytes of the prompts looked up in the prefix id cache, by part: looked_up (all of them) or reused (not encoded again).", []string{"part"}, nil)
	reuseEvictions = prometheus.NewDesc("tollgate_tokenize_cache_evictions_total",
		"Prompts dropped from the prefix id cache: by its size bound, or because a longer turn of the same chat took over.", nil, nil)
	reuseHeld = prometheus.NewDesc("tollgate_tokenize_cache_held_bytes",
		"Bytes the prefix id cache holds (texts, ids and checkpoints).", nil, nil)
	reuseEntries = prometheus.NewDesc("tollgate_tokenize_cache_entries",
		"Prompts the prefix id cache holds.", nil, nil)
)

func (reuseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{reuseLookups, reuseBytes, reuseEvictions, reuseHeld, reuseEntries} {
		ch <- d
	}
}

func (r reuseCollector) Collect(ch chan<- prometheus.Metric) {
	st := r.c.Stats()
	ch <- prometheus.MustNewConstMetric(reuseLookups, prometheus.CounterValue, float64(st.Hits), "hit")
	ch <- prometheus.MustNewConstMetric(reuseLookups, prometheus.CounterValue, float64(st.Misses), "miss")
	ch <- prometheus.MustNewConstMetric(reuseBytes, prometheus.CounterValue, float64(st.LookupBytes), "looked_up")
	ch <- prometheus.MustNewConstMetric(reuseBytes, prometheus.CounterValue, float64(st.ReusedBytes), "reused")
	ch <- prometheus.MustNewConstMetric(reuseEvictions, prometheus.CounterValue, float64(st.Evictions))
	ch <- prometheus.MustNewConstMetric(reuseHeld, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(reuseEntries, prometheus.GaugeValue, float64(st.Entries))
}
