package intake

import (
	"fmt"
	"maps"
	"sync/atomic"

	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

// ObjectiveTable is the objective mapping in force: the operator's
// objective classes (--objective-class), which win, merged over the names
// found outside the flags (the pool's InferenceObjectives). The merge is
// its own: discovery reports what it found, and the table answers what a
// flag shadowed and what the shared name budget left out. Safe for
// concurrent use; each request sees one mapping.
type ObjectiveTable struct {
	flags policy.Objectives
	cur   atomic.Pointer[policy.Objectives]
}

// NewObjectiveTable checks the operator's mapping and starts from it.
func NewObjectiveTable(flags policy.Objectives) (*ObjectiveTable, error) {
	if err := flags.Validate(); err != nil {
		return nil, fmt.Errorf("intake: objective classes: %w", err)
	}
	t := &ObjectiveTable{flags: flags}
	cur := maps.Clone(flags)
	if cur == nil {
		cur = policy.Objectives{}
	}
	t.cur.Store(&cur)
	return t, nil
}

// Current returns the mapping in force; it must not be changed.
func (t *ObjectiveTable) Current() policy.Objectives { return *t.cur.Load() }

// Set merges found under the operator's mapping, checks the result and
// swaps it in. On error the mapping in force stays.
func (t *ObjectiveTable) Set(found policy.Objectives) (Merge, error) {
	all, m := mergeOver(t.flags, found, policy.MaxObjectives, func(a, b sched.Priority) bool { return a == b },
		func(name string, p sched.Priority) string {
			return fmt.Sprintf("--objective-class maps %s to %s", name, p)
		})
	merged := policy.Objectives(all)
	if err := merged.Validate(); err != nil {
		return Merge{}, fmt.Errorf("intake: objective classes: %w", err)
	}
	t.cur.Store(&merged)
	return m, nil
}

// Counts returns how many names map to each class, from the flags and
// from found objects.
func (t *ObjectiveTable) Counts() (fromFlags, found [sched.NumPriorities]int) {
	for name, p := range t.Current() {
		if _, ok := t.flags[name]; ok {
			fromFlags[p]++
		} else {
			found[p]++
		}
	}
	return fromFlags, found
}
