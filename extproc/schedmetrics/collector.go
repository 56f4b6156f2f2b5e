// Package schedmetrics exports the scheduling core's state, a sched.Stats
// snapshot fetched at scrape time, as Prometheus series under SMG's
// (smg_scheduler_*), Dynamo's (dynamo_frontend_router_*) and tollgate's own
// names, and bounds the cardinality of labels clients choose (Labels).
package schedmetrics

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/sched"
)

// Outcomes are the outcome label values of smg_scheduler_admit_total.
var Outcomes = []struct {
	o     sched.Outcome
	label string
}{
	{sched.OutcomeAdmitted, "admitted"},
	{sched.OutcomeQueueFull, "rejected_queue_full"},
	{sched.OutcomeQueueTimeout, "rejected_queue_timeout"},
	{sched.OutcomePreempted, "preempted"},
	{sched.OutcomeClientCancelled, "client_cancelled"},
}

// Labels bounds a label's cardinality: the first n distinct values
// keep their own value, every later one is "other". Values are admitted in
// the order they are first seen, so a series never changes its label once
// created. Safe for concurrent use.
type Labels struct {
	n int
	// mu guards seen.
	mu   sync.Mutex
	seen map[string]struct{}
}

// NewLabels bounds a label to n distinct values besides "other".
func NewLabels(n int) *Labels {
	return &Labels{n: n, seen: make(map[string]struct{})}
}

// Label returns v when it keeps its own value, else "other".
func (t *Labels) Label(v string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.seen[v]; ok {
		return v
	}
	if len(t.seen) < t.n {
		t.seen[v] = struct{}{}
		return v
	}
	return "other"
}

// Collector turns a scheduler Stats snapshot, fetched from the
// dispatcher at scrape time, into the smg_scheduler_*, dynamo_frontend_*
// and per-worker series.
type Collector struct {
	fetch func(context.Context) (sched.Stats, bool)

	admits, preemptions, promotions                     *prometheus.Desc
	inflight, depth, limit, utilization, pressure, capy *prometheus.Desc
	pending, pendingISL, pendingCached, backpressure    *prometheus.Desc
	rankPrefill, rankRequests, rankBlocks               *prometheus.Desc
	engRequests, engKV, engSaturated, engSeed, engSince *prometheus.Desc
	flowDepth, jain                                     *prometheus.Desc
	expired                                             *prometheus.Desc
	rateLimit, admDepth, admRejected, admInflight       *prometheus.Desc
	budgetDecisions, budgetScopes, budgetEvicted        *prometheus.Desc
	splits                                              *prometheus.Desc
	flows                                               *Labels
}

// NewCollector returns a collector that fetches a snapshot at every
// scrape; flows bounds the fairness key label (nil: no fairness series).
func NewCollector(fetch func(context.Context) (sched.Stats, bool), flows *Labels) *Collector {
	queue := []string{"model", "worker_type", "policy_class"}
	rank := []string{"worker", "rank"}
	class := []string{"class"}
	return &Collector{
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
		expired:     prometheus.NewDesc("dynamo_frontend_router_queue_deadline_expired_total", "Requests of a policy class with slo_ms shed past their deadline, by stage (admission: late before it could queue; dispatch: late while queued).", append(queue, "stage"), nil),
		rateLimit:   prometheus.NewDesc("smg_http_rate_limit_total", "Requests SMG's request bucket let through (allowed) or refused (rejected): the rate check with priority admission, the legacy admission without it.", []string{"result"}, nil),
		admDepth:    prometheus.NewDesc("smg_admission_queue_depth", "Requests waiting for a legacy admission token.", nil, nil),
		admRejected: prometheus.NewDesc("smg_admission_queue_rejected_total", "Legacy admission rejections: the queue was full, or the wait timed out.", []string{"reason"}, nil),
		admInflight: prometheus.NewDesc("smg_admission_inflight", "Requests holding a legacy admission token.", nil, nil),
		budgetDecisions: prometheus.NewDesc("tollgate_tenant_rate_limit_decisions_total",
			"Tenant budget decisions (--tenant-rate-limit-config): allowed or denied.", []string{"result"}, nil),
		budgetScopes:  prometheus.NewDesc("tollgate_tenant_rate_limit_scopes", "Tenant budget scopes (a tenant, or a tenant's model rule) tracked.", nil, nil),
		budgetEvicted: prometheus.NewDesc("tollgate_tenant_rate_limit_scope_evictions_total", "Least recently used tenant budget scopes forgotten to stay within the bound; each one's tenant starts over with a full budget.", nil, nil),
		splits:        prometheus.NewDesc("tollgate_pd_split_requests_total", "Dispatches split into prefill and decode: the prefill worker named in x-prefiller-host-port, the decode worker the destination.", nil, nil),
		flows:         flows,
	}
}

