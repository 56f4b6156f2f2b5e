package kubefixture

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched/policy"
)

// Recorder is a worker source's apply function (kube.SourceConfig.Apply)
// that keeps every set it was given and optionally passes it on.
type Recorder struct {
	next func([]fleet.Worker) error

	mu   sync.Mutex
	sets [][]fleet.Worker
	// changed is closed and replaced on every call.
	changed chan struct{}
}

// NewRecorder returns a Recorder that passes every set to next, normally a
// server's SetWorkers; nil only validates the set (fleet.ValidateWorkers).
// A set next rejects is not kept.
func NewRecorder(next func([]fleet.Worker) error) *Recorder {
	if next == nil {
		next = fleet.ValidateWorkers
	}
	return &Recorder{next: next, changed: make(chan struct{})}
}

// Apply is the apply function.
func (r *Recorder) Apply(ws []fleet.Worker) error {
	err := r.next(ws)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.sets = append(r.sets, slices.Clone(ws))
	}
	close(r.changed)
	r.changed = make(chan struct{})
	return err
}

// Calls returns how many sets were applied.
func (r *Recorder) Calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sets)
}

// Last returns the last applied set and whether there is one.
func (r *Recorder) Last() ([]fleet.Worker, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sets) == 0 {
		return nil, false
	}
	return r.sets[len(r.sets)-1], true
}

// Await waits until the last applied set, summarized, equals want.
func (r *Recorder) Await(t *testing.T, want string) []fleet.Worker {
	t.Helper()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		ws, ok := r.Last()
		if ok && Summary(ws) == want {
			return ws
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("worker set is %q, want %q", Summary(ws), want)
		}
	}
}

// Summary renders a worker set as "id@address ..." for compact checks.
func Summary(ws []fleet.Worker) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = w.ID + "@" + w.Address
	}
	return strings.Join(parts, " ")
}

// ObjectiveRecorder is an objective source's apply function
// (kube.ObjectiveConfig.Apply) that merges what the source found as the
// server does, through a real intake.ObjectiveTable over the flags (or the
// server's own SetObjectives), and keeps what it was given, what it
// answered and what is in force.
type ObjectiveRecorder struct {
	set   func(policy.Objectives) (intake.Merge, error)
	table *intake.ObjectiveTable // nil when set is the server's

	mu      sync.Mutex
	found   policy.Objectives
	inForce policy.Objectives
	answer  intake.Merge
	calls   int
	changed chan struct{}
}

// NewObjectiveRecorder merges into a table over the --objective-class
// flags.
func NewObjectiveRecorder(t *testing.T, flags policy.Objectives) *ObjectiveRecorder {
	t.Helper()
	table, err := intake.NewObjectiveTable(flags)
	if err != nil {
		t.Fatal(err)
	}
	return &ObjectiveRecorder{set: table.Set, table: table, changed: make(chan struct{})}
}

// PassObjectiveRecorder hands what the source found to set, normally a
// server's SetObjectives. Await needs a table and is not for it.
func PassObjectiveRecorder(set func(policy.Objectives) (intake.Merge, error)) *ObjectiveRecorder {
	return &ObjectiveRecorder{set: set, changed: make(chan struct{})}
}

// Apply is the apply function.
func (r *ObjectiveRecorder) Apply(o policy.Objectives) (intake.Merge, error) {
	m, err := r.set(o)
	if err != nil {
		return m, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.found, r.answer, r.calls = maps.Clone(o), m, r.calls+1
	if r.table != nil {
		r.inForce = r.table.Current()
	}
	close(r.changed)
	r.changed = make(chan struct{})
	return m, nil
}

// Await waits until the mapping in force (flags and objects merged)
// equals want.
func (r *ObjectiveRecorder) Await(t *testing.T, want policy.Objectives) {
	t.Helper()
	r.awaitMapping(t, "in force", func() policy.Objectives { return r.inForce }, want)
}

// AwaitFound waits until the mapping the source last applied equals want.
func (r *ObjectiveRecorder) AwaitFound(t *testing.T, want policy.Objectives) {
	t.Helper()
	r.awaitMapping(t, "found", func() policy.Objectives { return r.found }, want)
}

// awaitMapping waits until get, read under r.mu, equals want.
func (r *ObjectiveRecorder) awaitMapping(t *testing.T, what string, get func() policy.Objectives, want policy.Objectives) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ch, got, calls := r.changed, get(), r.calls
		r.mu.Unlock()
		if calls > 0 && maps.Equal(got, want) {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("objective mapping %s is %v (%d applies), want %v", what, got, calls, want)
		}
	}
}

// LastAnswer returns the last answer to an apply and how many there were.
func (r *ObjectiveRecorder) LastAnswer() (intake.Merge, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.answer, r.calls
}
