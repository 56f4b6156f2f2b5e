package demo

import (
	"bytes"
	"io"
	"testing"
)

// TestPremiumRegular runs Dynamo's premium/regular regression workload
// through the whole stack and asserts the regression test's bounds on the
// full workload (320 requests per class; about 6 s under the race
// detector). With -short the workload is scaled to 80 requests per class
// and every bound is scaled in proportion (n/320): the ratios, not the
// absolute counts, are what DRR decides. The bounds (the first-320
// splits) are checked exactly as scaled; upstream's "regular left" bounds
// get a constant slack of the worker's sequences in a scaled run.
func TestPremiumRegular(t *testing.T) {
	perClass := upstreamPerClass
	if testing.Short() {
		perClass = 80
	}
	scale := func(v int) int { return v * perClass / upstreamPerClass }
	// "Regular left when premium finished" is read at the end of the run,
	// where the worker's in-flight sequences are a constant, not a share:
	// a scaled run allows that many on either side of the scaled bound.
	slack := 0
	if perClass != upstreamPerClass {
		slack = premiumSeqs
	}
	arms, err := runPremium(t.Context(), premiumConfig{
		perClass: perClass, speed: 4, seed: 1, examples: examplesDir(t), stdout: io.Discard, log: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printPremium(&out, arms)
	t.Log(out.String())
	if len(arms) != 2 {
		t.Fatalf("got %d arms, want 2", len(arms))
	}
	equal, weighted := arms[0], arms[1]
	if equal.Quanta != [2]uint64{512, 512} || weighted.Quanta != [2]uint64{512, 128} {
		t.Fatalf("quanta read from the examples: equal %v, weighted %v; want 512:512 and 512:128", equal.Quanta, weighted.Quanta)
	}
	for _, a := range arms {
		if a.Outcomes != 2*perClass || a.Non200 != 0 {
			t.Errorf("%s: %d outcomes, %d not 200; want exactly %d, all 200", a.File, a.Outcomes, a.Non200, 2*perClass)
		}
	}
	if p := equal.First[0]; p < scale(140) || p > scale(180) {
		t.Errorf("equal arm: premium has %d of the first %d completions, want %d..%d", p, perClass, scale(140), scale(180))
	}
	if left := equal.RegularLeft; left > scale(20)+slack {
		t.Errorf("equal arm: %d regular requests left when premium finished, want at most %d", left, scale(20)+slack)
	}
	if p, r := weighted.First[0], weighted.First[1]; p < scale(240) || r < scale(48) {
		t.Errorf("weighted arm: first %d completions are %d premium, %d regular; want premium >= %d and regular >= %d",
			perClass, p, r, scale(240), scale(48))
	}
	if left := weighted.RegularLeft; left < scale(220)-slack || left > scale(260)+slack {
		t.Errorf("weighted arm: %d regular requests left when premium finished, want %d..%d", left, scale(220)-slack, scale(260)+slack)
	}
	if d := weighted.First[0] - equal.First[0]; d < scale(60) {
		t.Errorf("the weighted premium prefix exceeds the equal one by %d, want at least %d", d, scale(60))
	}

	// The chart of this run: one panel per arm, one polyline per class.
	var svg bytes.Buffer
	if err := WriteSVG(&svg, premiumChart(arms)); err != nil {
		t.Fatal(err)
	}
	panels := parseSVG(t, svg.Bytes())
	if len(panels) != 2 {
		t.Fatalf("premium chart has %d panels, want 2", len(panels))
	}
	for i, p := range panels {
		if len(p.series) != len(premiumClasses) || p.series[0] != "premium" || p.series[1] != "regular" {
			t.Errorf("panel %d polylines %v, want one per class %v", i, p.series, premiumClasses)
		}
	}
}
