package demo

import (
	"bytes"
	"io"
	"testing"
)

// TestGateways runs the weighted premium/regular workload through two
// simulated Envoys with 3:1 ingress in front of one tollgate and checks the
// weighted arm's bound of TestPremiumRegular: the split is the scheduler's,
// whatever gateway a request came through. It runs half the workload
// (TestPremiumRegular runs the whole one through one gateway), -short a
// quarter, with the bounds scaled as there.
func TestGateways(t *testing.T) {
	perClass := upstreamPerClass / 2
	if testing.Short() {
		perClass = upstreamPerClass / 4
	}
	scale := func(v int) int { return v * perClass / upstreamPerClass }
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
	if p, r := a.First[0], a.First[1]; p < scale(240) || r < scale(48) {
		t.Errorf("first %d completions are %d premium, %d regular; want premium >= %d and regular >= %d",
			perClass, p, r, scale(240), scale(48))
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
