package demo

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// TestKVEventsScenario runs both arms at the highest speed and checks what
// does not depend on timing: every request answered, the events arm
// priced by events, and a chart of both.
func TestKVEventsScenario(t *testing.T) {
	arms, err := runKVEvents(t.Context(), kvConfig{speed: maxSpeed, seed: 1, log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printKVEvents(&out, arms)
	t.Log("\n" + out.String())
	if len(arms) != 2 || arms[0].Events || !arms[1].Events {
		t.Fatalf("arms %+v, want the approximate one then the events one", arms)
	}
	for _, a := range arms {
		if a.Requests != kvSessions*kvTurns || a.Failed != 0 {
			t.Errorf("%s: %d requests, %d failed; want %d, 0", a.Name, a.Requests, a.Failed, kvSessions*kvTurns)
		}
		if len(a.Cached) != a.Requests || len(a.TTFTs) != a.Requests {
			t.Errorf("%s: %d cached figures and %d TTFTs for %d requests", a.Name, len(a.Cached), len(a.TTFTs), a.Requests)
		}
	}
	// A stream whose replay failed is priced approximately for a while:
	// allow a few.
	if ev := arms[1]; ev.ByEvents == 0 || ev.ByApprox*10 > ev.ByEvents {
		t.Errorf("events arm priced %d requests by events and %d approximately; want nearly all by events", ev.ByEvents, ev.ByApprox)
	}
	var svg bytes.Buffer
	if err := WriteSVG(&svg, kvChart(arms)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(svg.String(), "KV events") {
		t.Error("the chart does not name the events arm")
	}
	// The first panel is the estimate error: one line per arm, a point per
	// bound of the error histogram.
	panels := parseSVG(t, svg.Bytes())
	if len(panels) != 3 || len(panels[0].series) != 2 {
		t.Fatalf("kv chart: %d panels; want 3, the first with the estimate error of both arms", len(panels))
	}
	for _, a := range arms {
		if len(a.ErrOver) == 0 || math.Abs(a.ErrOver[0].X-1) > 1e-9 || math.Abs(a.ErrOver[0].Y-100*(1-a.Within1)) > 1e-9 {
			t.Errorf("%s: estimate error points %v do not start at the 1%% bound with %.1f%% off", a.Name, a.ErrOver, 100*(1-a.Within1))
		}
	}
}
