package sched

import "time"

// Scheduler is the unified queue model. See the package documentation.
type Scheduler struct {
	cfg Config
	// TODO: implementation.
}

// New builds a scheduler over an initial worker set. It fails when the SMG
// reservations exceed the capacity of that set, with the upstream text
// "sum of class reservations (N) exceeds capacity (M)".
func New(cfg Config, workers []Worker) (*Scheduler, error) {
	panic("unimplemented")
}

// Submit classifies r, snapshots its cost, checks limits, then dispatches
// it at once, queues it, or rejects it. A queueing arrival of a can_preempt
// class that finds no slot may preempt one victim. A dispatch pass follows.
func (s *Scheduler) Submit(now time.Time, r Request) []Action { panic("unimplemented") }

// Cancel reports that the client went away. A queued request leaves
// without trace (counted client_cancelled); an in-flight one releases all
// it booked. A dispatch pass follows. Unknown IDs are ignored.
func (s *Scheduler) Cancel(now time.Time, id uint64) []Action { panic("unimplemented") }

// FirstToken releases the request's prefill tokens; it can no longer be
// preempted. A dispatch pass follows.
func (s *Scheduler) FirstToken(now time.Time, id uint64) []Action { panic("unimplemented") }

// Done releases everything the request booked. A dispatch pass follows.
func (s *Scheduler) Done(now time.Time, id uint64) []Action { panic("unimplemented") }

// Tick expires queue timeouts and promotes starving requests whose
// deadlines are <= now, then runs a dispatch pass.
func (s *Scheduler) Tick(now time.Time) []Action { panic("unimplemented") }

// SetWorkers replaces the worker set. Capacity and reservations follow it;
// queued requests pinned to a removed worker are rejected; in-flight
// bookings on removed workers stay until those requests end.
func (s *Scheduler) SetWorkers(now time.Time, workers []Worker) []Action { panic("unimplemented") }

// Drain rejects every queued request with OutcomeShutdown.
func (s *Scheduler) Drain(now time.Time) []Action { panic("unimplemented") }

// NextDeadline returns the earliest time at which Tick has work (a queue
// timeout or a starvation promotion), and false when there is none.
func (s *Scheduler) NextDeadline() (time.Time, bool) { panic("unimplemented") }

// Route picks the least-loaded eligible worker for a request that needs no
// admission (GET /v1/models and the like). It books nothing.
func (s *Scheduler) Route(model string) (worker string, rank uint32, ok bool) {
	panic("unimplemented")
}

// Stats returns a snapshot for metrics.
func (s *Scheduler) Stats() Stats { panic("unimplemented") }