// Describe sends every series' description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.admits, c.preemptions, c.promotions, c.inflight, c.depth, c.limit,
		c.utilization, c.pressure, c.capy, c.pending, c.pendingISL, c.pendingCached, c.backpressure,
		c.rankPrefill, c.rankRequests, c.rankBlocks, c.engRequests, c.engKV, c.engSaturated, c.engSeed, c.engSince, c.flowDepth, c.jain,
		c.expired, c.rateLimit, c.admDepth, c.admRejected, c.admInflight, c.budgetDecisions, c.budgetScopes, c.budgetEvicted, c.splits} {
		ch <- d
	}
}

// statsTimeout bounds how long a scrape waits for the dispatcher.
const statsTimeout = 5 * time.Second

// Collect fetches a snapshot, waiting at most statsTimeout, and sends its
// series; nothing when the fetch fails.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
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
		for _, o := range Outcomes {
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
	counter(c.splits, float64(s.Splits))
	a := &s.Admission
	counter(c.rateLimit, float64(a.Allowed), "allowed")
	counter(c.rateLimit, float64(a.Rejected), "rejected")
	gauge(c.admDepth, float64(a.Waiting))
	counter(c.admRejected, float64(a.Full), "full")
	counter(c.admRejected, float64(a.TimedOut), "timeout")
	gauge(c.admInflight, float64(a.Holding))
	if b := s.Budgets; b != nil {
		counter(c.budgetDecisions, float64(b.Allowed), "allowed")
		counter(c.budgetDecisions, float64(b.Denied), "denied")
		gauge(c.budgetScopes, float64(b.Scopes))
		counter(c.budgetEvicted, float64(b.Evicted))
	}
	for _, q := range s.Queues {
		l := []string{ModelLabel(q.Model), "decode", q.PolicyClass}
		gauge(c.pending, float64(q.Requests), l...)
		gauge(c.pendingISL, float64(q.ISLTokens), l...)
		gauge(c.pendingCached, float64(q.CachedTokens), l...)
		for k := sched.LimitRequests; k < sched.NumLimitKinds; k++ {
			counter(c.backpressure, float64(q.Backpressure[k]), append(l, k.Reason())...)
		}
		for g := sched.StageAdmission; g < sched.NumDeadlineStages; g++ {
			counter(c.expired, float64(q.Expired[g]), append(l, g.String())...)
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
func (c *Collector) collectFlows(ch chan<- prometheus.Metric, q *sched.QueueStats) {
	if c.flows == nil || len(q.Flows) == 0 {
		return
	}
	model := ModelLabel(q.Model)
	depth := make(map[string]uint64, len(q.Flows))
	var order []string
	for _, f := range q.Flows {
		l := "other"
		if !f.Overflow {
			l = c.flows.Label(f.Key)
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

// ModelLabel is the model label, "unknown" when the request named none.
func ModelLabel(m string) string {
	if m == "" {
		return "unknown"
	}
	return m
}
