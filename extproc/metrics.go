package extproc

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tollgate/tollgate/sched"
)

// Histogram buckets. smg_scheduler_queue_wait_seconds is a histogram with
// explicit buckets here; upstream's exporter renders it as a summary.
var (
	queueWaitBuckets       = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	decisionLatencyBuckets = prometheus.ExponentialBuckets(1e-5, 2, 17) // 10 µs … 0.66 s
	errorRatioBuckets      = []float64{-1, -0.5, -0.25, -0.1, -0.05, -0.01, 0, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2}
)

// smgOutcomes are the outcome label values of smg_scheduler_admit_total.
var smgOutcomes = []struct {
	o     sched.Outcome
	label string
}{
	{sched.OutcomeAdmitted, "admitted"},
	{sched.OutcomeQueueFull, "rejected_queue_full"},
	{sched.OutcomeQueueTimeout, "rejected_queue_timeout"},
	{sched.OutcomePreempted, "preempted"},
	{sched.OutcomeClientCancelled, "client_cancelled"},
}

// metrics holds the server's Prometheus metrics, all on its own registry.
// Event metrics are recorded where the event happens (stream goroutines,
// the dispatcher's submit hook); scheduler state is read at scrape time by
// statsCollector.
type metrics struct {
	reg     *prometheus.Registry
	tenants *boundedLabels
	// models bounds the model label of tollgate_* series: model names come
	// from request bodies.
	models *boundedLabels
	// named holds the model names the policy file or a current worker
	// lists; every other name a client sends is labelled "other".
	named atomic.Pointer[map[string]struct{}]

	smgQueueWait    *prometheus.HistogramVec
	clamp           *prometheus.CounterVec
	unknownPriority *prometheus.CounterVec

	decisionLatency prometheus.Histogram
	admission       *prometheus.HistogramVec
	queueWait       *prometheus.HistogramVec
	costError       *prometheus.HistogramVec
	cachedError     prometheus.Histogram
	rejections      *prometheus.CounterVec
	budgetExpired   prometheus.Counter
	// envoyReplies counts Envoy's own answers (413, 504, ...) that reached
	// tollgate through ext_proc before the route, by status.
	envoyReplies *prometheus.CounterVec
	// sourceAddressMissing counts requests without the source.address
	// attribute while tollgate reads it.
	sourceAddressMissing prometheus.Counter
	// flows bounds the flow label of the fairness series (fairness keys
	// come from tenants or a header), like tenants.
	flows       *boundedLabels
	servedFlows *prometheus.CounterVec
}

func newMetrics(topN int, stats func(context.Context) (sched.Stats, bool)) *metrics {
	m := &metrics{
		reg:     prometheus.NewRegistry(),
		tenants: newBoundedLabels(topN),
		models:  newBoundedLabels(maxModelLabels),
		flows:   newBoundedLabels(topN),
		servedFlows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_fairness_served_tokens_total",
			Help: "Uncached prompt tokens dispatched, by model, Dynamo policy class and fairness key (flow); only with --fairness tenant or header. The first top-N keys keep their label, the rest are \"other\".",
		}, []string{"model", "policy_class", "flow"}),
		smgQueueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "smg_scheduler_queue_wait_seconds",
			Help:    "Time requests that queued spent waiting, by effective priority class, recorded when they left the queue.",
			Buckets: queueWaitBuckets,
		}, []string{"class"}),
		clamp: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smg_scheduler_clamp_total",
			Help: "Requests whose x-smg-priority was lowered to the tenant's max class.",
		}, []string{"tenant", "requested_class", "effective_class"}),
		unknownPriority: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smg_scheduler_unknown_priority_value_total",
			Help: "Requests whose non-empty x-smg-priority value was not a known class.",
		}, []string{"tenant"}),
		decisionLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_decision_latency_seconds",
			Help:    "Scheduler overhead of a submit: from the stream handing the request to the dispatcher until the scheduler queued, dispatched or rejected it. Queue time is not included.",
			Buckets: decisionLatencyBuckets,
		}),
		admission: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_admission_seconds",
			Help:    "Time from the request headers to tollgate's routing or rejection answer, queue time included, by result.",
			Buckets: queueWaitBuckets,
		}, []string{"result"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_queue_wait_seconds",
			Help:    "Time requests that queued spent waiting, by model and Dynamo policy class.",
			Buckets: queueWaitBuckets,
		}, []string{"model", "policy_class"}),
		costError: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_cost_estimate_error_ratio",
			Help:    "(estimated - actual) / actual prompt tokens, against the usage the worker reported, by model and tokenizer kind (estimate, tiktoken, hf).",
			Buckets: errorRatioBuckets,
		}, []string{"model", "tokenizer"}),
		cachedError: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_cached_tokens_estimate_error_ratio",
			Help:    "(estimated - actual) cached prompt tokens / actual prompt tokens, against the usage the worker reported.",
			Buckets: errorRatioBuckets,
		}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_rejections_total",
			Help: "Requests answered by tollgate instead of routed, by error code.",
		}, []string{"code"}),
		budgetExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_envoy_budget_expired_total",
			Help: "Queued requests answered with a queue timeout because Envoy's message timer would have fired first.",
		}),
		envoyReplies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_envoy_local_replies_total",
			Help: "Requests Envoy answered itself before tollgate routed them (413 body over the buffer, 504 or 408 stream or request timeout, ...), seen through ext_proc (Envoy 1.37 and later), by HTTP status. Their slot and queue place were freed at once.",
		}, []string{"status"}),
		sourceAddressMissing: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_client_address_missing_total",
			Help: "Requests without the source.address request attribute while --client-ip-source is source-address: the ext_proc filter lacks request_attributes: [source.address], so ip: tenants cannot resolve.",
		}),
	}
	// The Go runtime and process collectors expose goroutines, memory
	// and CPU, which held-request sizing depends on.
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(m.smgQueueWait, m.clamp, m.unknownPriority, m.decisionLatency, m.admission,
		m.queueWait, m.costError, m.cachedError, m.rejections, m.budgetExpired, m.envoyReplies, m.sourceAddressMissing, m.servedFlows,
		newStatsCollector(stats, m.flows))
	return m
}

