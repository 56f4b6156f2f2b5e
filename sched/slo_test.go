package sched

import (
	"testing"
	"time"
)

// simFlat is a flat profile of Dynamo's slo_rejection test config:
// standard (30 s) and latency (3 s), quantum 512, prefill_busy_threshold 0,
// request_queue_limit_per_worker 32; the default class is standard.
func simFlat(policy QueuePolicy) *Profile {
	class := func(name string, slo time.Duration) ClassSpec {
		return ClassSpec{Name: name, QueuePolicy: policy, Quantum: 512, SLO: slo,
			BusyThreshold: simU64(0), RequestLimitPerWorker: simU64(32)}
	}
	return &Profile{
		Flat:     true,
		Classes:  []ClassSpec{class("standard", 30*time.Second), class("latency", 3*time.Second)},
		Explicit: map[string]int{"standard": 0, "latency": 1},
	}
}

func flatSim(t *testing.T, policy QueuePolicy) *sim {
	return newSim(t, Config{Policy: PolicyConfig{Root: simFlat(policy)}}, simWorker("w", 0))
}

func flatReq(id uint64, class string) Request {
	return Request{ID: id, Model: "m", Class: class, ISL: 100}
}

func TestSLO_ShedAtDeadlineNotBefore(t *testing.T) {
	h := flatSim(t, EDF)
	h.want("busy the worker", h.submit(flatReq(1, "latency")), "dispatch 1 w/0")
	h.want("queue latency", h.submit(flatReq(2, "latency")), "queue 2")
	h.want("queue standard", h.submit(flatReq(3, "")), "queue 3")
	if at, ok := h.s.NextDeadline(); !ok || at != simT0.Add(3*time.Second+time.Nanosecond) {
		t.Fatalf("NextDeadline = %v, %v; want 3s+1ns", at.Sub(simT0), ok)
	}
	h.at(3 * time.Second)
	h.want("at the deadline", h.tick())
	h.at(3*time.Second + time.Nanosecond)
	h.want("past the deadline", h.tick(), "reject 2 deadline_exceeded queued at dispatch +1ns")
	h.want("worker free", h.first(1), "dispatch 3 w/0 queued")
	st := h.s.Stats()
	if got := st.Queues[1].Expired; got != [NumDeadlineStages]uint64{0, 0, 1} {
		t.Fatalf("latency expired = %v", got)
	}
}

func TestSLO_ShedSetsDetails(t *testing.T) {
	h := flatSim(t, EDF)
	h.submit(flatReq(1, "latency"))
	h.submit(flatReq(2, "latency"))
	h.at(5 * time.Second)
	acts := h.s.Tick(h.now)
	if len(acts) != 1 {
		t.Fatalf("actions %v", simRender(acts))
	}
	a := acts[0]
	if a.Outcome != OutcomeDeadlineExceeded || a.PolicyClass != "latency" || a.Stage != StageDispatch ||
		a.SLO != 3*time.Second || a.Overdue != 2*time.Second || !a.Queued || a.Wait != 5*time.Second {
		t.Fatalf("shed action %+v", a)
	}
}

// A late request is shed by whatever call comes first, before that call
// could serve it.
func TestSLO_ShedBeforeAnyCallServes(t *testing.T) {
	h := flatSim(t, EDF)
	h.submit(flatReq(1, "latency"))
	h.submit(flatReq(2, "latency"))
	h.at(4 * time.Second)
	h.want("first token frees the worker", h.first(1), "reject 2 deadline_exceeded queued at dispatch +1s")
}

func TestSLO_AdmissionStage(t *testing.T) {
	h := flatSim(t, EDF)
	late := flatReq(1, "latency")
	late.Arrival = simT0.Add(-4 * time.Second)
	h.want("a late arrival the worker can take is served", h.submit(late), "dispatch 1 w/0")
	late.ID = 2
	h.want("a late arrival that must queue is shed", h.submit(late), "reject 2 deadline_exceeded at admission +1s")
	onTime := flatReq(3, "latency")
	onTime.Arrival = simT0.Add(-2 * time.Second)
	h.want("on time", h.submit(onTime), "queue 3")
	if at, _ := h.s.NextDeadline(); at != simT0.Add(time.Second+time.Nanosecond) {
		t.Fatalf("deadline counts from the arrival: NextDeadline = %v", at.Sub(simT0))
	}
	if got := h.s.Stats().Queues[1].Expired[StageAdmission]; got != 1 {
		t.Fatalf("admission sheds = %d", got)
	}
}

func TestSLO_ClassNames(t *testing.T) {
	h := flatSim(t, EDF)
	h.want("unknown name", h.submit(flatReq(1, "Latency")), "reject 1 unknown_class")
	acts := h.s.Submit(h.now, flatReq(2, ""))
	if acts[0].PolicyClass != "standard" {
		t.Fatalf("no name: class %q, want the default", acts[0].PolicyClass)
	}
}

// EDF ignores the strict-priority hint; a flat fcfs class honours it.
func TestSLO_EDFIgnoresHints(t *testing.T) {
	for _, tc := range []struct {
		policy QueuePolicy
		first  string
	}{{EDF, "dispatch 2 w/0 queued"}, {FCFS, "dispatch 3 w/0 queued"}} {
		h := flatSim(t, tc.policy)
		h.submit(flatReq(1, "standard"))
		h.submit(flatReq(2, "standard"))
		hinted := flatReq(3, "standard")
		hinted.StrictPriority, hinted.HasStrictPriority = 5, true
		h.at(time.Second)
		h.want("hinted queues", h.submit(hinted), "queue 3")
		h.want(tc.policy.String(), h.first(1), tc.first)
	}
}

// Shedding spends no DRR credit and leaves the cursor where it was.
func TestSLO_ShedSpendsNoCredit(t *testing.T) {
	h := flatSim(t, EDF)
	h.submit(flatReq(1, "standard"))
	for id := uint64(2); id <= 5; id++ {
		h.submit(flatReq(id, []string{"standard", "latency"}[id%2]))
	}
	h.want("one pass", h.first(1), "dispatch 2 w/0 queued")
	mq := h.s.models[""]
	deficits, cursor, carry := [2]uint64{mq.ring.deficit(0), mq.ring.deficit(1)}, mq.ring.cursor, mq.ring.carry
	h.at(3*time.Second + time.Nanosecond)
	h.want("latency heads shed", h.tick(),
		"reject 3 deadline_exceeded queued at dispatch +1ns", "reject 5 deadline_exceeded queued at dispatch +1ns")
	if got := [2]uint64{mq.ring.deficit(0), mq.ring.deficit(1)}; got[0] != deficits[0] || got[1] != 0 {
		t.Fatalf("deficits %v -> %v; want standard unchanged and the emptied latency at 0", deficits, got)
	}
	if mq.ring.cursor != cursor || mq.ring.carry != carry {
		t.Fatalf("cursor %d/%d -> %d/%d", cursor, carry, mq.ring.cursor, mq.ring.carry)
	}
}
