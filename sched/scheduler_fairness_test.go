package sched

import (
	"fmt"
	"strings"
	"testing"
)

// fairReq is a request of tenant key k.
func fairReq(id uint64, k string) Request {
	r := simReq(id, PriorityDefault, 100)
	r.FairnessKey = k
	return r
}

// One busy worker serves one request at a time: without fairness the
// noisy tenant's backlog goes first (Dynamo's FCFS); with it the two
// tenants alternate.
func TestScheduler_FairnessBetweenTenants(t *testing.T) {
	c := ClassSpec{Name: "c", Quantum: 1, BusyThreshold: simU64(0)}
	for _, tc := range []struct {
		fair bool
		want string
	}{
		{false, "2 3 4 5 6 7 8"},
		{true, "2 7 3 8 4 5 6"},
	} {
		t.Run(fmt.Sprintf("fairness=%v", tc.fair), func(t *testing.T) {
			cfg := Config{Policy: PolicyConfig{Root: simProfile(c)}, Fairness: FairnessConfig{Enabled: tc.fair}}
			h := newSim(t, cfg, simWorker("w", 8))
			h.want("first", h.submit(fairReq(1, "noisy")), "dispatch 1 w/0")
			for id := uint64(2); id <= 6; id++ {
				h.want("noisy queues", h.submit(fairReq(id, "noisy")), "queue "+simItoa(id))
			}
			for id := uint64(7); id <= 8; id++ {
				h.want("quiet queues", h.submit(fairReq(id, "quiet")), "queue "+simItoa(id))
			}
			if tc.fair {
				q := h.s.Stats().Queues[0]
				want := []FlowStats{{Key: "noisy", Requests: 5, Weight: 1}, {Key: "quiet", Requests: 2, Weight: 1}}
				if fmt.Sprint(q.Flows) != fmt.Sprint(want) {
					t.Fatalf("flows %+v, want %+v", q.Flows, want)
				}
			}
			var order []string
			for id := uint64(1); len(order) < 7; {
				acts := h.s.FirstToken(h.now, id)
				if len(acts) != 1 || acts[0].Kind != ActionDispatch {
					t.Fatalf("after first token of %d: %v", id, simRender(acts))
				}
				id = acts[0].ID
				order = append(order, fmt.Sprint(id))
				if len(order) == 3 && tc.fair {
					// Noisy was served at rounds 100 and 200, quiet at 100:
					// rates 1 and 0.5 tokens per round, Jain 1.5²/(2·1.25).
					q := h.s.Stats().Queues[0]
					if q.FairnessFlows != 2 || q.Fairness != 0.9 || len(q.Flows) != 2 || q.Flows[0].ServedTokens != 200 || q.Flows[1].ServedTokens != 100 {
						t.Fatalf("after three dispatches: fairness %v over %d flows, flows %+v", q.Fairness, q.FairnessFlows, q.Flows)
					}
				}
			}
			if got := strings.Join(order, " "); got != tc.want {
				t.Fatalf("dispatch order %s, want %s", got, tc.want)
			}
		})
	}
}

// With the slot gate, the head of a lane's DRR flow can block the lane
// (bulk, no free bulk slot) while another flow holds a dispatchable
// interactive request. An arrival that dispatches at once moves its flow's
// turn, and the pass must then also dispatch the other flow's head.
func TestScheduler_FairnessArrivalMovesTheTurn(t *testing.T) {
	cfg := simSMG(func(pc *PriorityConfig) {
		simZeroFloors(pc)
		pc.Classes[PriorityInteractive].ReservedFloor = 2
		for c := range pc.Classes {
			pc.Classes[c].CanPreempt = false
		}
	})
	cfg.Fairness = FairnessConfig{Enabled: true}
	h := newSim(t, cfg, simWorker("w", 4))
	req := func(id uint64, p Priority, k string) Request {
		r := simReq(id, p, 100)
		r.FairnessKey = k
		return r
	}
	h.want("bulk 1", h.submit(req(1, PriorityBulk, "x")), "dispatch 1 w/0")
	h.want("bulk 2", h.submit(req(2, PriorityBulk, "x")), "dispatch 2 w/0")
	h.want("interactive 3", h.submit(req(3, PriorityInteractive, "y")), "dispatch 3 w/0")
	h.want("interactive 4", h.submit(req(4, PriorityInteractive, "y")), "dispatch 4 w/0")
	h.want("bulk 5 queues: no bulk slot", h.submit(req(5, PriorityBulk, "b")), "queue 5")
	h.want("interactive 6 queues: no slot", h.submit(req(6, PriorityInteractive, "a")), "queue 6")
	h.want("3 ends: flow b's bulk head blocks the lane", h.release(3))
	h.want("4 ends: still blocked", h.release(4))
	h.want("interactive 7 heads flow b; then flow a's turn", h.submit(req(7, PriorityInteractive, "b")),
		"dispatch 7 w/0 queued", "dispatch 6 w/0 queued")
}
