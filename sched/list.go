package sched

// entryList is an intrusive doubly linked list of entries through their prev
// and next fields. An entry is in at most one list at a time. Every
// operation is O(1) and allocates nothing.
type entryList struct {
	head, tail *entry
	n          uint32
}

// pushBack appends e, which must not be in any list.
func (l *entryList) pushBack(e *entry) {
	e.prev, e.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = e
	} else {
		l.head = e
	}
	l.tail = e
	l.n++
}

// remove unlinks e, which must be in l.
func (l *entryList) remove(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
	l.n--
}
