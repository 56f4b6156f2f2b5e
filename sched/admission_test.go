package sched

import (
	"strconv"
	"testing"
	"time"
)

// With priority admission on, the bucket is a pure request-rate check:
// burst --max-concurrent-requests, refill --rate-limit-tokens-per-second,
// tokens never returned.
func TestAdmission_RateCheck(t *testing.T) {
	cfg := simSMG(simZeroFloors)
	cfg.Admission = AdmissionConfig{Capacity: 3, RatePerSecond: 2, QueueSize: 100, QueueTimeout: time.Minute}
	h := newSim(t, cfg, simWorker("w", 64))
	for id := uint64(1); id <= 3; id++ {
		h.want("burst", h.submit(simReq(id, PriorityDefault, 10)), "dispatch "+strconv.FormatUint(id, 10)+" w/0")
	}
	h.want("bucket empty", h.submit(simReq(4, PriorityDefault, 10)), "reject 4 rate_limited")
	h.want("ends return nothing", h.finish(1))
	h.want("still empty", h.submit(simReq(5, PriorityDefault, 10)), "reject 5 rate_limited")
	h.at(499 * time.Millisecond)
	h.want("not yet", h.submit(simReq(6, PriorityDefault, 10)), "reject 6 rate_limited")
	h.at(500 * time.Millisecond)
	h.want("one token after 1/2 s", h.submit(simReq(7, PriorityDefault, 10)), "dispatch 7 w/0")
	h.want("and only one", h.submit(simReq(8, PriorityDefault, 10)), "reject 8 rate_limited")
	if got := h.s.Stats().Admission; got.Allowed != 4 || got.Rejected != 4 || got.Holding != 0 {
		t.Fatalf("stats %+v", got)
	}
}

// Without a rate, or with capacity 0, priority admission has no bucket.
func TestAdmission_RateCheckNeedsBoth(t *testing.T) {
	for _, ac := range []AdmissionConfig{{Capacity: 1}, {RatePerSecond: 5}} {
		cfg := simSMG(simZeroFloors)
		cfg.Admission = ac
		h := newSim(t, cfg, simWorker("w", 64))
		for id := uint64(1); id <= 3; id++ {
			h.want("no check", h.submit(simReq(id, PriorityDefault, 10)), "dispatch "+strconv.FormatUint(id, 10)+" w/0")
		}
	}
}

