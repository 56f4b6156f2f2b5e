package mockworker

import (
	"net/http"
	"strconv"
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
	bySource         *prometheus.CounterVec
	success          *prometheus.CounterVec
	ttft             prometheus.Histogram
	e2e              prometheus.Histogram
}

// newMetrics builds the registry; stats supplies the gauges' values at
// scrape time.
func newMetrics(cfg Config, stats func() Stats) *metrics {
	labels := prometheus.Labels{"model_name": cfg.Model, "engine": strconv.Itoa(cfg.DPRank)}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
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
		bySource: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:prompt_tokens_by_source_total", Help: "Number of prompt tokens by source.", ConstLabels: labels,
		}, []string{"source"}),
		success: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels,
		}, []string{"finished_reason"}),
		ttft: histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
			[]float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}),
		e2e: histogram("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
			[]float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120}),
	}
	m.reg.MustRegister(m.promptTokens, m.generationTokens, m.cacheQueries, m.cacheHits, m.bySource, m.success, m.ttft, m.e2e)
	m.reg.MustRegister(loadGauges(cfg, stats)...)
	return m
}

// loadGauges are the load series the engine reports, from its simulated
// state, in cfg.MetricsNaming: running and waiting sequences, KV usage
// (the prefix cache's blocks over its size) and the cache configuration;
// SGLang also reports its running-request limit.
func loadGauges(cfg Config, stats func() Stats) []prometheus.Collector {
	blocks := float64(cfg.CacheBlocks)
	rank := strconv.Itoa(cfg.DPRank)
	mk := func(name, help string, labels prometheus.Labels, f func(Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return f(stats()) })
	}
	running := func(s Stats) float64 { return float64(s.Running) }
	waiting := func(s Stats) float64 { return float64(s.Waiting) }
	usage := func(s Stats) float64 { return float64(s.CachedBlocks) / blocks }
	one := func(Stats) float64 { return 1 }
	if cfg.MetricsNaming == "sglang" {
		l := prometheus.Labels{"model_name": cfg.Model, "dp_rank": rank}
		info := prometheus.Labels{"model_name": cfg.Model, "dp_rank": rank,
			"page_size": strconv.Itoa(cfg.BlockSize), "num_pages": strconv.Itoa(cfg.CacheBlocks)}
		return []prometheus.Collector{
			mk("sglang:num_running_reqs", "The number of running requests.", l, running),
			mk("sglang:num_queue_reqs", "The number of requests in the waiting queue.", l, waiting),
			mk("sglang:token_usage", "The token usage.", l, usage),
			mk("sglang:max_running_requests", "Maximum running requests.", l,
				func(Stats) float64 { return float64(cfg.MaxNumSeqs) }),
			mk("sglang:cache_config_info", "Cache configuration.", info, one),
		}
	}
	l := prometheus.Labels{"model_name": cfg.Model, "engine": rank}
	info := prometheus.Labels{"engine": rank,
		"block_size": strconv.Itoa(cfg.BlockSize), "num_gpu_blocks": strconv.Itoa(cfg.CacheBlocks)}
	return []prometheus.Collector{
		mk("vllm:num_requests_running", "Number of requests in model execution batches.", l, running),
		mk("vllm:num_requests_waiting", "Number of requests waiting to be processed.", l, waiting),
		mk("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l, usage),
		mk("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", info, one),
	}
}

// handler serves the exposition.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// prefilled counts a finished prefill of a prompt by where its tokens came
// from: computed here, hits of the prefix cache, or a remote prefill's KV.
func (m *metrics) prefilled(computed, cached, transferred int) {
	prompt := float64(computed + cached + transferred)
	m.promptTokens.Add(prompt)
	m.cacheQueries.Add(prompt)
	m.cacheHits.Add(float64(cached))
	m.bySource.WithLabelValues("local_compute").Add(float64(computed))
	m.bySource.WithLabelValues("local_cache_hit").Add(float64(cached))
	m.bySource.WithLabelValues("external_kv_transfer").Add(float64(transferred))
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

// MetricsHandler serves the metrics of several workers as one exposition:
// workers with consecutive DPRank values behind it look like one
// data-parallel engine, each rank's series labelled with its rank.
func MetricsHandler(ws ...*Worker) http.Handler {
	gs := make(prometheus.Gatherers, len(ws))
	for i, w := range ws {
		gs[i] = w.metrics.reg
	}
	return promhttp.HandlerFor(gs, promhttp.HandlerOpts{})
}
