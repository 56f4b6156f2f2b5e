package bench

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestInterleaveOrder(t *testing.T) {
	got := InterleaveOrder(3, 5, 2)
	want := []int{
		0, 0, 1, 1, 2, 2, // cycle 0 starts at server 0
		1, 1, 2, 2, 0, 0, // cycle 1 at server 1
		2, 0, 1, // the last, short cycle at server 2
	}
	if !slices.Equal(got, want) {
		t.Errorf("InterleaveOrder(3, 5, 2) = %v, want %v", got, want)
	}
	for _, c := range []struct{ servers, per, block int }{{4, 3000, 50}, {2, 7, 3}, {1, 4, 10}, {3, 2, 1}} {
		order := InterleaveOrder(c.servers, c.per, c.block)
		counts := make([]int, c.servers)
		run, longest := 0, 0
		for i, s := range order {
			counts[s]++
			if i > 0 && order[i-1] == s {
				run++
			} else {
				run = 1
			}
			longest = max(longest, run)
		}
		for s, n := range counts {
			if n != c.per {
				t.Errorf("%+v: server %d gets %d requests, want %d", c, s, n, c.per)
			}
		}
		// A block may meet the next one of the same server only when
		// there is one server.
		if c.servers > 1 && longest > c.block {
			t.Errorf("%+v: a run of %d requests to one server, block %d", c, longest, c.block)
		}
	}
	for _, bad := range [][3]int{{0, 1, 1}, {1, 0, 1}, {1, 1, 0}, {-1, 5, 5}} {
		if got := InterleaveOrder(bad[0], bad[1], bad[2]); got != nil {
			t.Errorf("InterleaveOrder%v = %v, want nil", bad, got)
		}
	}
}

func TestRunInterleaved(t *testing.T) {
	up := startUpstream(t)
	a, _ := startExtProc(t, up, 0, "")
	b, _ := startExtProc(t, up, 0, "")
	res, err := RunInterleaved(context.Background(), InterleaveConfig{
		Servers: []InterleaveServer{{Name: "a", Addr: a}, {Name: "b", Addr: b}, {Name: "dead", Addr: "127.0.0.1:1"}},
		Mode:    ModeBuffered, Requests: 12, Warmup: 3, Block: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || res[0].Name != "a" || res[1].Name != "b" || res[2].Name != "dead" {
		t.Fatalf("results %+v", res)
	}
	for _, r := range res[:2] {
		if r.Requests != 12 || r.Errors != 0 || r.DecisionP50 <= 0 || r.DecisionP99 < r.DecisionP50 ||
			r.TotalP50 < r.DecisionP50 || r.TotalP99 < r.TotalP50 {
			t.Errorf("%s: %+v", r.Name, r)
		}
	}
	// A server nobody answers on is counted, not fatal.
	if d := res[2]; d.Requests != 12 || d.Errors != 12 || d.FirstError == "" || d.DecisionP50 != 0 {
		t.Errorf("dead: %+v", d)
	}
	if _, err := RunInterleaved(context.Background(), InterleaveConfig{Mode: ModeBuffered, Requests: 1, Block: 1}); err == nil {
		t.Error("a run without servers was accepted")
	}
}

func TestRunLoads(t *testing.T) {
	up := startUpstream(t)
	a, _ := startExtProc(t, up, 0, "")
	b, _ := startExtProc(t, up, 0, "")
	cfg := func(addr string) LoadConfig {
		return LoadConfig{ExtProcAddr: addr, Mode: ModeBuffered, Concurrency: 2, Duration: 500 * time.Millisecond}
	}
	res, err := RunLoads(context.Background(), []LoadConfig{cfg(a), cfg(b), cfg(a)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 {
		t.Fatalf("%d results", len(res))
	}
	for i, r := range res {
		if r.Requests == 0 || r.Errors != 0 || r.Concurrency != 2 {
			t.Errorf("load %d: %+v", i, r)
		}
	}
	if _, err := RunLoads(context.Background(), []LoadConfig{cfg(a), {ExtProcAddr: b, Mode: ModeBuffered}}); err == nil {
		t.Error("a load without concurrency was accepted")
	}
	if _, err := RunLoads(context.Background(), nil); err == nil {
		t.Error("no loads were accepted")
	}
}
