package extproc

import (
	"strings"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/sched"
)

// target is where a dispatched or routed request goes.
type target struct {
	worker  string
	address string // canonical IP:port
	rank    uint32
	// multiRank is true when the worker has more than one DP rank, so the
	// rank header must be sent upstream.
	multiRank bool
	// fallbacks are the next-best workers, named after address in the
	// routing header and metadata (the endpoint picker protocol's list).
	fallbacks []target
}

// endpoints is the routing value: the address, then the fallbacks',
// comma-separated.
func (t *target) endpoints() string {
	if len(t.fallbacks) == 0 {
		return t.address
	}
	var b strings.Builder
	b.WriteString(t.address)
	for _, f := range t.fallbacks {
		b.WriteByte(',')
		b.WriteString(f.address)
	}
	return b.String()
}

// target resolves a scheduler decision to an address. ok is false for a
// worker that is not in the set.
func targetOf(s *fleet.Set, worker string, rank uint32) (target, bool) {
	a, ok := s.Addr(worker)
	if !ok {
		return target{}, false
	}
	return target{worker: worker, address: a.Address, rank: rank, multiRank: a.Ranks > 1}, true
}

// withFallbacks returns t with the scheduler's fallbacks that can take
// the same request unchanged: none when t needs a DP-rank header (another
// worker would get that rank too), and only single-rank workers at
// another address.
func withFallbacks(s *fleet.Set, t target, fbs []sched.RankRef) target {
	if t.multiRank || len(fbs) == 0 {
		return t
	}
	for _, f := range fbs {
		ft, ok := targetOf(s, f.Worker, f.Rank)
		if ok && !ft.multiRank && ft.address != t.address {
			t.fallbacks = append(t.fallbacks, ft)
		}
	}
	return t
}

// allowedIDs returns the IDs of the workers the subset admits, in the set's
// order; none when it admits no worker of the set.
func allowedIDs(s *fleet.Set, sub *subset) []string {
	var ids []string
	for _, w := range s.Sched {
		if a, _ := s.Addr(w.ID); sub.admits(a.AddrPort) {
			ids = append(ids, w.ID)
		}
	}
	return ids
}
