package sched

import (
	"fmt"
	"time"
)

// Priority is an SMG priority class. Higher values are more important.
type Priority uint8

// The four SMG priority classes, in ascending order.
const (
	PriorityBulk Priority = iota
	PriorityDefault
	PriorityInteractive
	PrioritySystem

	// NumPriorities is the number of priority classes.
	NumPriorities = 4
)

var priorityNames = [NumPriorities]string{"bulk", "default", "interactive", "system"}

// String returns the lower-case class name used in YAML, headers and metric labels.
func (p Priority) String() string {
	if int(p) < NumPriorities {
		return priorityNames[p]
	}
	return fmt.Sprintf("Priority(%d)", uint8(p))
}

// ParsePriority parses an exact lower-case class name, as the YAML file spells it.
func ParsePriority(s string) (Priority, bool) {
	for i, n := range priorityNames {
		if n == s {
			return Priority(i), true
		}
	}
	return PriorityDefault, false
}

// ClassConfig is one SMG priority class's admission settings.
type ClassConfig struct {
	// ReservedFloor is the minimum number of slots reserved for the class.
	ReservedFloor uint16
	// ReservedPerSlot is the reserved share of live capacity (finite, >= 0).
	ReservedPerSlot float64
	// QueueSize is the most requests of this class that may wait at once.
	QueueSize uint32
	// QueueTimeout bounds how long a request of this class may wait (> 0).
	QueueTimeout time.Duration
	// StarvationThreshold is the wait after which a queued request is
	// promoted (> 0). System requests are never promoted.
	StarvationThreshold time.Duration
	// CanPreempt lets an arrival of this class that finds no slot preempt an
	// in-flight request of a strictly lower class that has no first token yet.
	CanPreempt bool
}

// DefaultClassConfig returns SMG's built-in settings for p.
func DefaultClassConfig(p Priority) ClassConfig {
	switch p {
	case PrioritySystem:
		return ClassConfig{ReservedFloor: 32, QueueSize: 64, QueueTimeout: 30 * time.Second, StarvationThreshold: 5 * time.Second, CanPreempt: true}
	case PriorityInteractive:
		return ClassConfig{ReservedFloor: 128, ReservedPerSlot: 0.25, QueueSize: 256, QueueTimeout: 30 * time.Second, StarvationThreshold: 5 * time.Second, CanPreempt: true}
	case PriorityDefault:
		return ClassConfig{ReservedPerSlot: 0.10, QueueSize: 512, QueueTimeout: 60 * time.Second, StarvationThreshold: 30 * time.Second}
	case PriorityBulk:
		fallthrough
	default:
		return ClassConfig{QueueSize: 1024, QueueTimeout: 300 * time.Second, StarvationThreshold: 120 * time.Second}
	}
}

// PriorityConfig configures SMG priority admission. With Enabled false the
// slot gate is open and priority classes only order requests inside a lane.
type PriorityConfig struct {
	Enabled bool
	// Classes is indexed by Priority.
	Classes [NumPriorities]ClassConfig
}

// DefaultPriorityConfig returns an enabled configuration with SMG's defaults.
func DefaultPriorityConfig() PriorityConfig {
	c := PriorityConfig{Enabled: true}
	for p := range Priority(NumPriorities) {
		c.Classes[p] = DefaultClassConfig(p)
	}
	return c
}