// maxModelLabels bounds the distinct model label values of tollgate_* series.
const maxModelLabels = 64

// observeWait records a request leaving its queue: dispatched, rejected,
// or released by its stream (a client that went away, or Envoy's timer
// about to fire), with the scheduler's measure of its wait.
func (m *metrics) observeWait(a *sched.Action) {
	m.smgQueueWait.WithLabelValues(a.Priority.String()).Observe(a.Wait.Seconds())
	m.queueWait.WithLabelValues(m.modelLabel(a.Model), a.PolicyClass).Observe(a.Wait.Seconds())
}

// modelLabel is the model label of tollgate_* series: "unknown" for no
// model, the name when the configuration or a worker lists it (at most
// maxModelLabels of them), else "other". A name only a client chose never
// becomes a label value.
func (m *metrics) modelLabel(model string) string {
	if model == "" {
		return "unknown"
	}
	if named := m.named.Load(); named != nil {
		if _, ok := (*named)[model]; ok {
			return m.models.label(model)
		}
	}
	return "other"
}

// setNamedModels records the model names that may be label values: those
// of the policy file and of the current workers.
func (m *metrics) setNamedModels(policyModels []string, workers []sched.Worker) {
	named := make(map[string]struct{}, len(policyModels)+len(workers))
	for _, n := range policyModels {
		named[n] = struct{}{}
	}
	for _, w := range workers {
		if w.Model != "" {
			named[w.Model] = struct{}{}
		}
	}
	m.named.Store(&named)
}

// observeServed counts the uncached tokens of a dispatch a to its flow.
func (m *metrics) observeServed(a *sched.Action, flow string) {
	m.servedFlows.WithLabelValues(m.models.label(metricModel(a.Model)), a.PolicyClass, m.flows.label(flow)).Add(float64(a.Uncached))
}

// boundedLabels bounds a label's cardinality: the first n distinct values
// keep their own value, every later one is "other". Values are admitted in
// the order they are first seen, so a series never changes its label once
// created. Safe for concurrent use.
type boundedLabels struct {
	n int
	// mu guards seen.
	mu   sync.Mutex
	seen map[string]struct{}
}

func newBoundedLabels(n int) *boundedLabels {
	return &boundedLabels{n: n, seen: make(map[string]struct{})}
}

func (t *boundedLabels) label(tenant string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.seen[tenant]; ok {
		return tenant
	}
	if len(t.seen) < t.n {
		t.seen[tenant] = struct{}{}
		return tenant
	}
	return "other"
}

// statsCollector turns a scheduler Stats snapshot, fetched from the
// dispatcher at scrape time, into the smg_scheduler_*, dynamo_frontend_*
// and per-worker series.
type statsCollector struct {
	fetch func(context.Context) (sched.Stats, bool)

	admits, preemptions, promotions                     *prometheus.Desc
	inflight, depth, limit, utilization, pressure, capy *prometheus.Desc
	pending, pendingISL, pendingCached, backpressure    *prometheus.Desc
	rankPrefill, rankRequests, rankBlocks               *prometheus.Desc
	engRequests, engKV, engSaturated, engSeed, engSince *prometheus.Desc
	flowDepth, jain                                     *prometheus.Desc
	flows                                               *boundedLabels
}

