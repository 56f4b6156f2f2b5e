package demo

import (
	"bytes"
	"io"
	"testing"

	"github.com/tollgate/tollgate/sched/policy"
)

// TestFairness runs the noisy-neighbour workload through the whole stack
// with fairness off and by tenant. What the scheduler decides is the order
// of dispatches, so the checks are on the service each tenant got while
// both had requests waiting: nearly nothing for the quiet tenant behind
// Dynamo's FCFS lane, about half with DRR between the tenants' flows.
// With -short the workload is a fifth (100 and 10 requests).
func TestFairness(t *testing.T) {
	noisy, quiet := noisyRequests, quietRequests
	if testing.Short() {
		noisy, quiet = noisy/5, quiet/5
	}
	arms, err := runFairness(t.Context(), fairConfig{
		noisy: noisy, quiet: quiet, speed: 4, seed: 1, stdout: io.Discard, log: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printFairness(&out, arms)
	t.Log(out.String())
	if len(arms) != 2 || arms[0].Mode != policy.FairnessNone || arms[1].Mode != policy.FairnessTenant {
		t.Fatalf("arms %v", arms)
	}
	for _, a := range arms {
		if a.Non200 != 0 || a.Both == 0 {
			t.Errorf("--fairness %s: %d answers not 200, %d dispatches with both tenants waiting", a.Mode, a.Non200, a.Both)
		}
	}
	if off := arms[0].Share[1]; off > 0.10 {
		t.Errorf("--fairness none: the quiet tenant got %.0f%% of the service while both waited, want FCFS behind the flood (at most 10%%)", 100*off)
	}
	if on := arms[1].Share[1]; on < 0.25 {
		t.Errorf("--fairness tenant: the quiet tenant got %.0f%% of the service while both waited, want a fair share (at least 25%%)", 100*on)
	}

	var svg bytes.Buffer
	if err := WriteSVG(&svg, fairChart(arms)); err != nil {
		t.Fatal(err)
	}
	if panels := parseSVG(t, svg.Bytes()); len(panels) != 2 || len(panels[0].series) != 2 || len(panels[1].series) != 2 {
		t.Fatalf("fairness chart: %d panels, want 2 with one polyline per tenant", len(panels))
	}
}
