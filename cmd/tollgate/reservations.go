package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tollgate/tollgate/sched"
)

// maxListedWorkers bounds the workers a reservations problem lists.
const maxListedWorkers = 8

// explainReservations adds to the scheduler's reservations check (SMG's
// "sum of class reservations (N) exceeds capacity (M)", kept first) the
// classes that add up and the file they come from, the workers whose slots
// make the capacity and their file, and what to change. Other errors are
// returned as they are.
func (o *options) explainReservations(err error) error {
	re, ok := errors.AsType[*sched.ReservationError](err)
	if !ok {
		return err
	}
	var b strings.Builder
	b.WriteString(re.Terms())
	if o.priorityConfig != "" {
		fmt.Fprintf(&b, " from %s (classes it does not name keep the built-in defaults)", o.priorityConfig)
	} else {
		b.WriteString(" from the built-in class defaults (no --priority-scheduler-config)")
	}
	fmt.Fprintf(&b, " against %d slots ", re.Capacity)
	if len(re.Workers) == 0 {
		b.WriteString("of --max-concurrent-requests, the capacity while no worker is known")
	} else {
		src := o.workersFile
		if src == "" {
			src = "the initial workers"
		}
		fmt.Fprintf(&b, "from %s (%s)", src, listSlots(re.Workers))
	}
	b.WriteString("; ")
	lower := "lower the classes' reserved_floor / reserved_per_slot in " + o.priorityConfig
	if o.priorityConfig == "" {
		lower = "lower the classes' reserved_floor / reserved_per_slot in a --priority-scheduler-config file"
	}
	switch {
	case re.Needed == 0:
		fmt.Fprintf(&b, "no capacity up to 65535 slots fits these classes: %s", lower)
	case len(re.Workers) == 0:
		fmt.Fprintf(&b, "the classes need at least %d slots: raise --max-concurrent-requests or list workers with --workers, or %s", re.Needed, lower)
	default:
		fmt.Fprintf(&b, "the classes need at least %d slots: raise the workers' max_running_requests (or add workers), or %s", re.Needed, lower)
	}
	return fmt.Errorf("%w: %s", err, b.String())
}

// listSlots lists workers' slots: "w1: 128, w2: 64 by default", the first
// maxListedWorkers of them.
func listSlots(ws []sched.WorkerSlots) string {
	var parts []string
	for i, w := range ws {
		if i == maxListedWorkers {
			parts = append(parts, fmt.Sprintf("and %d more", len(ws)-i))
			break
		}
		s := fmt.Sprintf("%s: %d", w.ID, w.Slots)
		if w.Default {
			s += " by default"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}
