package sched

import (
	"strings"
	"testing"
)

// Submit reports queuing explicitly: an ActionQueue is its last action
// exactly when the arrival is still queued when the call returns, and a
// request reported queued later gets one dispatch or reject.
func TestScheduler_QueueActionReportsQueuing(t *testing.T) {
	h := newSim(t, simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityBulk].QueueSize = 1
	}), simWorker("w", 1))
	h.want("dispatched at once: no queue action", h.submit(simReq(1, PriorityBulk, 8)), "dispatch 1 w/0")
	acts := h.s.Submit(h.now, simReq(2, PriorityBulk, 8))
	h.want("queued: the queue action is the last", simRender(acts), "queue 2")
	if a := acts[0]; a.Priority != PriorityBulk || a.Model != "m" || a.PolicyClass != "default" || a.Outcome != OutcomeUnknown {
		t.Fatalf("queue action %+v", a)
	}
	h.want("rejected on arrival: no queue action", h.submit(simReq(3, PriorityBulk, 8)), "reject 3 queue_full")
	h.want("a preemptor queues after naming its victim", h.submit(simReq(4, PrioritySystem, 8)),
		"preempt 1 bulk by system", "queue 4")
	h.want("the victim's release hands the slot to the preemptor", h.release(1), "dispatch 4 w/0 queued")
	h.want("then the queued bulk request by a later call", h.release(4), "dispatch 2 w/0 queued")
	h.want("an in-flight release", h.release(2))
	h.want("idle again: dispatched at once", h.submit(simReq(5, PriorityBulk, 8)), "dispatch 5 w/0")
}

// An arrival that queues and leaves in its own Submit's dispatch pass is
// not reported queued either: see "exact lane dispatches on enqueue" in
// TestDynamo_NewArrivalsDoNotBypassBacklog.

// While draining every arrival is refused, even one that could dispatch
// at once; after Resume the same arrival dispatches.
func TestScheduler_DrainRefusesArrivalsThatCouldDispatch(t *testing.T) {
	h := newSim(t, Config{}, simWorker("w", 4))
	h.want("nothing queued", simRender(h.s.Drain(h.now)))
	h.want("a free slot, but draining", h.submit(simReq(1, PriorityDefault, 8)), "reject 1 shutdown")
	h.s.Resume()
	h.want("after Resume", h.submit(simReq(1, PriorityDefault, 8)), "dispatch 1 w/0")
}

// Every enum value below its sentinel has a distinct, non-empty name, and
// values past it are named without a panic.
func TestEnums_StringsDistinctAndTotal(t *testing.T) {
	check := func(kind string, n int, name func(int) string) {
		t.Helper()
		seen := map[string]int{}
		for i := range n {
			s := name(i)
			if s == "" || strings.Contains(s, "(") {
				t.Errorf("%s %d: name %q", kind, i, s)
			}
			if j, dup := seen[s]; dup {
				t.Errorf("%s %d and %d share the name %q", kind, j, i, s)
			}
			seen[s] = i
		}
		for _, i := range []int{n, n + 1, 255} {
			if s := name(i); s == "" || !strings.Contains(s, "(") {
				t.Errorf("%s %d past the sentinel: name %q", kind, i, s)
			}
		}
	}
	check("outcome", int(NumOutcomes), func(i int) string { return Outcome(i).String() })
	check("limit kind", int(NumLimitKinds), func(i int) string { return LimitKind(i).String() })
	check("limit reason", int(NumLimitKinds), func(i int) string { return LimitKind(i).Reason() })
	check("action kind", int(NumActionKinds), func(i int) string { return ActionKind(i).String() })
	if OutcomeQueueFull.String() != "queue_full" || OutcomeClientCancelled.String() != "client_cancelled" || Outcome(42).String() != "outcome(42)" {
		t.Errorf("outcome names %s %s %s", OutcomeQueueFull, OutcomeClientCancelled, Outcome(42))
	}
	if ActionQueue.String() != "queue" || LimitRawISLTokens.String() != "raw_isl_tokens" || LimitCachedTokens.Reason() != "cached_token_limit" {
		t.Errorf("names %s %s %s", ActionQueue, LimitRawISLTokens, LimitCachedTokens.Reason())
	}
}
