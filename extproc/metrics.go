package extproc

import (
	"context"
	"runtime"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tollgate/tollgate/extproc/schedmetrics"
	"github.com/tollgate/tollgate/sched"
)

// Histogram buckets. smg_scheduler_queue_wait_seconds is a histogram with
// explicit buckets here; upstream's exporter renders it as a summary.
var (
	queueWaitBuckets       = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	decisionLatencyBuckets = prometheus.ExponentialBuckets(1e-5, 2, 17) // 10 µs … 0.66 s
)

// metrics holds the server's Prometheus metrics, all on its own registry.
// Event metrics are recorded where the event happens (stream goroutines,
// the dispatcher's submit hook); scheduler state is read at scrape time by
// statsCollector.
type metrics struct {
	reg     *prometheus.Registry
	tenants *schedmetrics.Labels
	// models bounds the model label of tollgate_* series: model names come
	// from request bodies.
	models *schedmetrics.Labels
	// named holds the model names the policy file or a current worker
	// lists; every other name a client sends is labelled "other".
	named atomic.Pointer[map[string]struct{}]

	smgQueueWait *prometheus.HistogramVec

	decisionLatency prometheus.Histogram
	admission       *prometheus.HistogramVec
	queueWait       *prometheus.HistogramVec
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
	flows       *schedmetrics.Labels
	servedFlows *prometheus.CounterVec
	// tenantLimited counts the tenant budgets' denials by tenant.
	tenantLimited *prometheus.CounterVec
}

func newMetrics(topN int, stats func(context.Context) (sched.Stats, bool)) *metrics {
	m := &metrics{
		reg:     prometheus.NewRegistry(),
		tenants: schedmetrics.NewLabels(topN),
		models:  schedmetrics.NewLabels(maxModelLabels),
		flows:   schedmetrics.NewLabels(topN),
		servedFlows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_fairness_served_tokens_total",
			Help: "Uncached prompt tokens dispatched, by model, Dynamo policy class and fairness key (flow); only with --fairness tenant or header. The first top-N keys keep their label, the rest are \"other\".",
		}, []string{"model", "policy_class", "flow"}),
		tenantLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_tenant_rate_limited_total",
			Help: "Requests denied by their tenant's token or request budget (--tenant-rate-limit-config), by tenant. The first top-N tenants keep their label, the rest are \"other\".",
		}, []string{"tenant"}),
		smgQueueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "smg_scheduler_queue_wait_seconds",
			Help:    "Time requests that queued spent waiting, by effective priority class, recorded when they left the queue.",
			Buckets: queueWaitBuckets,
		}, []string{"class"}),
		decisionLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_decision_latency_seconds",
			Help:    "Scheduler overhead of a submit: from the stream handing the request to the dispatcher, its wait for the dispatcher's lock included, until the scheduler queued, dispatched or rejected it. Queue time is not included.",
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
	m.reg.MustRegister(m.smgQueueWait, m.decisionLatency, m.admission,
		m.queueWait, m.rejections, m.budgetExpired, m.envoyReplies, m.sourceAddressMissing, m.servedFlows, m.tenantLimited,
		schedmetrics.NewCollector(stats, m.flows))
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
			return m.models.Label(model)
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
	m.servedFlows.WithLabelValues(m.boundedModel(a.Model), a.PolicyClass, m.flows.Label(flow)).Add(float64(a.Uncached))
}

// boundedModel bounds the model label of request-path series.
func (m *metrics) boundedModel(model string) string {
	return m.models.Label(schedmetrics.ModelLabel(model))
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