// SMG's legacy admission: tokens held until the response ends, waiters in
// arrival order, a bounded queue and a timeout.
func TestAdmission_Legacy(t *testing.T) {
	cfg := Config{Admission: AdmissionConfig{Capacity: 2, QueueSize: 2, QueueTimeout: 60 * time.Second}}
	h := newSim(t, cfg, simWorker("w", 64))
	h.want("1", h.submit(simReq(1, PriorityDefault, 10)), "dispatch 1 w/0")
	h.want("2", h.submit(simReq(2, PriorityDefault, 10)), "dispatch 2 w/0")
	h.want("3 waits", h.submit(simReq(3, PriorityDefault, 10)), "queue 3")
	h.at(time.Second)
	h.want("4 waits", h.submit(simReq(4, PriorityDefault, 10)), "queue 4")
	h.want("5 finds the queue full", h.submit(simReq(5, PriorityDefault, 10)), "reject 5 admission_full")
	h.at(2 * time.Second)
	h.want("a first token returns nothing", h.first(1))
	h.want("the end of 1 admits the oldest waiter", h.release(1), "dispatch 3 w/0 queued")
	h.at(61*time.Second - time.Nanosecond)
	h.want("4 still waits", h.tick())
	if at, _ := h.s.NextDeadline(); at != simT0.Add(61*time.Second) {
		t.Fatalf("NextDeadline = %v, want the timeout of 4 at 61s", at.Sub(simT0))
	}
	h.at(61 * time.Second)
	h.want("4 times out", h.tick(), "reject 4 admission_timeout queued")
	st := h.s.Stats().Admission
	if st.Allowed != 3 || st.Rejected != 2 || st.Full != 1 || st.TimedOut != 1 || st.Holding != 2 || st.Waiting != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestAdmission_LegacyMessages(t *testing.T) {
	for _, tc := range []struct {
		queue uint32
		msg   string
	}{{0, "concurrency limit reached and queuing is disabled"}, {1, "admission queue is at capacity"}} {
		h := newSim(t, Config{Admission: AdmissionConfig{Capacity: 1, QueueSize: tc.queue, QueueTimeout: time.Second}}, simWorker("w", 64))
		for id := uint64(1); id <= uint64(tc.queue)+1; id++ {
			h.submit(simReq(id, PriorityDefault, 10))
		}
		acts := h.s.Submit(h.now, simReq(9, PriorityDefault, 10))
		if len(acts) != 1 || acts[0].Outcome != OutcomeAdmissionFull || acts[0].Message != tc.msg {
			t.Fatalf("queue %d: %+v", tc.queue, acts)
		}
	}
}

// A refill also frees tokens; the waiter that heads the queue takes the
// next one when it comes, and a new arrival never overtakes it.
func TestAdmission_LegacyRefill(t *testing.T) {
	cfg := Config{Admission: AdmissionConfig{Capacity: 1, RatePerSecond: 4, QueueSize: 10, QueueTimeout: time.Minute}}
	h := newSim(t, cfg, simWorker("w", 64))
	h.want("1", h.submit(simReq(1, PriorityDefault, 10)), "dispatch 1 w/0")
	h.want("2 waits", h.submit(simReq(2, PriorityDefault, 10)), "queue 2")
	if at, _ := h.s.NextDeadline(); at != simT0.Add(250*time.Millisecond) {
		t.Fatalf("NextDeadline = %v, want the refill at 250ms", at.Sub(simT0))
	}
	h.at(250 * time.Millisecond)
	h.want("3 arrives as the token does: it waits behind 2", h.submit(simReq(3, PriorityDefault, 10)), "dispatch 2 w/0 queued", "queue 3")
	h.at(500 * time.Millisecond)
	h.want("the next refill", h.tick(), "dispatch 3 w/0 queued")
}

// A waiter released by its stream leaves the queue; Drain answers waiters.
func TestAdmission_LegacyCancelAndDrain(t *testing.T) {
	h := newSim(t, Config{Admission: AdmissionConfig{Capacity: 1, QueueSize: 5, QueueTimeout: time.Minute}}, simWorker("w", 64))
	h.submit(simReq(1, PriorityDefault, 10))
	h.submit(simReq(2, PriorityDefault, 10))
	h.submit(simReq(3, PriorityDefault, 10))
	h.want("cancel 2", h.release(2), "reject 2 client_cancelled queued")
	h.want("drain", simRender(h.s.Drain(h.now)), "reject 3 shutdown queued")
	h.want("1 ends: nobody left", h.release(1))
	if st := h.s.Stats().Admission; st.Holding != 0 || st.Waiting != 0 || h.s.adm.bucket.level != 1 {
		t.Fatalf("stats %+v level %v", st, h.s.adm.bucket.level)
	}
}

// A token comes back when its request is refused after taking it.
func TestAdmission_LegacyTokenBackOnReject(t *testing.T) {
	h := newSim(t, Config{Admission: AdmissionConfig{Capacity: 1, QueueSize: 5, QueueTimeout: time.Minute}})
	h.want("no worker", h.submit(simReq(1, PriorityDefault, 10)), "reject 1 no_endpoints")
	if h.s.adm.holding != 0 || h.s.adm.bucket.level != 1 {
		t.Fatalf("holding %d level %v", h.s.adm.holding, h.s.adm.bucket.level)
	}
}

// Legacy admission composes with a flat class: a waiter late for its
// class when it gets its token is shed at the admission stage.
func TestAdmission_LegacyThenSLO(t *testing.T) {
	cfg := Config{
		Policy:    PolicyConfig{Root: simFlat(EDF)},
		Admission: AdmissionConfig{Capacity: 2, QueueSize: 5, QueueTimeout: time.Minute},
	}
	h := newSim(t, cfg, simWorker("w", 0))
	h.want("1", h.submit(flatReq(1, "latency")), "dispatch 1 w/0")
	h.want("2 queues in its class", h.submit(flatReq(2, "standard")), "queue 2")
	h.want("3 waits for a token", h.submit(flatReq(3, "latency")), "queue 3")
	h.at(4 * time.Second)
	h.want("1 ends: 2 dispatches, 3 gets the token, late", h.release(1),
		"dispatch 2 w/0 queued", "reject 3 deadline_exceeded queued at admission +1s")
}