func newStatsCollector(fetch func(context.Context) (sched.Stats, bool), flows *boundedLabels) *statsCollector {
	queue := []string{"model", "worker_type", "policy_class"}
	rank := []string{"worker", "rank"}
	class := []string{"class"}
	return &statsCollector{
		fetch:         fetch,
		admits:        prometheus.NewDesc("smg_scheduler_admit_total", "Admission outcomes by effective priority class.", []string{"class", "outcome"}, nil),
		preemptions:   prometheus.NewDesc("smg_scheduler_preemption_total", "Preemptions by victim and preemptor class.", []string{"victim_class", "by_class"}, nil),
		promotions:    prometheus.NewDesc("smg_scheduler_starvation_promotion_total", "Starvation promotions by class.", class, nil),
		inflight:      prometheus.NewDesc("smg_scheduler_inflight", "Dispatched requests holding a slot, by class.", class, nil),
		depth:         prometheus.NewDesc("smg_scheduler_queue_depth", "Queued requests by class.", class, nil),
		limit:         prometheus.NewDesc("smg_scheduler_queue_size_limit", "Configured queue_size by class.", class, nil),
		utilization:   prometheus.NewDesc("smg_scheduler_utilization", "Total in-flight requests / slot capacity.", nil, nil),
		pressure:      prometheus.NewDesc("smg_scheduler_class_capacity_pressure", "SMG per-class capacity pressure in [0, 1].", class, nil),
		capy:          prometheus.NewDesc("tollgate_scheduler_capacity", "SMG slot capacity in force.", nil, nil),
		pending:       prometheus.NewDesc("dynamo_frontend_router_queue_pending_requests", "Queued requests in the policy class.", queue, nil),
		pendingISL:    prometheus.NewDesc("dynamo_frontend_router_queue_pending_isl_tokens", "Sum of the raw ISL of queued requests in the policy class.", queue, nil),
		pendingCached: prometheus.NewDesc("dynamo_frontend_router_queue_pending_cached_tokens", "Sum of the cached-token snapshots of queued requests in the policy class.", queue, nil),
		backpressure:  prometheus.NewDesc("dynamo_frontend_router_queue_backpressure_total", "Queue-limit rejections by limit.", append(queue, "reason"), nil),
		rankPrefill:   prometheus.NewDesc("tollgate_worker_active_prefill_tokens", "Prefill tokens booked on the worker rank and not yet past their first token.", rank, nil),
		rankRequests:  prometheus.NewDesc("tollgate_worker_active_requests", "Requests booked on the worker rank.", rank, nil),
		rankBlocks:    prometheus.NewDesc("tollgate_worker_active_blocks", "KV blocks booked on the worker rank.", rank, nil),
		engRequests:   prometheus.NewDesc("tollgate_engine_reported_requests", "Requests the worker rank's engine last reported, by state (running, waiting); next to tollgate_worker_active_requests, what tollgate booked.", append(rank, "state"), nil),
		engKV:         prometheus.NewDesc("tollgate_engine_reported_kv_usage_ratio", "KV-cache usage the worker rank's engine last reported.", rank, nil),
		engSaturated:  prometheus.NewDesc("tollgate_engine_saturated", "1 while the saturation gate counts the worker rank busy.", rank, nil),
		engSeed:       prometheus.NewDesc("tollgate_engine_warm_seed_requests", "Warm-start load seeded on the worker rank from its engine's report.", rank, nil),
		engSince:      prometheus.NewDesc("tollgate_engine_booked_since_report_requests", "Requests booked on the worker rank since its engine's last report and still before their first token.", rank, nil),
		flowDepth: prometheus.NewDesc("tollgate_fairness_flow_queued_requests",
			"Queued requests by model, Dynamo policy class and fairness key (flow), with fairness on. Keys past the top-N, and the per-lane overflow flow, are \"other\".",
			[]string{"model", "policy_class", "flow"}, nil),
		jain: prometheus.NewDesc("tollgate_fairness_jain_index",
			"Jain's index over the weighted service rates (uncached tokens per DRR round since backlogged) of the class's backlogged flows: 1 is an exact weighted share, 1/n one flow of n served alone. 1 with fewer than two flows.",
			[]string{"model", "policy_class"}, nil),
		flows: flows,
	}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.admits, c.preemptions, c.promotions, c.inflight, c.depth, c.limit,
		c.utilization, c.pressure, c.capy, c.pending, c.pendingISL, c.pendingCached, c.backpressure,
		c.rankPrefill, c.rankRequests, c.rankBlocks, c.engRequests, c.engKV, c.engSaturated, c.engSeed, c.engSince, c.flowDepth, c.jain} {
		ch <- d
	}
}

