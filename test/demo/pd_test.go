package demo

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tollgate/tollgate/test/mockworker"
)

// TestPD runs both arms on a short workload at the highest speed and
// checks what does not depend on timing: every request answered with
// every token, every long prompt split and no short one in the split arm,
// nothing split without prefill workers, the client's count matching
// tollgate's counter and the prefill halves the workers served, and a
// chart of both arms.
func TestPD(t *testing.T) {
	const requests = 4 * pdLongEvery
	arms, err := runPD(t.Context(), pdConfig{requests: requests, speed: maxSpeed, seed: 1, stdout: io.Discard, log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printPD(&out, arms)
	t.Log("\n" + out.String())
	if len(arms) != 2 || arms[0].Prefill != 0 || arms[1].Prefill != pdPrefill {
		t.Fatalf("arms %+v, want the aggregated one then the split one", arms)
	}
	wantLong := requests / pdLongEvery
	for _, a := range arms {
		short, long := a.Kinds[pdShort], a.Kinds[pdLong]
		if short.Requests != requests-wantLong || long.Requests != wantLong {
			t.Errorf("%s: %d short and %d long requests, want %d and %d", a.Name, short.Requests, long.Requests, requests-wantLong, wantLong)
		}
		for i, k := range a.Kinds {
			if k.Non200 != 0 || len(k.TTFT) != k.Requests || len(k.ITL) != k.Requests*(pdMaxTokens-1) {
				t.Errorf("%s %s: %d not 200, %d TTFTs and %d token gaps for %d requests", a.Name, pdKinds[i], k.Non200, len(k.TTFT), len(k.ITL), k.Requests)
			}
		}
		if !a.splitAsExpected() {
			t.Errorf("%s: %d short and %d long requests split", a.Name, short.Split, long.Split)
		}
		if split := short.Split + long.Split; a.Splits != split || a.PrefillServed != split {
			t.Errorf("%s: the client saw %d splits, %s is %d, the workers served %d prefill halves", a.Name, split, metricSplits, a.Splits, a.PrefillServed)
		}
		if a.DecisionP50 <= 0 {
			t.Errorf("%s: no decision latency from %s", a.Name, metricDecision)
		}
		// Every request's first token and every later one ends a step.
		if a.Batch == nil || a.Steps < pdMaxTokens {
			t.Errorf("%s: batch %+v ran %d steps, want the workers in shared-batch steps", a.Name, a.Batch, a.Steps)
		}
	}
	if arms[1].Splits != wantLong {
		t.Errorf("split arm: %d splits, want every long prompt (%d)", arms[1].Splits, wantLong)
	}
	if !strings.Contains(out.String(), "split as expected") {
		t.Error("the table lacks the split check")
	}
	if !strings.Contains(out.String(), "one shared batch per worker") || strings.Contains(out.String(), "slots, not a shared batch") {
		t.Error("the notes do not describe the workers' shared batch")
	}

	var svg bytes.Buffer
	if err := WriteSVG(&svg, pdChart(arms)); err != nil {
		t.Fatal(err)
	}
	panels := parseSVG(t, svg.Bytes())
	if len(panels) != 4 {
		t.Fatalf("pd chart: %d panels, want TTFT and ITL of short and long prompts", len(panels))
	}
	for _, p := range panels {
		if len(p.series) != 2 || p.series[0] != "aggregated" || p.series[1] != "split" {
			t.Errorf("panel %q: series %v, want one line per arm", p.title, p.series)
		}
	}
}

// TestPDNotes names the engine model the arms ran and notes a short-prompt
// ITL p50 that the split left within pdSamePace, in the model's terms.
func TestPDNotes(t *testing.T) {
	arms := func(batch *mockworker.BatchConfig, itl50 time.Duration) []*pdArm {
		agg := &pdArm{Name: "aggregated", Batch: batch}
		split := &pdArm{Name: "split", Prefill: pdPrefill, Batch: batch}
		agg.Kinds[pdShort].ITL50, split.Kinds[pdShort].ITL50 = 10*time.Millisecond, itl50
		agg.Kinds[pdShort].ITL99, split.Kinds[pdShort].ITL99 = 50*time.Millisecond, 10*time.Millisecond
		return []*pdArm{agg, split}
	}
	tests := []struct {
		name      string
		arms      []*pdArm
		want, not []string
	}{
		{name: "batch, same pace", arms: arms(pdBatch(), 10*time.Millisecond),
			want: []string{"one shared batch per worker", "up to 2048 tokens", "lasts 5ms +", "tokens / 40000 per second", "note: the split leaves"},
			not:  []string{"slots, not a shared batch"}},
		{name: "batch, faster", arms: arms(pdBatch(), 6*time.Millisecond),
			want: []string{"one shared batch per worker", "ITL p50 10.0 ms -> 6.0 ms (-40%), ITL p99 50.0 ms -> 10.0 ms (-80%)"},
			not:  []string{"note:", "slots, not a shared batch"}},
		{name: "slots, same pace", arms: arms(nil, 10*time.Millisecond),
			want: []string{"slots, not a shared batch", "note: the split leaves the short prompts' tokens at their pace"},
			not:  []string{"one shared batch per worker"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			printPD(&out, tt.arms)
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, n := range tt.not {
				if strings.Contains(out.String(), n) {
					t.Errorf("output has %q:\n%s", n, out.String())
				}
			}
		})
	}
}

// TestHistogramQuantile interpolates within the bucket holding the rank,
// as PromQL does, and stops at the last finite bound.
func TestHistogramQuantile(t *testing.T) {
	const text = `# TYPE h histogram
h_bucket{le="1"} 2
h_bucket{le="2"} 6
h_bucket{le="4"} 8
h_bucket{le="+Inf"} 10
h_sum 30
h_count 10
`
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	sc := scrape(fams)
	for _, tc := range []struct{ q, want float64 }{{0.1, 0.5}, {0.4, 1.5}, {0.7, 3}, {0.95, 4}} {
		if got := histogramQuantile(sc, "h", tc.q); got != tc.want {
			t.Errorf("q %v: %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := histogramQuantile(sc, "absent", 0.5); got != 0 {
		t.Errorf("absent histogram: %v, want 0", got)
	}
}
