package kube

import (
	"context"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/extproc/fleet"
)

// DefaultDebounce is how long a source waits after a change before it
// rebuilds the worker set, so that a burst (a rollout, a node drain) becomes
// one update.
const DefaultDebounce = 200 * time.Millisecond

// snapshot is one build of the desired worker set from the caches.
type snapshot struct {
	// workers is the full set, sorted by ID.
	workers []fleet.Worker
	// notes maps a subject ("pod ns/name", "EndpointSlice ns/name") to a
	// problem an operator should fix: why it contributes no worker, or what
	// of it is ignored.
	notes map[string]string
	// err, when set, means the desired set cannot be known (for example an
	// InferencePool with an unusable spec): the current set stays.
	err error
}

// syncer turns cache changes into worker set updates: it debounces kicks,
// builds the full set, skips it when nothing changed, applies it, and logs
// problems once each rather than on every rebuild. It is owned by the one
// goroutine that calls run.
type syncer struct {
	build    func() snapshot
	apply    func([]fleet.Worker) error
	log      *slog.Logger
	debounce time.Duration

	// applied is the set in force; valid once hasApplied.
	applied    []fleet.Worker
	hasApplied bool
	// rejected is the text of the last apply or build error logged.
	rejected string
	// notes are the problems logged by the last build.
	notes map[string]string
}

// run syncs once, then again debounce after each kick (kicks that arrive
// in between are folded in), until ctx ends.
func (s *syncer) run(ctx context.Context, kick <-chan struct{}) {
	debounced(ctx, kick, s.debounce, s.sync)
}

// debounced calls sync once, then again debounce after each kick (kicks
// that arrive in between are folded in), until ctx ends. Kicks that
// arrived before the call are covered by the first sync.
func debounced(ctx context.Context, kick <-chan struct{}, debounce time.Duration, sync func()) {
	select { // the caches are complete: one sync covers every earlier kick
	case <-kick:
	default:
	}
	sync()
	t := time.NewTimer(debounce)
	t.Stop()
	defer t.Stop()
	armed := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
			if !armed {
				t.Reset(debounce)
				armed = true
			}
		case <-t.C:
			armed = false
			sync()
		}
	}
}

// sync builds the set and applies it when it differs from the one in force.
func (s *syncer) sync() {
	snap := s.build()
	s.report(snap.notes)
	if snap.err != nil {
		s.reject("worker set unknown; keeping the current one", snap.err)
		return
	}
	if s.hasApplied && reflect.DeepEqual(snap.workers, s.applied) {
		return
	}
	if err := s.apply(snap.workers); err != nil {
		s.reject("worker set rejected; keeping the current one", err)
		return
	}
	added, removed, changed := diffWorkers(s.applied, snap.workers)
	s.log.Info("worker set updated", "workers", len(snap.workers), "added", added, "removed", removed, "changed", changed)
	s.applied, s.hasApplied, s.rejected = snap.workers, true, ""
}

// reject logs err unless it is the one logged last.
func (s *syncer) reject(msg string, err error) {
	if text := err.Error(); text != s.rejected {
		s.rejected = text
		s.log.Error(msg, "error", text)
	}
}

// report logs each note that is new or changed since the last build.
func (s *syncer) report(notes map[string]string) {
	for _, subject := range slices.Sorted(maps.Keys(notes)) {
		if msg := notes[subject]; s.notes[subject] != msg {
			s.log.Warn("worker discovery problem", "subject", subject, "problem", msg)
		}
	}
	for subject := range s.notes {
		if _, ok := notes[subject]; !ok {
			s.log.Info("problem resolved", "subject", subject)
		}
	}
	s.notes = notes
}

// diffWorkers names the workers added, removed and changed from old to
// cur; both are sorted by ID.
func diffWorkers(old, cur []fleet.Worker) (added, removed, changed []string) {
	byID := make(map[string]fleet.Worker, len(old))
	for _, w := range old {
		byID[w.ID] = w
	}
	for _, w := range cur {
		o, ok := byID[w.ID]
		switch {
		case !ok:
			added = append(added, w.ID)
		case !reflect.DeepEqual(o, w):
			changed = append(changed, w.ID)
		}
		delete(byID, w.ID)
	}
	removed = slices.Sorted(maps.Keys(byID))
	return added, removed, changed
}

// sortWorkers orders ws by ID, then address, so that equal sets compare
// equal.
func sortWorkers(ws []fleet.Worker) {
	slices.SortFunc(ws, func(a, b fleet.Worker) int {
		if c := strings.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return strings.Compare(a.Address, b.Address)
	})
}
