package mockworker

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics is the worker's vLLM-style Prometheus exposition, on a registry
// of its own so several workers live in one process. Names and labels
// follow vLLM's V1 engine: model_name and engine ("0") on every series.
type metrics struct {
	reg              *prometheus.Registry
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	cacheQueries     prometheus.Counter
	cacheHits        prometheus.Counter
	success          *prometheus.CounterVec
	ttft             prometheus.Histogram
	e2e              prometheus.Histogram
}

// newMetrics builds the registry; stats supplies the gauges' values at
// scrape time.
func newMetrics(cfg Config, stats func() Stats) *metrics {
	labels := prometheus.Labels{"model_name": cfg.Model, "engine": "0"}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	gauge := func(name, help string, f func(Stats) float64) prometheus.GaugeFunc {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return f(stats()) })
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels, Buckets: buckets})
	}
	m := &metrics{
		reg:              prometheus.NewRegistry(),
		promptTokens:     counter("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		generationTokens: counter("vllm:generation_tokens_total", "Number of generation tokens processed."),
		cacheQueries:     counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		cacheHits:        counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
		success: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels,
		}, []string{"finished_reason"}),
		ttft: histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
			[]float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}),
		e2e: histogram("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
			[]float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120}),
	}
	blocks := float64(cfg.CacheBlocks)
	m.reg.MustRegister(
		gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
			func(s Stats) float64 { return float64(s.Running) }),
		gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
			func(s Stats) float64 { return float64(s.Waiting) }),
		gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
			func(s Stats) float64 { return float64(s.CachedBlocks) / blocks }),
		m.promptTokens, m.generationTokens, m.cacheQueries, m.cacheHits, m.success, m.ttft, m.e2e,
	)
	return m
}

// handler serves the exposition.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// prefilled counts a finished prefill of prompt tokens, cached of them hits.
func (m *metrics) prefilled(prompt, cached int) {
	m.promptTokens.Add(float64(prompt))
	m.cacheQueries.Add(float64(prompt))
	m.cacheHits.Add(float64(cached))
}

// firstToken observes a time to first token.
func (m *metrics) firstToken(d time.Duration) { m.ttft.Observe(d.Seconds()) }

// generated counts one output token.
func (m *metrics) generated() { m.generationTokens.Inc() }

// ended counts a request's end: finished requests stop for "length"
// (they always produce max_tokens), cancelled ones for "abort".
func (m *metrics) ended(o Outcome, latency time.Duration) {
	reason := "abort"
	if o == OutcomeFinished {
		reason = "length"
	}
	m.success.WithLabelValues(reason).Inc()
	m.e2e.Observe(latency.Seconds())
}
