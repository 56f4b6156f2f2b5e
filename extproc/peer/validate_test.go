package peer

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/sched"
)

func str(n int) string { return strings.Repeat("x", n) }

func strs(count, size int) []string {
	ss := make([]string, count)
	for i := range ss {
		ss[i] = str(size)
	}
	return ss
}

func cached(count, size int) []sched.CachedTokens {
	cs := make([]sched.CachedTokens, count)
	for i := range cs {
		cs[i] = sched.CachedTokens{Worker: str(size), Tokens: 1}
	}
	return cs
}

func TestUpValidate(t *testing.T) {
	submit := func(f func(r *sched.Request)) *Up {
		r := sampleRequest(2, 2)
		f(r)
		return &Up{Kind: UpSubmit, ID: 1, Request: r}
	}
	adopt := func(f func(b *sched.Booking)) *Up {
		b := &sched.Booking{Worker: "w", Prefill: sched.RankRef{Worker: "p"}}
		f(b)
		return &Up{Kind: UpAdopt, ID: 1, Request: sampleRequest(0, 0), Booking: b}
	}
	tests := []struct {
		name string
		u    *Up
		err  string // "" when valid
	}{
		{"kind 0", &Up{ID: 1}, "kind out of range"},
		{"kind past the last", &Up{Kind: numUpKinds, ID: 1}, "kind out of range"},
		{"hello", &Up{Kind: UpHello, Front: "f"}, ""},
		{"hello with id", &Up{Kind: UpHello, ID: 1, Front: "f"}, "id 1"},
		{"hello without front", &Up{Kind: UpHello}, "no front"},
		{"hello front at limit", &Up{Kind: UpHello, Front: str(MaxIdentityBytes)}, ""},
		{"hello front over", &Up{Kind: UpHello, Front: str(MaxIdentityBytes + 1)}, "front is 254 bytes, over 253"},
		{"release", &Up{Kind: UpRelease, ID: 1}, ""},
		{"release id 0", &Up{Kind: UpRelease}, "id 0"},
		{"first token id 0", &Up{Kind: UpFirstToken}, "id 0"},
		{"usage", &Up{Kind: UpUsage, ID: 1, Prompt: 1, Completion: 2}, ""},
		{"front on release", &Up{Kind: UpRelease, ID: 1, Front: "f"}, "front set"},
		{"request on release", &Up{Kind: UpRelease, ID: 1, Request: &sched.Request{}}, "request set"},
		{"booking on submit", &Up{Kind: UpSubmit, ID: 1, Request: &sched.Request{}, Booking: &sched.Booking{}}, "booking set"},
		{"worker on usage", &Up{Kind: UpUsage, ID: 1, Worker: "w"}, "worker or rank set"},
		{"rank on release", &Up{Kind: UpRelease, ID: 1, Rank: 1}, "worker or rank set"},
		{"usage on served", &Up{Kind: UpServed, ID: 1, Worker: "w", Prompt: 1}, "token usage set"},
		{"served", &Up{Kind: UpServed, ID: 1, Worker: "w", Rank: 1}, ""},
		{"served without worker", &Up{Kind: UpServed, ID: 1}, "no worker"},
		{"served worker at limit", &Up{Kind: UpServed, ID: 1, Worker: str(MaxStringBytes)}, ""},
		{"served worker over", &Up{Kind: UpServed, ID: 1, Worker: str(MaxStringBytes + 1)}, "worker is 1025 bytes"},
		{"submit without request", &Up{Kind: UpSubmit, ID: 1}, "no request"},
		{"submit zero request", &Up{Kind: UpSubmit, ID: 1, Request: &sched.Request{}}, ""},
		{"submit", submit(func(*sched.Request) {}), ""},
		{"priority at limit", submit(func(r *sched.Request) { r.Priority = sched.NumPriorities - 1 }), ""},
		{"priority over", submit(func(r *sched.Request) { r.Priority = sched.NumPriorities }), "priority 4 out of range"},
		{"model at limit", submit(func(r *sched.Request) { r.Model = str(MaxStringBytes) }), ""},
		{"model over", submit(func(r *sched.Request) { r.Model = str(MaxStringBytes + 1) }), "request model is 1025 bytes"},
		{"class at limit", submit(func(r *sched.Request) { r.Class = str(MaxStringBytes) }), ""},
		{"class over", submit(func(r *sched.Request) { r.Class = str(MaxStringBytes + 1) }), "request class is 1025"},
		{"tenant at limit", submit(func(r *sched.Request) { r.Tenant = str(MaxStringBytes) }), ""},
		{"tenant over", submit(func(r *sched.Request) { r.Tenant = str(MaxStringBytes + 1) }), "request tenant is 1025"},
		{"fairness key at limit", submit(func(r *sched.Request) { r.FairnessKey = str(MaxStringBytes) }), ""},
		{"fairness key over", submit(func(r *sched.Request) { r.FairnessKey = str(MaxStringBytes + 1) }), "request fairness key is 1025"},
		{"cached at limit", submit(func(r *sched.Request) { r.Cached = cached(MaxCached, MaxStringBytes) }), ""},
		{"cached over", submit(func(r *sched.Request) { r.Cached = cached(MaxCached+1, 1) }), "request cached has 4097 entries, over 4096"},
		{"cached worker over", submit(func(r *sched.Request) { r.Cached = cached(1, MaxStringBytes+1) }), "request cached worker is 1025"},
		{"pin worker at limit", submit(func(r *sched.Request) { r.Pin.Worker = str(MaxStringBytes) }), ""},
		{"pin worker over", submit(func(r *sched.Request) { r.Pin.Worker = str(MaxStringBytes + 1) }), "request pin worker is 1025"},
		{"taints at limit", submit(func(r *sched.Request) { r.RequiredTaints = strs(MaxRequiredTaints, MaxStringBytes) }), ""},
		{"taints over", submit(func(r *sched.Request) { r.RequiredTaints = strs(MaxRequiredTaints+1, 1) }), "request required taints has 65 entries"},
		{"taint over", submit(func(r *sched.Request) { r.RequiredTaints = strs(1, MaxStringBytes+1) }), "request required taints entry is 1025"},
		{"allowed at limit", submit(func(r *sched.Request) { r.AllowedWorkers = strs(MaxAllowedWorkers, MaxStringBytes) }), ""},
		{"allowed over", submit(func(r *sched.Request) { r.AllowedWorkers = strs(MaxAllowedWorkers+1, 1) }), "request allowed workers has 4097 entries"},
		{"allowed worker over", submit(func(r *sched.Request) { r.AllowedWorkers = strs(1, MaxStringBytes+1) }), "request allowed workers entry is 1025"},
		{"adopt", adopt(func(*sched.Booking) {}), ""},
		{"adopt without booking", &Up{Kind: UpAdopt, ID: 1, Request: &sched.Request{}}, "no booking"},
		{"adopt without request", &Up{Kind: UpAdopt, ID: 1, Booking: &sched.Booking{}}, "no request"},
		{"adopt bad request", &Up{Kind: UpAdopt, ID: 1, Request: &sched.Request{Model: str(MaxStringBytes + 1)}, Booking: &sched.Booking{}}, "request model"},
		{"booking worker at limit", adopt(func(b *sched.Booking) { b.Worker = str(MaxStringBytes) }), ""},
		{"booking worker over", adopt(func(b *sched.Booking) { b.Worker = str(MaxStringBytes + 1) }), "booking worker is 1025"},
		{"booking prefill at limit", adopt(func(b *sched.Booking) { b.Prefill.Worker = str(MaxStringBytes) }), ""},
		{"booking prefill over", adopt(func(b *sched.Booking) { b.Prefill.Worker = str(MaxStringBytes + 1) }), "booking prefill worker is 1025"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkValidate(t, tt.u.Validate(), tt.err) })
	}
}

