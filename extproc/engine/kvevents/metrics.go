package kvevents

import "github.com/prometheus/client_golang/prometheus"

// metrics are the Manager's Prometheus series. Worker labels are bounded
// by the worker set.
type metrics struct {
	events        *prometheus.CounterVec
	blocks        *prometheus.CounterVec
	skipped       *prometheus.CounterVec
	truncated     *prometheus.CounterVec
	malformed     *prometheus.CounterVec
	duplicates    *prometheus.CounterVec
	gaps          *prometheus.CounterVec
	replays       *prometheus.CounterVec
	restarts      *prometheus.CounterVec
	connects      *prometheus.CounterVec
	disconnects   *prometheus.CounterVec
	rankRejected  *prometheus.CounterVec
	unknownWorker prometheus.Counter
	unsynced      prometheus.Gauge
}

func newMetrics() *metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	return &metrics{
		events:  counter("tollgate_kv_events_total", "KV-cache events received, by worker and kind.", "worker", "kind"),
		blocks:  counter("tollgate_kv_event_blocks_total", "Index blocks stored, removed, or dropped under the memory bound, by worker.", "worker", "action"),
		skipped: counter("tollgate_kv_events_skipped_total", "Events not indexable: other media or groups, non-full-attention caches, extra hash keys, unknown parents, block-size mismatches.", "worker"),
		truncated: counter("tollgate_kv_events_truncated_total",
			"Events naming more than 65,536 tokens or blocks, truncated: a store keeps the whole blocks of its first 65,536 tokens, a removal clears the stream.", "worker"),
		malformed:  counter("tollgate_kv_events_malformed_total", "Messages and payloads dropped as malformed, by worker (empty when the topic names none).", "worker"),
		duplicates: counter("tollgate_kv_events_duplicates_total", "Batches received twice (after a replay), dropped.", "worker"),
		gaps:       counter("tollgate_kv_events_gaps_total", "Sequence gaps: batches lost between two received ones.", "worker"),
		replays:    counter("tollgate_kv_events_replays_total", "Replays asked of engines' replay sockets, by result (ok, failed).", "worker", "result"),
		restarts:   counter("tollgate_kv_events_restarts_total", "Publisher restarts seen (the sequence went back); the worker's blocks were cleared.", "worker"),
		connects:   counter("tollgate_kv_events_connects_total", "Connection attempts to engines' publishers, by result.", "worker", "result"),
		disconnects: counter("tollgate_kv_events_disconnects_total",
			"Engine connections (publisher, replay, bind mode's) that failed after connecting or ended, by reason: frame_too_large, message_too_large, too_many_frames, greeting, handshake, handshake_timeout, write_timeout, protocol, peer_error, overloaded, too_many_connections, closed (by the engine), io. Bind mode's are under worker \"\".",
			"worker", "reason"),
		rankRejected: counter("tollgate_kv_events_rank_rejected_total",
			"Bind-mode batches dropped because their DP rank is not one of the worker's (or, its DP size unknown, beyond its first 8 ranks).", "worker"),
		unknownWorker: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_kv_events_unknown_worker_total",
			Help: "Bind-mode messages whose topic names no known worker, dropped.",
		}),
		unsynced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_kv_events_unsynced_streams",
			Help: "Event streams (worker, DP rank) out of sync: their workers are priced with the approximate index.",
		}),
	}
}

func (m *metrics) collectors(mgr *Manager) []prometheus.Collector {
	return []prometheus.Collector{
		m.events, m.blocks, m.skipped, m.truncated, m.malformed, m.duplicates, m.gaps, m.replays, m.restarts, m.connects,
		m.disconnects, m.rankRejected, m.unknownWorker, m.unsynced,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_kv_index_blocks",
			Help: "(worker, DP rank, block) entries held by the exact prefix index.",
		}, func() float64 { p, _ := mgr.idx.Size(); return float64(p) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_kv_index_distinct_blocks",
			Help: "Distinct blocks held by the exact prefix index.",
		}, func() float64 { _, b := mgr.idx.Size(); return float64(b) }),
	}
}
