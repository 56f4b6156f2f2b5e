package demo

import (
	"bytes"
	"io"
	"testing"
)

// TestGateways runs the weighted premium/regular workload through two
// simulated Envoys with 3:1 ingress, each in front of its own tollgate
// replica, one of them the elected scheduler, and checks the bound
// for that experiment: premium takes 250..262 of the first 320
// completions (the ideal is 256). It runs the whole workload, about 1.5 s
// (5 s under the race detector), as TestPremiumRegular runs it through one
// gateway and one tollgate. -short runs a quarter with the bounds scaled
// (n/320) outwards, and a slack of two: the first dispatches, made before
// DRR has a backlog of both classes to arbitrate, are a constant, not a
// share (measured: 62..64 of 80).
func TestGateways(t *testing.T) {
	perClass, slack := upstreamPerClass, 0
	if testing.Short() {
		perClass, slack = upstreamPerClass/4, premiumSeqs/2
	}
	scale := func(v int) int { return v * perClass / upstreamPerClass }
	scaleUp := func(v int) int { return (v*perClass + upstreamPerClass - 1) / upstreamPerClass }
	a, err := runGateways(t.Context(), premiumConfig{
		perClass: perClass, speed: 4, seed: 1, examples: examplesDir(t), stdout: io.Discard, log: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printGateways(&out, a)
	t.Log(out.String())
	if a.Ingress != [2]int{3 * perClass / 2, perClass / 2} {
		t.Errorf("ingress A:B %d:%d, want 3:1 of %d", a.Ingress[0], a.Ingress[1], 2*perClass)
	}
	if a.Outcomes != 2*perClass || a.Non200 != 0 {
		t.Errorf("%d outcomes, %d not 200; want exactly %d, all 200", a.Outcomes, a.Non200, 2*perClass)
	}
	if lo, hi := scale(250)-slack, scaleUp(262)+slack; a.First[0] < lo || a.First[0] > hi {
		t.Errorf("first %d completions are %d premium, %d regular; want %d..%d premium",
			perClass, a.First[0], a.First[1], lo, hi)
	}
	// Each replica served its own gateway's requests, and nothing else.
	if a.Streams != a.Ingress || a.Scheduler != gatewaysScheduler {
		t.Errorf("streams ended OK per replica %v, scheduler %d; want the ingress %v and gateway %d's replica",
			a.Streams, a.Scheduler, a.Ingress, gatewaysScheduler)
	}
	if g := a.GatewayFirst; g[0][0]+g[0][1]+g[1][0]+g[1][1] != perClass || g[0][0]+g[1][0] != a.First[0] {
		t.Errorf("first completions per gateway %v do not add up to the split %v of %d", g, a.First, perClass)
	}
	// The chart: both gateways together, then one line per gateway and
	// class.
	var svg bytes.Buffer
	if err := WriteSVG(&svg, gatewaysChart(a)); err != nil {
		t.Fatal(err)
	}
	panels := parseSVG(t, svg.Bytes())
	if len(panels) != 2 || len(panels[0].series) != 2 || len(panels[1].series) != 4 {
		t.Fatalf("gateways chart: %+v; want the classes, then each gateway's classes", panels)
	}
}