func TestDownValidate(t *testing.T) {
	decided := func(f func(d *Decision)) *Down {
		d := &Decision{Action: sampleAction(), Target: sampleTarget()}
		f(d)
		return &Down{Kind: DownDecided, ID: 1, Decision: d}
	}
	tests := []struct {
		name string
		d    *Down
		err  string // "" when valid
	}{
		{"kind 0", &Down{ID: 1}, "kind out of range"},
		{"kind past the last", &Down{Kind: numDownKinds, ID: 1}, "kind out of range"},
		{"welcome", &Down{Kind: DownWelcome, Scheduler: "s"}, ""},
		{"welcome with id", &Down{Kind: DownWelcome, ID: 1, Scheduler: "s"}, "id 1"},
		{"welcome without scheduler", &Down{Kind: DownWelcome}, "no scheduler"},
		{"scheduler at limit", &Down{Kind: DownWelcome, Scheduler: str(MaxIdentityBytes)}, ""},
		{"scheduler over", &Down{Kind: DownWelcome, Scheduler: str(MaxIdentityBytes + 1)}, "scheduler is 254 bytes"},
		{"queued", &Down{Kind: DownQueued, ID: 1}, ""},
		{"queued id 0", &Down{Kind: DownQueued}, "id 0"},
		{"preempted", &Down{Kind: DownPreempted, ID: 1}, ""},
		{"fronts", &Down{Kind: DownFronts, Fronts: []string{"a", "b"}}, ""},
		{"fronts with id", &Down{Kind: DownFronts, ID: 1, Fronts: []string{"a"}}, "id 1"},
		{"empty front", &Down{Kind: DownFronts, Fronts: []string{""}}, "no front"},
		{"fronts over", &Down{Kind: DownFronts, Fronts: make([]string, MaxFronts+1)}, "257 fronts"},
		{"fronts on queued", &Down{Kind: DownQueued, ID: 1, Fronts: []string{"a"}}, "fronts set"},
		{"scheduler on queued", &Down{Kind: DownQueued, ID: 1, Scheduler: "s"}, "scheduler set"},
		{"decision on preempted", &Down{Kind: DownPreempted, ID: 1, Decision: &Decision{}}, "decision set"},
		{"decided without decision", &Down{Kind: DownDecided, ID: 1}, "no decision"},
		{"decided", decided(func(*Decision) {}), ""},
		{"reject", decided(func(d *Decision) {
			d.Action = sched.Action{Kind: sched.ActionReject, ID: 1, Outcome: sched.OutcomeNoEndpoints}
			d.Target = fleet.Target{}
		}), ""},
		{"action kind queue", decided(func(d *Decision) { d.Action.Kind = sched.ActionQueue }), "action kind queue is neither"},
		{"action kind 0", decided(func(d *Decision) { d.Action.Kind = 0 }), "action kind unknown is neither"},
		{"outcome at limit", decided(func(d *Decision) { d.Action.Outcome = sched.NumOutcomes - 1 }), ""},
		{"outcome over", decided(func(d *Decision) { d.Action.Outcome = sched.NumOutcomes }), "action outcome"},
		{"priority over", decided(func(d *Decision) { d.Action.Priority = sched.NumPriorities }), "action priority"},
		{"by over", decided(func(d *Decision) { d.Action.By = sched.NumPriorities }), "action priority"},
		{"limit kind over", decided(func(d *Decision) { d.Action.LimitKind = sched.NumLimitKinds }), "action limit kind"},
		{"stage over", decided(func(d *Decision) { d.Action.Stage = sched.NumDeadlineStages }), "action stage"},
		{"action fallbacks", decided(func(d *Decision) { d.Action.Fallbacks = []sched.RankRef{{Worker: "w"}} }), "action fallbacks set"},
		{"action worker at limit", decided(func(d *Decision) { d.Action.Worker = str(MaxStringBytes) }), ""},
		{"action worker over", decided(func(d *Decision) { d.Action.Worker = str(MaxStringBytes + 1) }), "action worker is 1025"},
		{"action model over", decided(func(d *Decision) { d.Action.Model = str(MaxStringBytes + 1) }), "action model is 1025"},
		{"action class at limit", decided(func(d *Decision) { d.Action.PolicyClass = str(MaxStringBytes) }), ""},
		{"action class over", decided(func(d *Decision) { d.Action.PolicyClass = str(MaxStringBytes + 1) }), "action policy class is 1025"},
		{"action prefill over", decided(func(d *Decision) { d.Action.Prefill.Worker = str(MaxStringBytes + 1) }), "action prefill worker is 1025"},
		{"message at limit", decided(func(d *Decision) { d.Action.Message = str(MaxMessageTextBytes) }), ""},
		{"message over", decided(func(d *Decision) { d.Action.Message = str(MaxMessageTextBytes + 1) }), "action message is 4097 bytes, over 4096"},
		{"target worker at limit", decided(func(d *Decision) { d.Target.Worker = str(MaxStringBytes) }), ""},
		{"target worker over", decided(func(d *Decision) { d.Target.Worker = str(MaxStringBytes + 1) }), "target worker is 1025"},
		{"target address over", decided(func(d *Decision) { d.Target.Address = str(MaxStringBytes + 1) }), "target address is 1025"},
		{"target prefiller over", decided(func(d *Decision) { d.Target.Prefiller = str(MaxStringBytes + 1) }), "target prefiller is 1025"},
		{"fallbacks at limit", decided(func(d *Decision) { d.Target.Fallbacks = make([]fleet.Target, sched.MaxFallbacks) }), ""},
		{"fallbacks over", decided(func(d *Decision) { d.Target.Fallbacks = make([]fleet.Target, sched.MaxFallbacks+1) }), "target fallbacks has 9 entries, over 8"},
		{"fallback address at limit", decided(func(d *Decision) { d.Target.Fallbacks[0].Address = str(MaxStringBytes) }), ""},
		{"fallback address over", decided(func(d *Decision) { d.Target.Fallbacks[0].Address = str(MaxStringBytes + 1) }), "target fallback address is 1025"},
		{"nested fallbacks", decided(func(d *Decision) { d.Target.Fallbacks[0].Fallbacks = []fleet.Target{{}} }), "target fallback fallbacks has 1 entries, over 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkValidate(t, tt.d.Validate(), tt.err) })
	}
}

// checkValidate holds a Validate error to want: nil when want is "", else
// a "peer: invalid " error that contains want.
func checkValidate(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("Validate = %v, want nil", err)
	case want != "" && err == nil:
		t.Errorf("Validate = nil, want %q", want)
	case err != nil && (!strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "peer: invalid ")):
		t.Errorf("Validate = %q, want peer: invalid ...%q", err, want)
	}
}

func TestKindString(t *testing.T) {
	if got := UpUsage.String(); got != "usage" {
		t.Errorf("UpUsage = %q", got)
	}
	if got := numUpKinds.String(); got != "up_kind(9)" {
		t.Errorf("numUpKinds = %q", got)
	}
	if got := DownPreempted.String(); got != "preempted" {
		t.Errorf("DownPreempted = %q", got)
	}
	if got := DownKind(200).String(); got != "down_kind(200)" {
		t.Errorf("DownKind(200) = %q", got)
	}
}
