package sched

// strictKey returns the strict tier of a request's queue key: its effective
// SMG class in the high bits, then the client's strict-priority hint
// (x-dynamo-request-strict-priority or nvext.agent_hints.strict_priority),
// 0 when absent as Dynamo's default. The hint orders requests only within
// their effective class: the class is clamped by the tenant's max_class
// before it gets here, and no hint value lifts a request above a request of
// a higher class. An out-of-range class counts as PriorityDefault.
func strictKey(p Priority, hint uint32, hasHint bool) uint64 {
	if p >= NumPriorities {
		p = PriorityDefault
	}
	k := uint64(p) << 32
	if hasHint {
		k |= uint64(hint)
	}
	return k
}
