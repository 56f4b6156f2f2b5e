package enginemetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// scrapeStats are the scraper's own numbers, guarded by Scraper.mu.
type scrapeStats struct {
	duration prometheus.Histogram
	workers  map[string]*workerStats
}

// workerStats are one worker's scrape counters.
type workerStats struct {
	scrapes  uint64
	failures map[Reason]uint64
	lastOK   time.Time
	lastDur  time.Duration
	// lora is the LoRA state of the last successful scrape, summed over
	// ranks; nil when the engine reports none.
	lora *loraCounts
}

// loraCounts are a worker's LoRA adapters by state and its adapter limit.
type loraCounts struct{ running, waiting, max int }

func newScrapeStats() scrapeStats {
	return scrapeStats{
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_engine_scrape_duration_seconds",
			Help:    "Duration of one engine metrics scrape, failed ones included.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}),
		workers: map[string]*workerStats{},
	}
}

func (st *scrapeStats) observe(worker string, res Result) {
	w := st.workers[worker]
	if w == nil {
		w = &workerStats{failures: map[Reason]uint64{}}
		st.workers[worker] = w
	}
	w.scrapes++
	w.lastDur = res.Duration
	if res.Err != nil {
		w.failures[res.Reason]++
	} else {
		w.lastOK = res.At
		w.lora = nil
		for _, l := range res.Report.Loads {
			if l.LoRA == nil {
				continue
			}
			if w.lora == nil {
				w.lora = &loraCounts{}
			}
			w.lora.running += len(l.LoRA.Running)
			w.lora.waiting += len(l.LoRA.Waiting)
			w.lora.max += int(min(l.LoRA.MaxLoRA, 1<<20))
		}
	}
	st.duration.Observe(res.Duration.Seconds())
}

func (st *scrapeStats) forget(worker string) { delete(st.workers, worker) }

var (
	descScrapes = prometheus.NewDesc("tollgate_engine_scrapes_total",
		"Engine metrics scrapes per worker, failed ones included.", []string{"worker"}, nil)
	descFailures = prometheus.NewDesc("tollgate_engine_scrape_failures_total",
		"Failed engine metrics scrapes per worker and reason (timeout, connect, http_status, body, parse).",
		[]string{"worker", "reason"}, nil)
	descLoRA = prometheus.NewDesc("tollgate_engine_lora_adapters",
		"LoRA adapters the worker's engine last reported (vllm:lora_requests_info), by state: running, waiting, max.",
		[]string{"worker", "state"}, nil)
	descAge = prometheus.NewDesc("tollgate_engine_metrics_age_seconds",
		"Age of the worker's last successful engine metrics scrape (staleness); absent before the first.",
		[]string{"worker"}, nil)
)

// allReasons lists the reason label values, so every series exists from
// the first scrape on.
var allReasons = []Reason{ReasonTimeout, ReasonConnect, ReasonStatus, ReasonBody, ReasonParse}

// Describe implements prometheus.Collector.
func (s *Scraper) Describe(ch chan<- *prometheus.Desc) {
	ch <- descScrapes
	ch <- descFailures
	ch <- descAge
	ch <- descLoRA
	s.stats.duration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (s *Scraper) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, w := range s.stats.workers {
		ch <- prometheus.MustNewConstMetric(descScrapes, prometheus.CounterValue, float64(w.scrapes), id)
		for _, r := range allReasons {
			ch <- prometheus.MustNewConstMetric(descFailures, prometheus.CounterValue, float64(w.failures[r]), id, string(r))
		}
		if !w.lastOK.IsZero() {
			ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, now.Sub(w.lastOK).Seconds(), id)
		}
		if l := w.lora; l != nil {
			ch <- prometheus.MustNewConstMetric(descLoRA, prometheus.GaugeValue, float64(l.running), id, "running")
			ch <- prometheus.MustNewConstMetric(descLoRA, prometheus.GaugeValue, float64(l.waiting), id, "waiting")
			ch <- prometheus.MustNewConstMetric(descLoRA, prometheus.GaugeValue, float64(l.max), id, "max")
		}
	}
	s.stats.duration.Collect(ch)
}

var _ prometheus.Collector = (*Scraper)(nil)
