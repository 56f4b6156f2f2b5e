package demo

import (
	"bytes"
	"io"
	"testing"
)

// TestPriorityAdmission runs the priority scenario and checks what it is
// there to show: the tenant clamp, exactly one preemption, interactive
// traffic passing the bulk backlog, and that the client's and the server's
// accounts agree. With the race detector or -short phase 1 is smaller
// (still more than twice the bulk slots, so most bulk jobs queue); phase 2
// is fixed by the capacity.
func TestPriorityAdmission(t *testing.T) {
	work := defaultPhase1
	if raceEnabled || testing.Short() {
		work = phase1Workload{bulk: 150, users: [2]int{8, 2}, perUser: [2]int{8, 5}, think: 0.15}
	}
	r, err := runPriority(t.Context(), priorityConfig{
		phase1: work, speed: 4, seed: 1, examples: examplesDir(t), stdout: io.Discard, log: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printPriority(&out, r)
	t.Log(out.String())

	if r.Capacity != 256 || r.BulkSlots != 70 || r.InteractiveSlots != 154 {
		t.Errorf("capacity %d, bulk slots %d, interactive slots %d; want 256, 70 and 154 (priority.yaml on 2 x 128)",
			r.Capacity, r.BulkSlots, r.InteractiveSlots)
	}
	interactive, clamped, bulk := r.Classes[pcInteractive], r.Classes[pcClamped], r.Classes[pcBulk]

	// The clamp: every auth:free request asked for system and ran as default.
	wantClamped := work.users[1] * work.perUser[1]
	if clamped.Sent != wantClamped || r.Clamps != uint64(wantClamped) {
		t.Errorf("auth:free sent %d requests, smg_scheduler_clamp_total counted %d; want %d each", clamped.Sent, r.Clamps, wantClamped)
	}
	if clamped.Effective != "default" || clamped.Server.Admitted != uint64(clamped.Sent) {
		t.Errorf("clamped class %q, server admitted %d as default; want default, %d", clamped.Effective, clamped.Server.Admitted, clamped.Sent)
	}

	// Exactly one preemption, of a bulk job, seen by the client and counted
	// by the server.
	if r.Preemptions != 1 || r.BulkByInteractive != 1 || bulk.Preempted != 1 || bulk.Server.Preempted != 1 {
		t.Errorf("preemptions: server %d (bulk by interactive %d), bulk client %d, bulk server outcome %d; want exactly 1 each",
			r.Preemptions, r.BulkByInteractive, bulk.Preempted, bulk.Server.Preempted)
	}
	if interactive.Preempted != 0 || clamped.Preempted != 0 {
		t.Errorf("interactive or default requests were preempted: %d, %d", interactive.Preempted, clamped.Preempted)
	}

	// Reservations: interactive waits less than bulk.
	if interactive.WaitP50 >= bulk.WaitP50 {
		t.Errorf("interactive p50 wait %v is not below bulk's %v", interactive.WaitP50, bulk.WaitP50)
	}
	if bulk.Server.Queued == 0 {
		t.Errorf("no bulk request queued; the bulk backlog did not form")
	}

	// Everything else completed, and the client's counts match the server's.
	for _, c := range r.Classes {
		if c.Admitted != c.Sent || c.OK != c.Sent-c.Preempted || len(c.Rejected) != 0 {
			t.Errorf("%s: sent %d, admitted %d, ok %d, preempted %d, rejected %v", c.Name, c.Sent, c.Admitted, c.OK, c.Preempted, c.Rejected)
		}
		if c.Server.Admitted != uint64(c.Admitted) || c.Server.Preempted != uint64(c.Preempted) || c.Server.QueueFull+c.Server.QueueTimeout != 0 {
			t.Errorf("%s: client admitted %d preempted %d, server %+v", c.Name, c.Admitted, c.Preempted, c.Server)
		}
	}
	if total := len(r.Series); total != len(priorityClasses) {
		t.Errorf("%d chart series, want %d", total, len(priorityClasses))
	}

	var svg bytes.Buffer
	if err := WriteSVG(&svg, priorityChart(r)); err != nil {
		t.Fatal(err)
	}
	panels := parseSVG(t, svg.Bytes())
	if len(panels) != 1 || len(panels[0].series) != len(priorityClasses) {
		t.Fatalf("priority chart: %+v; want one panel with one polyline per class", panels)
	}
}