// statsTimeout bounds how long a scrape waits for the dispatcher.
const statsTimeout = 5 * time.Second

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.fetch == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	s, ok := c.fetch(ctx)
	if !ok {
		return
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for p := range sched.Priority(sched.NumPriorities) {
		cl := p.String()
		for _, o := range smgOutcomes {
			counter(c.admits, float64(s.Admits[p][o.o]), cl, o.label)
		}
		for by := range sched.Priority(sched.NumPriorities) {
			if by > p {
				counter(c.preemptions, float64(s.Preemptions[p][by]), cl, by.String())
			}
		}
		if p != sched.PrioritySystem {
			counter(c.promotions, float64(s.Promotions[p]), cl)
		}
		gauge(c.inflight, float64(s.InFlight[p]), cl)
		gauge(c.depth, float64(s.QueueDepth[p]), cl)
		gauge(c.limit, float64(s.QueueLimit[p]), cl)
		gauge(c.pressure, s.Pressure[p], cl)
	}
	gauge(c.utilization, s.Utilization)
	gauge(c.capy, float64(s.Capacity))
	for _, q := range s.Queues {
		l := []string{metricModel(q.Model), "decode", q.PolicyClass}
		gauge(c.pending, float64(q.Requests), l...)
		gauge(c.pendingISL, float64(q.ISLTokens), l...)
		gauge(c.pendingCached, float64(q.CachedTokens), l...)
		for k := sched.LimitRequests; k < sched.NumLimitKinds; k++ {
			counter(c.backpressure, float64(q.Backpressure[k]), append(l, k.Reason())...)
		}
		c.collectFlows(ch, &q)
	}
	for _, r := range s.Ranks {
		l := []string{r.Worker, strconv.FormatUint(uint64(r.Rank), 10)}
		gauge(c.rankPrefill, float64(r.ActivePrefillTokens), l...)
		gauge(c.rankRequests, float64(r.ActiveRequests), l...)
		gauge(c.rankBlocks, float64(r.ActiveBlocks), l...)
		if e := r.Engine; e.Known {
			gauge(c.engRequests, float64(e.Running), append(l, "running")...)
			gauge(c.engRequests, float64(e.Waiting), append(l, "waiting")...)
			gauge(c.engKV, e.KVUsage, l...)
			gauge(c.engSaturated, b2f(e.Saturated), l...)
			gauge(c.engSeed, float64(e.Seed), l...)
			gauge(c.engSince, float64(e.Since), l...)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectFlows emits the fairness series of one policy class: queued
// requests per flow (summed into "other" past the label bound) and Jain's
// index. Nothing without flows.
func (c *statsCollector) collectFlows(ch chan<- prometheus.Metric, q *sched.QueueStats) {
	if c.flows == nil || len(q.Flows) == 0 {
		return
	}
	model := metricModel(q.Model)
	depth := make(map[string]uint64, len(q.Flows))
	var order []string
	for _, f := range q.Flows {
		l := "other"
		if !f.Overflow {
			l = c.flows.label(f.Key)
		}
		if _, ok := depth[l]; !ok {
			order = append(order, l)
		}
		depth[l] += f.Requests
	}
	for _, l := range order {
		ch <- prometheus.MustNewConstMetric(c.flowDepth, prometheus.GaugeValue, float64(depth[l]), model, q.PolicyClass, l)
	}
	ch <- prometheus.MustNewConstMetric(c.jain, prometheus.GaugeValue, q.Fairness, model, q.PolicyClass)
}

// newBuildInfoGauge returns tollgate_build_info, a constant 1 whose labels
// identify the build: version, revision and the Go release.
func newBuildInfoGauge(b BuildInfo) prometheus.GaugeFunc {
	orUnknown := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tollgate_build_info",
		Help: "A constant 1 labelled with the version, source revision and Go release tollgate was built from.",
		ConstLabels: prometheus.Labels{
			"version":   orUnknown(b.Version),
			"revision":  orUnknown(b.Revision),
			"goversion": runtime.Version(),
		},
	}, func() float64 { return 1 })
}
