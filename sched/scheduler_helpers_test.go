package sched

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// simT0 is the scenarios' start time.
var simT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// sim drives a Scheduler at explicit logical times and renders its
// actions compactly for exact comparisons.
type sim struct {
	t   testing.TB
	s   *Scheduler
	now time.Time
}

// newSim builds a scheduler with cfg (Start simT0, a seeded Rand unless
// set) over workers; it fails the test on error.
func newSim(t testing.TB, cfg Config, workers ...Worker) *sim {
	t.Helper()
	cfg.Start = simT0
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(1, 2))
	}
	s, err := New(cfg, workers)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &sim{t: t, s: s, now: simT0}
}

// at moves the clock to simT0+d.
func (h *sim) at(d time.Duration) *sim { h.now = simT0.Add(d); return h }

func (h *sim) submit(r Request) []string  { return simRender(h.s.Submit(h.now, r)) }
func (h *sim) release(id uint64) []string { return simRender(h.s.Release(h.now, id)) }
func (h *sim) first(id uint64) []string   { return simRender(h.s.FirstToken(h.now, id)) }
func (h *sim) tick() []string             { return simRender(h.s.Tick(h.now)) }
func (h *sim) workers(ws ...Worker) []string {
	return simRender(h.s.SetWorkers(h.now, ws))
}

// finish ends id with FirstToken then Release, returning the actions of both.
func (h *sim) finish(id uint64) []string {
	return append(h.first(id), h.release(id)...)
}

// want compares rendered actions.
func (h *sim) want(step string, got []string, want ...string) {
	h.t.Helper()
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		h.t.Fatalf("%s: actions (-want +got):\n%s", step, diff)
	}
}

// simOutcomes renders outcomes in actions.
var simOutcomes = map[Outcome]string{
	OutcomeAdmitted:          "admitted",
	OutcomeQueueFull:         "queue_full",
	OutcomeQueueTimeout:      "queue_timeout",
	OutcomeClassLimit:        "class_limit",
	OutcomeNoEndpoints:       "no_endpoints",
	OutcomePinInvalid:        "pin_invalid",
	OutcomePreempted:         "preempted",
	OutcomeShutdown:          "shutdown",
	OutcomeClientCancelled:   "client_cancelled",
	OutcomeUnknown:           "unknown",
	OutcomeRateLimited:       "rate_limited",
	OutcomeAdmissionFull:     "admission_full",
	OutcomeAdmissionTimeout:  "admission_timeout",
	OutcomeTenantRateLimited: "tenant_rate_limited",
	OutcomeDeadlineExceeded:  "deadline_exceeded",
	OutcomeUnknownClass:      "unknown_class",
}

// simRender turns actions into short strings:
//
//	dispatch ID WORKER/RANK [queued]
//	reject ID OUTCOME [queued] [LIMITKIND CURRENT>=LIMIT] [at STAGE +OVERDUE] [retry RETRYAFTER]
//	preempt ID VICTIMCLASS by PREEMPTORCLASS
//	queue ID
func simRender(as []Action) []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		var b strings.Builder
		switch a.Kind {
		case ActionDispatch:
			fmt.Fprintf(&b, "dispatch %d %s/%d", a.ID, a.Worker, a.Rank)
			if a.Prefill.Worker != "" {
				fmt.Fprintf(&b, " prefill %s/%d", a.Prefill.Worker, a.Prefill.Rank)
			}
		case ActionReject:
			fmt.Fprintf(&b, "reject %d %s", a.ID, simOutcomes[a.Outcome])
		case ActionPreempt:
			fmt.Fprintf(&b, "preempt %d %s by %s", a.ID, a.Priority, a.By)
		case ActionQueue:
			fmt.Fprintf(&b, "queue %d", a.ID)
		default:
			fmt.Fprintf(&b, "kind%d %d", a.Kind, a.ID)
		}
		if a.Queued {
			b.WriteString(" queued")
		}
		if a.LimitKind != LimitNone {
			fmt.Fprintf(&b, " %s %d>=%d", a.LimitKind, a.LimitCurrent, a.LimitValue)
		}
		if a.Stage != StageNone {
			fmt.Fprintf(&b, " at %s +%v", a.Stage, a.Overdue)
		}
		if a.RetryAfter != 0 {
			fmt.Fprintf(&b, " retry %v", a.RetryAfter)
		}
		out = append(out, b.String())
	}
	return out
}

// simWorker is a worker with the given ID, serving every model.
func simWorker(id string, slots uint32) Worker { return Worker{ID: id, MaxRunningRequests: slots} }

// simReq is a request of the given class and ISL.
func simReq(id uint64, p Priority, isl uint64) Request {
	return Request{ID: id, Model: "m", Priority: p, ISL: isl}
}

// simSMG is a configuration with the priority scheduler on (defaults
// unless changed by mod) and no policy file.
func simSMG(mod func(*PriorityConfig)) Config {
	pc := DefaultPriorityConfig()
	if mod != nil {
		mod(&pc)
	}
	return Config{Priority: pc}
}

// simZeroFloors drops every reservation, as the upstream integration tests do.
func simZeroFloors(pc *PriorityConfig) {
	for p := range pc.Classes {
		pc.Classes[p].ReservedFloor = 0
		pc.Classes[p].ReservedPerSlot = 0
	}
}

func simU64(v uint64) *uint64   { return &v }
func simF64(v float64) *float64 { return &v }

// simProfile is an explicit-class profile: each class is chosen by name.
func simProfile(classes ...ClassSpec) *Profile {
	p := &Profile{
		Classes:       classes,
		Buckets:       []Bucket{{MinTokens: 0, Name: "all"}},
		DefaultFamily: classes[0].Name,
		Matrix:        map[string][]int{classes[0].Name: {0}},
		Explicit:      map[string]int{},
	}
	for i, c := range classes[1:] {
		p.Explicit[c.Name] = i + 1
	}
	return p
}
