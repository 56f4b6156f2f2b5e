package demo

import (
	"bytes"
	"io"
	"slices"
	"testing"
	"time"
)

// TestRollout replaces all three replicas under load, with a short steady
// phase (0.5 s) between the rolls, and checks what a rolling update must
// keep: no request lost, every one counted by the replica that served it
// and finished by the worker, both handovers seen by every replica, and
// DRR's split while both classes waited. The split is 80% premium in
// theory (quanta 512:128, equal costs); the bound is 75..85%: the clients
// count a request as waiting from the moment they send it, so a dispatch
// made while the only waiting premium request was still on its way to
// the scheduler counts for regular (measured: 78-80%), and each new
// scheduler starts DRR's deficits afresh, a round of at most five
// dispatches in several hundred.
func TestRollout(t *testing.T) {
	res, err := runRollout(t.Context(), rolloutConfig{
		clients: rolloutClients, steady: 500 * time.Millisecond, speed: 2, seed: 1,
		examples: examplesDir(t), stdout: io.Discard, log: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printRollout(&out, res)
	t.Log(out.String())

	if res.Lost != 0 || res.OK != res.Sent || res.Sent == 0 {
		t.Errorf("%d sent, %d completed 200, %d lost; want every one 200", res.Sent, res.OK, res.Lost)
	}
	// The servers' and the worker's counts agree with the clients'.
	if res.Streams != res.Sent || res.StreamErrors != 0 || res.WorkerFinished != res.OK {
		t.Errorf("streams ended OK %d (others %d), worker finished %d; want %d, 0 and %d",
			res.Streams, res.StreamErrors, res.WorkerFinished, res.Sent, res.OK)
	}
	sum := 0
	for i, n := range res.Ingress {
		if n == 0 {
			t.Errorf("front %d got no request", i)
		}
		sum += n
	}
	if sum != res.Sent {
		t.Errorf("ingress %v adds up to %d, want %d", res.Ingress, sum, res.Sent)
	}

	// tollgate-0 schedules first and hands over to tollgate-1, which,
	// replaced next, hands over to the new tollgate-0; tollgate-2 is a
	// front throughout.
	if len(res.Steps) != rolloutReplicas {
		t.Fatalf("%d steps, want one per replica", len(res.Steps))
	}
	wantTo := []string{"tollgate-1", "tollgate-0", ""}
	for i, s := range res.Steps {
		if s.Replica != replicaID(i) || s.To != wantTo[i] {
			t.Errorf("step %d: %s handed over to %q, want %s to %q", i, s.Replica, s.To, replicaID(i), wantTo[i])
		}
		if s.To == "" {
			continue
		}
		// Every replica linked to the new scheduler (each observes its
		// gap once), and the fronts handed it their requests.
		if s.Links.Pauses < rolloutReplicas || s.Links.Queued+s.Links.InFlight == 0 {
			t.Errorf("handover %s -> %s: %d replicas relinked, %d queued and %d in-flight requests re-registered; want %d and some",
				s.Replica, s.To, s.Links.Pauses, s.Links.Queued, s.Links.InFlight, rolloutReplicas)
		}
		if s.Pause <= 0 || s.Pause > 5*time.Second {
			t.Errorf("handover %s -> %s: admission pause %v", s.Replica, s.To, s.Pause)
		}
	}

	if share := premiumShare(res.Both); share < 0.75 || share > 0.85 || res.Both[0]+res.Both[1] < 100 {
		t.Errorf("while both classes waited: %d premium, %d regular (%.1f%%); want 75..85%% premium of at least 100",
			res.Both[0], res.Both[1], 100*share)
	}

	// The chart: completions per class with the handovers marked, then
	// the gaps between routing answers with each replica's roll marked.
	c := rolloutChart(res)
	var svg bytes.Buffer
	if err := WriteSVG(&svg, c); err != nil {
		t.Fatal(err)
	}
	panels := parseSVG(t, svg.Bytes())
	if len(panels) != 2 || len(panels[0].series) != 2 || panels[0].series[0] != "premium" || len(panels[1].series) != 1 {
		t.Fatalf("rollout chart: %+v; want the classes, then the gaps", panels)
	}
	if len(c.Panels[0].Markers) != 2 || len(c.Panels[1].Markers) != rolloutReplicas {
		t.Errorf("rollout chart marks %d handovers and %d rolls, want 2 and %d", len(c.Panels[0].Markers), len(c.Panels[1].Markers), rolloutReplicas)
	}
}

// TestBothWaiting feeds bothWaiting, answers and longestGap a hand-made
// timeline (premium is class 0, regular class 1).
func TestBothWaiting(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	list := []completion{
		{class: 0, sent: ms(0), wait: ms(10)},  // routed at 10, regular waiting since 5: counted
		{class: 1, sent: ms(5), wait: ms(30)},  // routed at 35, premium waiting since 20: counted
		{class: 0, sent: ms(20), wait: ms(20)}, // routed at 40, no regular waiting
		{class: 1, sent: ms(50), wait: ms(10)}, // routed at 60, the premium one at 45 was routed at 50
		{class: 0, sent: ms(45), wait: ms(5), outcome: outcomeOther},
	}
	if got := bothWaiting(list); got != [2]int{1, 1} {
		t.Errorf("bothWaiting = %v, want [1 1]", got)
	}
	ans := answers(list) // 10, 35, 40, 60: the 200s only
	if len(ans) != 4 {
		t.Fatalf("answers = %v, want the four 200s", ans)
	}
	for _, tt := range []struct{ from, to, want int }{{20, 30, 25}, {36, 39, 5}, {35, 35, 25}, {70, 80, 0}} {
		if g := longestGap(ans, ms(tt.from), ms(tt.to)); g != ms(tt.want) {
			t.Errorf("longestGap over [%d, %d] ms = %v, want %d ms", tt.from, tt.to, g, tt.want)
		}
	}
	// In bins of 20 ms: the gap ending at 35 ms, then those ending at 40
	// and at 60, each at its bin's end.
	want := []Point{{0.04, 25}, {0.06, 5}, {0.08, 20}}
	if got := binnedGaps(ans, ms(20)); !slices.Equal(got, want) {
		t.Errorf("binnedGaps = %v, want %v", got, want)
	}
}
