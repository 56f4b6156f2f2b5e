package sched

import (
	"sort"
	"time"
)

// QueuePolicy orders requests inside one lane of a policy class.
type QueuePolicy uint8

// Queue policies.
const (
	// FCFS scores max(0, priority_jump) - seconds since the scheduler started.
	FCFS QueuePolicy = iota
	// WSPT scores (1 + max(0, priority_jump)) / scheduling_cost.
	WSPT
	// EDF orders by deadline (arrival + the class's SLO), then enqueue
	// order; priority hints do not reorder it. Only flat classes use it.
	EDF
)

// String returns the YAML spelling.
func (q QueuePolicy) String() string {
	switch q {
	case WSPT:
		return "wspt"
	case EDF:
		return "edf"
	case FCFS:
	}
	return "fcfs"
}

// ClassSpec is one Dynamo physical policy class: one DRR queue.
type ClassSpec struct {
	Name string
	// Family and Bucket are both set for a matrix class and both empty for
	// an explicit class.
	Family, Bucket string
	QueuePolicy    QueuePolicy
	// Quantum is the DRR credit per round, in uncached tokens (> 0).
	Quantum uint64
	// BusyThreshold marks a rank busy when its active prefill tokens are
	// strictly greater. Nil means unset.
	BusyThreshold *uint64
	// BusyThresholdFrac marks a rank busy when its active prefill tokens
	// are strictly greater than frac × max_num_batched_tokens. Nil means unset.
	BusyThresholdFrac *float64
	// BusyWorkerRatio, when > 0, makes the pool busy once busy ranks >=
	// ratio × eligible ranks, instead of when every eligible rank is busy.
	BusyWorkerRatio float64
	// Per-worker queue limits; nil means no limit. Each is multiplied by
	// the number of worker instances serving the model.
	RequestLimitPerWorker     *uint64
	RawISLLimitPerWorker      *uint64
	CachedTokenLimitPerWorker *uint64
	// SLO is a flat class's slo_ms: a request's deadline is its arrival
	// plus SLO, never recomputed, and a queued request past it is shed
	// (OutcomeDeadlineExceeded). 0 means no deadline (family/bucket
	// classes and the synthetic class).
	SLO time.Duration
}

// Queues reports whether the class has a busy threshold, which is what
// enables queueing for it under Dynamo's rules.
func (c *ClassSpec) Queues() bool { return c.BusyThreshold != nil || c.BusyThresholdFrac != nil }

// Bucket is one uncached-ISL bucket floor.
type Bucket struct {
	MinTokens uint64
	Name      string
}

// Profile is a resolved set of policy classes: the root profile, a model's
// profile, or the synthetic default. Build it with the sched/policy package
// or SyntheticProfile; the zero value is not usable.
type Profile struct {
	// Classes in YAML order: the class index, the DRR ring order.
	Classes []ClassSpec
	// Buckets sorted by strictly increasing MinTokens, starting at 0.
	Buckets       []Bucket
	DefaultFamily string
	// Matrix maps a family to its class index per bucket (same order as Buckets).
	Matrix map[string][]int
	// Explicit maps an explicit class name to its class index.
	Explicit map[string]int
	// Synthetic marks the no-YAML profile: every request maps to class 0.
	Synthetic bool
	// Flat marks a flat-class profile (default_policy_class): a request
	// names its class exactly (Explicit lists every class), no name means
	// DefaultClass, and an unknown name resolves to no class.
	Flat         bool
	DefaultClass int
}

// SyntheticProfile returns the single-class profile used without a policy
// file: class "default", quantum 1, the given queue policy, and the busy
// fraction from --router-queue-threshold (nil: queueing off).
func SyntheticProfile(frac *float64, policy QueuePolicy) *Profile {
	return &Profile{
		Classes:   []ClassSpec{{Name: "default", QueuePolicy: policy, Quantum: 1, BusyThresholdFrac: frac}},
		Synthetic: true,
	}
}

// Resolve maps a request's requested class value (the
// x-dynamo-meta-policy-class header, trimmed) and its exact uncached tokens
// to a class index, in Dynamo's order: synthetic profile, explicit class
// name, known family or else the default family, combined with the last
// bucket whose floor is <= uncached. In a flat profile an empty value is
// the default class and any other value must name a class exactly; an
// unknown name returns -1.
func (p *Profile) Resolve(requested string, uncached uint64) int {
	if p.Synthetic {
		return 0
	}
	if p.Flat {
		if requested == "" {
			return p.DefaultClass
		}
		if i, ok := p.Explicit[requested]; ok {
			return i
		}
		return -1
	}
	if i, ok := p.Explicit[requested]; ok {
		return i
	}
	row, ok := p.Matrix[requested]
	if !ok {
		row = p.Matrix[p.DefaultFamily]
	}
	// Last floor <= uncached; floors start at 0 so b >= 1.
	b := sort.Search(len(p.Buckets), func(i int) bool { return p.Buckets[i].MinTokens > uncached })
	return row[b-1]
}

// PolicyConfig is a Dynamo router policy file: an optional root profile and
// per-model profiles that replace it wholesale.
type PolicyConfig struct {
	// Schema names the generation of the file it was read from (for
	// check-config and logs); empty without a file.
	Schema string
	Root   *Profile
	Models map[string]*Profile
	// Fallback is used when neither a model profile nor Root applies; nil
	// means SyntheticProfile(nil, FCFS).
	Fallback *Profile
}

// ProfileFor returns the profile for a served model name: models[model],
// then Root, then Fallback.
func (c *PolicyConfig) ProfileFor(model string) *Profile {
	if p, ok := c.Models[model]; ok {
		return p
	}
	if c.Root != nil {
		return c.Root
	}
	if c.Fallback != nil {
		return c.Fallback
	}
	return SyntheticProfile(nil, FCFS)
}
