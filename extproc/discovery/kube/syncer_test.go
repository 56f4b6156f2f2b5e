package kube

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/test/kubefixture"
)

// fakeBuild returns the snapshot set last and counts builds.
type fakeBuild struct {
	mu     sync.Mutex
	cur    snapshot
	builds int
}

func (f *fakeBuild) build() snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.builds++
	return f.cur
}

func (f *fakeBuild) set(s snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cur = s
}

func (f *fakeBuild) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.builds
}

func TestSyncer_DebouncesBursts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := &fakeBuild{cur: snapshot{workers: []fleet.Worker{{ID: "a", Address: "10.0.0.1:80"}}}}
		rec := kubefixture.NewRecorder(nil)
		s := &syncer{build: fb.build, apply: rec.Apply, log: slog.New(slog.DiscardHandler), debounce: 200 * time.Millisecond}
		kick := make(chan struct{}, 1)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { s.run(ctx, kick); close(done) }()
		poke := func() {
			select {
			case kick <- struct{}{}:
			default:
			}
		}

		synctest.Wait()
		if fb.count() != 1 || rec.Calls() != 1 {
			t.Fatalf("initial sync: %d builds, %d applies; want 1, 1", fb.count(), rec.Calls())
		}

		// A burst of 30 changes over 150 ms is one rebuild, 200 ms after
		// the first.
		fb.set(snapshot{workers: []fleet.Worker{{ID: "a", Address: "10.0.0.1:80"}, {ID: "b", Address: "10.0.0.2:80"}}})
		for range 30 {
			poke()
			time.Sleep(5 * time.Millisecond)
		}
		synctest.Wait()
		if fb.count() != 1 {
			t.Fatalf("rebuilt during the burst: %d builds", fb.count())
		}
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		if fb.count() != 2 || rec.Calls() != 2 {
			t.Fatalf("after the burst: %d builds, %d applies; want 2, 2", fb.count(), rec.Calls())
		}

		// A change that leaves the set alone rebuilds but does not apply.
		poke()
		time.Sleep(250 * time.Millisecond)
		synctest.Wait()
		if fb.count() != 3 || rec.Calls() != 2 {
			t.Fatalf("unchanged set: %d builds, %d applies; want 3, 2", fb.count(), rec.Calls())
		}
		cancel()
		<-done
	})
}

func TestSyncer_KeepsTheSetOnErrors(t *testing.T) {
	logs := &kubefixture.LogBuffer{}
	fb := &fakeBuild{}
	failing := errors.New("extproc: worker \"x\": duplicate id")
	var applyErr error
	var applied [][]fleet.Worker
	s := &syncer{build: fb.build, log: logs.Logger(), apply: func(ws []fleet.Worker) error {
		if applyErr != nil {
			return applyErr
		}
		applied = append(applied, ws)
		return nil
	}}
	one := []fleet.Worker{{ID: "a", Address: "10.0.0.1:80"}}
	two := []fleet.Worker{{ID: "a", Address: "10.0.0.1:80"}, {ID: "b", Address: "10.0.0.2:80"}}

	fb.cur = snapshot{workers: one}
	s.sync()
	applyErr = failing
	fb.cur = snapshot{workers: two}
	s.sync()
	s.sync() // the same rejection is logged once
	fb.cur = snapshot{err: errors.New("InferencePool llm/p: spec.targetPorts is empty")}
	s.sync()
	applyErr = nil
	fb.cur = snapshot{workers: two}
	s.sync()

	if diff := cmp.Diff([][]fleet.Worker{one, two}, applied); diff != "" {
		t.Errorf("applied (-want +got):\n%s", diff)
	}
	if n := logs.Count("worker set rejected"); n != 1 {
		t.Errorf("rejection logged %d times, want 1:\n%s", n, logs)
	}
	if n := logs.Count("worker set unknown"); n != 1 {
		t.Errorf("build error logged %d times, want 1:\n%s", n, logs)
	}
	if n := logs.Count("worker set updated"); n != 2 {
		t.Errorf("updates logged %d times, want 2:\n%s", n, logs)
	}
}

func TestDiffWorkers(t *testing.T) {
	old := []fleet.Worker{{ID: "a"}, {ID: "b", MaxRunningRequests: 1}, {ID: "c"}}
	cur := []fleet.Worker{{ID: "b", MaxRunningRequests: 2}, {ID: "c"}, {ID: "d"}}
	added, removed, changed := diffWorkers(old, cur)
	if diff := cmp.Diff([][]string{{"d"}, {"a"}, {"b"}}, [][]string{added, removed, changed}); diff != "" {
		t.Errorf("added, removed, changed (-want +got):\n%s", diff)
	}
}
