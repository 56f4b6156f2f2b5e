package sched

import "time"

// Stats is a snapshot of the scheduler for metrics. Maps and slices are
// freshly allocated and owned by the caller.
type Stats struct {
	// Capacity is the SMG slot capacity in force.
	Capacity uint32
	// Reserved is each priority class's reservation at this capacity.
	Reserved [NumPriorities]uint32
	// InFlight counts dispatched requests holding a slot, per class.
	InFlight [NumPriorities]uint32
	// QueueDepth counts queued requests per priority class (all policy
	// classes and models together).
	QueueDepth [NumPriorities]uint32
	// QueueLimit is each class's queue_size.
	QueueLimit [NumPriorities]uint32
	// Utilization is total in-flight / capacity (0 when capacity is 0).
	Utilization float64
	// Pressure is SMG's per-class pressure:
	// min(1, max(depth/queue_size, max(0, inflight-reserved)/max(1, capacity-Σ reserved above))).
	Pressure [NumPriorities]float64
	// Admits counts outcomes per effective class (smg_scheduler_admit_total).
	Admits [NumPriorities][NumOutcomes]uint64
	// Preemptions counts preemptions by [victim][preemptor] class.
	Preemptions [NumPriorities][NumPriorities]uint64
	// Promotions counts starvation promotions per class.
	Promotions [NumPriorities]uint64
	// Queues has one entry per (model, policy class) queue ever created.
	Queues []QueueStats
	// Ranks has one entry per (worker, rank) with load, including workers
	// removed while they still have requests in flight.
	Ranks []RankStats
	// Seeded is the slots the warm-start seeds hold (each worker's at most
	// its own slots); Warming is set while the warm start holds the slot
	// gate.
	Seeded  uint32
	Warming bool
	// Admission counts SMG's request bucket decisions; Budgets the tenant
	// budgets' (zero when off).
	Admission AdmissionStats
	Budgets   *BudgetStats
	// Splits counts the dispatches split into prefill and decode.
	Splits uint64
}

// QueueStats describes one Dynamo policy-class queue.
type QueueStats struct {
	Model       string
	PolicyClass string
	// Pending requests, their raw ISL and cached-token snapshots.
	Requests     uint64
	ISLTokens    uint64
	CachedTokens uint64
	// Backpressure counts rejections by LimitKind (LimitNone stays 0).
	Backpressure [NumLimitKinds]uint64
	// Expired counts deadline sheds by DeadlineStage (StageNone stays 0;
	// always 0 for a class without slo_ms).
	Expired [NumDeadlineStages]uint64
	// Deficit is the class's DRR deficit.
	Deficit uint64
	// Flows lists the class's backlogged fairness keys (fairness on),
	// summed over the class's lanes, sorted by key.
	Flows []FlowStats
	// Fairness is Jain's index over the weighted service rates of the
	// class's backlogged flows (see FlowStats.Rate): 1 when every flow
	// got its weighted share, 1/n when one of n flows got everything.
	// FairnessFlows is the number of flows in it; with fewer than 2 the
	// index is 1.
	Fairness      float64
	FairnessFlows int
}

// FlowStats describes one fairness key's backlog in a policy class.
type FlowStats struct {
	// Key is the fairness key; Overflow marks the flow shared by keys
	// past the per-lane bound (its Key is empty).
	Key      string
	Overflow bool
	// Requests queued and the uncached tokens dispatched since the key's
	// flows became backlogged.
	Requests     uint64
	ServedTokens uint64
	// Weight is the key's weight.
	Weight uint32
}

// RankStats describes the load booked on one (worker, DP rank).
type RankStats struct {
	Worker              string
	Rank                uint32
	ActivePrefillTokens uint64
	ActiveBlocks        uint64
	ActiveRequests      uint32
	// Removed is true for a worker no longer in the set.
	Removed bool
	// Engine is the rank's last engine report (ReportLoad), as of the
	// scheduler's last call.
	Engine EngineStats
}

// EngineStats describes what a rank's engine last reported and how the
// scheduler uses it.
type EngineStats struct {
	// Known is set once a report arrived; Fresh while it is within MaxAge.
	Known, Fresh bool
	// Age is how old the report was at the scheduler's last call.
	Age              time.Duration
	Waiting, Running uint32
	KVUsage          float64
	// Since counts requests booked on the rank after the report and still
	// without a first token.
	Since uint32
	// Saturated is set when the saturation gate counts the rank busy.
	Saturated bool
	// Seed is the rank's warm-start load in requests, as reported: its
	// selection cost counts all of it, the slot pool at most its worker's
	// own slots.
	Seed uint32
}
