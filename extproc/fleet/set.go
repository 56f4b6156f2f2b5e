package fleet

import (
	"net/netip"
	"slices"
	"sync"

	"github.com/tollgate/tollgate/extproc/engine/enginemetrics"
	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/sched"
)

// Set is a validated, immutable worker set, with the projection each
// consumer takes of it. Nothing in it changes after NewSet.
type Set struct {
	// Sched is what the scheduling core sees, in the set's order.
	Sched []sched.Worker
	// KV is every worker's KV-event configuration, in the set's order.
	KV []kvevents.Endpoint
	// Targets are the workers' engine metrics endpoints.
	Targets []enginemetrics.Target
	addrs   map[string]Addr
}

// Addr is how to reach a worker.
type Addr struct {
	// Address is the canonical IP:port.
	Address string
	// AddrPort is Address parsed.
	AddrPort netip.AddrPort
	// Ranks is the worker's data-parallel rank count, at least 1.
	Ranks uint32
}

// NewSet validates ws (ValidateWorkers) and builds the set. ws is not
// retained.
func NewSet(ws []Worker) (*Set, error) {
	if err := ValidateWorkers(ws); err != nil {
		return nil, err
	}
	s := &Set{Sched: make([]sched.Worker, len(ws)), addrs: make(map[string]Addr, len(ws)),
		KV: make([]kvevents.Endpoint, len(ws)), Targets: make([]enginemetrics.Target, len(ws))}
	for i, w := range ws {
		ap, _ := parseAddress(w.Address) // validated above
		role, _ := ParseRole(w.Role)     // validated above
		s.Sched[i] = sched.Worker{
			ID:                 w.ID,
			Model:              w.Model,
			Taints:             slices.Clone(w.Taints),
			DPSize:             w.DPSize,
			DPStart:            w.DPStartRank,
			MaxRunningRequests: w.MaxRunningRequests,
			MaxBatchedTokens:   w.MaxNumBatchedTokens,
			Role:               role,
		}
		s.addrs[w.ID] = Addr{Address: ap.String(), AddrPort: ap, Ranks: max(w.DPSize, 1)}
		u, _ := enginemetrics.ResolveURL(ap.String(), w.MetricsURL) // validated above
		s.Targets[i] = enginemetrics.Target{Worker: w.ID, URL: u, DPStart: w.DPStartRank, DPSize: w.DPSize}
		s.KV[i] = kvevents.Endpoint{Worker: w.ID, Address: ap.Addr().String(),
			Endpoint: w.KVEventsEndpoint, Replay: w.KVEventsReplayEndpoint, DPStart: w.DPStartRank, DPSize: w.DPSize}
	}
	return s, nil
}

// Len is the number of workers.
func (s *Set) Len() int { return len(s.Sched) }

// Addr returns how to reach worker id; ok is false when it is not in the
// set.
func (s *Set) Addr(id string) (Addr, bool) {
	a, ok := s.addrs[id]
	return a, ok
}

// NamesKVEndpoint returns a worker that names its own KV-event endpoint.
func (s *Set) NamesKVEndpoint() (string, bool) {
	for _, ep := range s.KV {
		if ep.Endpoint != "" {
			return ep.Worker, true
		}
	}
	return "", false
}

// Diff is what changed from one applied set to the next, by worker id in
// the new set's order (removed ones in the old set's order).
type Diff struct {
	Added, Removed []string
}

// diff compares old (nil: none) with cur.
func diff(old, cur *Set) Diff {
	var d Diff
	for _, w := range cur.Sched {
		if old == nil {
			d.Added = append(d.Added, w.ID)
		} else if _, ok := old.addrs[w.ID]; !ok {
			d.Added = append(d.Added, w.ID)
		}
	}
	if old != nil {
		for _, w := range old.Sched {
			if _, ok := cur.addrs[w.ID]; !ok {
				d.Removed = append(d.Removed, w.ID)
			}
		}
	}
	return d
}

// Consumer takes its projection of each applied set; d is what changed
// since the set before. It must not block on the network.
type Consumer func(s *Set, d Diff)

// Applier is the one path by which a worker set takes effect: it
// validates the set once, lets the owner of the scheduling core commit it
// (the only step that may refuse), diffs it once against the set before,
// and hands it to every consumer in order. It is safe for concurrent use;
// applies are serialized.
type Applier struct {
	mu        sync.Mutex
	cur       *Set
	commit    func(*Set) error
	consumers []Consumer
}

// NewApplier starts from initial, which the scheduling core already
// holds: every consumer gets it at once, as all added.
func NewApplier(initial *Set, commit func(*Set) error, consumers ...Consumer) *Applier {
	a := &Applier{cur: initial, commit: commit, consumers: consumers}
	d := diff(nil, initial)
	for _, c := range consumers {
		c(initial, d)
	}
	return a
}

// Apply validates ws and makes it the worker set: commit first, then the
// consumers. On an error nothing changes.
func (a *Applier) Apply(ws []Worker) (*Set, error) {
	set, err := NewSet(ws)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.commit(set); err != nil {
		return nil, err
	}
	d := diff(a.cur, set)
	a.cur = set
	for _, c := range a.consumers {
		c(set, d)
	}
	return set, nil
}
