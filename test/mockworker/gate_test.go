package mockworker

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
)

// parkAll starts one Wait per id, in order, and returns their results.
func parkAll(ctx context.Context, g *Gate, ids ...string) map[string]<-chan error {
	out := make(map[string]<-chan error)
	for _, id := range ids {
		ch := make(chan error, 1)
		go func() { ch <- g.Wait(ctx, RequestInfo{ID: id}) }()
		synctest.Wait()
		out[id] = ch
	}
	return out
}

// passed reports which of the waits have returned nil.
func passed(t *testing.T, waits map[string]<-chan error) map[string]bool {
	t.Helper()
	synctest.Wait()
	got := make(map[string]bool)
	for id, ch := range waits {
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("wait %s: %v", id, err)
			}
			got[id] = true
		default:
		}
	}
	return got
}

// mustPass waits for a Wait to return and fails t unless it passed.
func mustPass(t *testing.T, ch <-chan error) {
	t.Helper()
	if err := <-ch; err != nil {
		t.Errorf("wait: %v", err)
	}
}

func TestGate_ReleaseLetsOldestGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate()
		waits := parkAll(t.Context(), g, "a", "b", "c")
		if diff := cmp.Diff([]string{"a", "b", "c"}, g.Parked()); diff != "" {
			t.Fatalf("parked (-want +got):\n%s", diff)
		}
		g.Release(2)
		if diff := cmp.Diff(map[string]bool{"a": true, "b": true}, passed(t, waits)); diff != "" {
			t.Errorf("passed (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"c"}, g.Parked()); diff != "" {
			t.Errorf("still parked (-want +got):\n%s", diff)
		}
		g.Open()
		mustPass(t, waits["c"])
	})
}

func TestGate_SurplusReleasesAreCredits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate()
		g.Release(2)
		g.Release(-1) // Ignored.
		waits := parkAll(t.Context(), g, "a", "b", "c")
		if diff := cmp.Diff(map[string]bool{"a": true, "b": true}, passed(t, waits)); diff != "" {
			t.Errorf("passed on credit (-want +got):\n%s", diff)
		}
		g.Hold() // Drops no credit here: none left. Still holding c.
		if diff := cmp.Diff([]string{"c"}, g.Parked()); diff != "" {
			t.Errorf("parked (-want +got):\n%s", diff)
		}
		g.Open()
		mustPass(t, waits["c"])
	})
}

func TestGate_OpenThenHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate()
		g.Open()
		if err := g.Wait(t.Context(), RequestInfo{ID: "a"}); err != nil {
			t.Fatalf("open gate: %v", err)
		}
		g.Hold()
		waits := parkAll(t.Context(), g, "b")
		if len(passed(t, waits)) != 0 {
			t.Fatalf("b passed a holding gate")
		}
		if !g.ReleaseID("b") || g.ReleaseID("b") {
			t.Errorf("ReleaseID(b) twice = want true then false")
		}
		mustPass(t, waits["b"])
	})
}

func TestGate_CancelledWaitUnparks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate()
		ctx, cancel := context.WithCancel(t.Context())
		waits := parkAll(ctx, g, "a")
		cancel()
		if err := <-waits["a"]; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled wait = %v, want context.Canceled", err)
		}
		if n := len(g.Parked()); n != 0 {
			t.Errorf("%d parked after cancel, want 0", n)
		}
	})
}

func TestGate_WaitParked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate()
		done := make(chan error, 1)
		go func() { done <- g.WaitParked(t.Context(), 2) }()
		waits := parkAll(t.Context(), g, "a")
		select {
		case err := <-done:
			t.Fatalf("WaitParked(2) returned %v with one parked", err)
		default:
		}
		waits["b"] = parkAll(t.Context(), g, "b")["b"]
		if err := <-done; err != nil {
			t.Fatalf("WaitParked: %v", err)
		}
		g.Open()
		for _, ch := range waits {
			mustPass(t, ch)
		}
	})
}
