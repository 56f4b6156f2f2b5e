package fleet

import (
	"net/netip"
	"strings"

	"github.com/tollgate/tollgate/sched"
)

// Target is where a dispatched or routed request goes.
type Target struct {
	Worker  string
	Address string // canonical IP:port
	Rank    uint32
	// MultiRank is true when the worker has more than one DP rank, so the
	// rank header must be sent upstream.
	MultiRank bool
	// Fallbacks are the next-best workers, named after Address in the
	// routing header and metadata (the endpoint picker protocol's list).
	Fallbacks []Target
	// Prefiller is, for a request split into prefill and decode, the
	// IP:port of the worker that runs its prefill (x-prefiller-host-port);
	// empty for a whole request.
	Prefiller string
}

// Endpoints is the routing value: the address, then the fallbacks',
// comma-separated.
func (t *Target) Endpoints() string {
	if len(t.Fallbacks) == 0 {
		return t.Address
	}
	var b strings.Builder
	b.WriteString(t.Address)
	for _, f := range t.Fallbacks {
		b.WriteByte(',')
		b.WriteString(f.Address)
	}
	return b.String()
}

// Target resolves a scheduler decision to an address. ok is false for a
// worker that is not in the set.
func (s *Set) Target(worker string, rank uint32) (Target, bool) {
	a, ok := s.Addr(worker)
	if !ok {
		return Target{}, false
	}
	return Target{Worker: worker, Address: a.Address, Rank: rank, MultiRank: a.Ranks > 1}, true
}

// WithPrefill returns t naming the worker of p as its prefiller (llm-d's
// x-prefiller-host-port), when p names one of the set. A worker with
// several DP ranks is named by its address: its own server places the
// prefill on a rank.
func (s *Set) WithPrefill(t Target, p sched.RankRef) Target {
	if a, ok := s.Addr(p.Worker); ok && p.Worker != "" {
		t.Prefiller = a.Address
	}
	return t
}

// WithFallbacks returns t with the scheduler's fallbacks that can take
// the same request unchanged: none when t needs a DP-rank header (another
// worker would get that rank too), and only single-rank workers at
// another address.
func (s *Set) WithFallbacks(t Target, fbs []sched.RankRef) Target {
	if t.MultiRank || len(fbs) == 0 {
		return t
	}
	for _, f := range fbs {
		ft, ok := s.Target(f.Worker, f.Rank)
		if ok && !ft.MultiRank && ft.Address != t.Address {
			t.Fallbacks = append(t.Fallbacks, ft)
		}
	}
	return t
}

// Allowed returns the IDs of the workers whose address admits accepts,
// in the set's order; none when it accepts no worker of the set.
func (s *Set) Allowed(admits func(netip.AddrPort) bool) []string {
	var ids []string
	for _, w := range s.Sched {
		if admits(s.addrs[w.ID].AddrPort) {
			ids = append(ids, w.ID)
		}
	}
	return ids
}
