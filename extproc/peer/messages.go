package peer

import (
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/sched"
)

// UpKind says what a front tells the scheduler.
type UpKind uint8

// Up kinds. Every message after the first names one request by the
// front's own ID; the scheduler keeps a front's IDs apart from every other
// front's.
const (
	// UpHello opens the stream: Front names the front (its identity).
	UpHello UpKind = iota + 1
	// UpSubmit hands over a request to queue or dispatch (Request). A
	// request re-registered after a change of scheduler has
	// Request.Resumed set and its original Arrival.
	UpSubmit
	// UpAdopt re-registers a request already in flight: Request and
	// Booking.
	UpAdopt
	// UpRelease: the front is finished with request ID.
	UpRelease
	// UpFirstToken: request ID produced its first token.
	UpFirstToken
	// UpServed: request ID was served by Worker/Rank (a fallback).
	UpServed
	// UpUsage: the worker reported Prompt and Completion tokens for ID.
	UpUsage
	// UpSynced: the front has re-registered everything it holds (it
	// follows the burst after a link). No ID.
	UpSynced
	numUpKinds
)

// Up is one message from a front to the scheduler.
type Up struct {
	Kind UpKind `json:"k"`
	ID   uint64 `json:"id,omitempty"`
	// UpHello.
	Front string `json:"front,omitempty"`
	// UpSubmit and UpAdopt.
	Request *sched.Request `json:"req,omitempty"`
	// UpAdopt.
	Booking *sched.Booking `json:"booking,omitempty"`
	// UpServed.
	Worker string `json:"worker,omitempty"`
	Rank   uint32 `json:"rank,omitempty"`
	// UpUsage.
	Prompt     uint64 `json:"prompt,omitempty"`
	Completion uint64 `json:"completion,omitempty"`
}

// DownKind says what the scheduler tells a front.
type DownKind uint8

// Down kinds.
const (
	// DownWelcome answers UpHello: Scheduler names the scheduler's
	// replica. The front re-registers what it holds after it.
	DownWelcome DownKind = iota + 1
	// DownQueued: request ID is queued.
	DownQueued
	// DownDecided: request ID is dispatched or rejected (Decision).
	DownDecided
	// DownPreempted: request ID, in flight, was chosen as a victim.
	DownPreempted
	// DownFronts: Fronts lists the replicas linked to the scheduler now
	// (sent to every front when it changes), so that the next scheduler
	// knows whose re-registration to wait for. No ID.
	DownFronts
	numDownKinds
)

// Down is one message from the scheduler to a front.
type Down struct {
	Kind DownKind `json:"k"`
	ID   uint64   `json:"id,omitempty"`
	// DownWelcome.
	Scheduler string `json:"scheduler,omitempty"`
	// DownDecided.
	Decision *Decision `json:"decision,omitempty"`
	// DownFronts.
	Fronts []string `json:"fronts,omitempty"`
}

// Decision is the scheduler's dispatch or reject of one request, with the
// target resolved on the scheduler's worker set.
type Decision struct {
	// Action has no Fallbacks: they are resolved into Target.
	Action sched.Action `json:"action"`
	Target fleet.Target `json:"target"`
	// UnknownModel marks a no-endpoints reject for a model no worker has
	// served (answered 404 model_not_found).
	UnknownModel bool `json:"unknown_model,omitempty"`
}
