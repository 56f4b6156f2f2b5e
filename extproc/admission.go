package extproc

import (
	"fmt"

	"github.com/tollgate/tollgate/sched"
)

// admissionState is where a request is in the scheduler's lifecycle:
//
//	idle → submitted → queued → in flight → released
//
// A state may be skipped (a request dispatched or rejected by its Submit
// is never queued; one rejected is never in flight) but never revisited.
type admissionState uint8

const (
	// admissionIdle: not handed to the scheduler; requests outside
	// admission stay here.
	admissionIdle admissionState = iota
	// admissionSubmitted: handed to the dispatcher; no news yet.
	admissionSubmitted
	// admissionQueued: the scheduler queued it.
	admissionQueued
	// admissionInFlight: dispatched; it holds a booking until released.
	admissionInFlight
	// admissionReleased: nothing is owed to the scheduler: the request
	// was released, rejected by the scheduler, or its submit never
	// reached it.
	admissionReleased
	numAdmissionStates
)

var admissionStateNames = [numAdmissionStates]string{"idle", "submitted", "queued", "in-flight", "released"}

func (s admissionState) String() string {
	if s < numAdmissionStates {
		return admissionStateNames[s]
	}
	return fmt.Sprintf("admission-state(%d)", uint8(s))
}

// admissionEnv is how an admission reaches the scheduler after its submit.
type admissionEnv interface {
	// release tells the scheduler the request is over: it leaves its
	// queue or frees what it booked.
	release(id uint64)
	// firstToken tells the scheduler an admitted request produced its
	// first token: its prefill is done and it can no longer be preempted.
	firstToken(id uint64)
	// usage tells the scheduler the tokens the worker reported, which
	// settle the tenant's budget.
	usage(id, prompt, completion uint64)
}

// admission is one request's side of the scheduler. It owns the only path
// to the scheduler's Release, so a request is released exactly once, and
// it alone knows what is owed when the stream ends.
type admission struct {
	env   admissionEnv
	id    uint64
	state admissionState
	// firstToken is set once the first token was reported (in flight).
	firstToken bool
	// decision is the scheduler's dispatch or reject; nil before it.
	decision *decision
}

// submitted records that the request was handed to the dispatcher.
func (a *admission) submitted() {
	if a.state == admissionIdle {
		a.state = admissionSubmitted
	}
}

// abandon records that the scheduler will never hear of the request
// again: its submit never reached it, or the dispatcher stopped. Nothing
// is owed.
func (a *admission) abandon() {
	if a.waiting() {
		a.state = admissionReleased
	}
}

// waiting reports whether the request waits for the scheduler's decision.
func (a *admission) waiting() bool {
	return a.state == admissionSubmitted || a.state == admissionQueued
}

// queue records the scheduler's queued notice; it reports whether the
// request was waiting for it.
func (a *admission) queue() bool {
	if a.state != admissionSubmitted {
		return false
	}
	a.state = admissionQueued
	return true
}

// decide records the scheduler's decision; it reports whether the request
// was waiting for it. A decision that comes after the request was released
// is ignored: the release that follows it at the scheduler undoes it.
func (a *admission) decide(n notice) bool {
	if !a.waiting() {
		return false
	}
	a.decision = n.decision
	if n.decision.action.Kind == sched.ActionDispatch {
		a.state = admissionInFlight
	} else {
		a.state = admissionReleased // a rejected request holds nothing
	}
	return true
}

// inFlight reports an admitted request not yet released.
func (a *admission) inFlight() bool { return a.state == admissionInFlight }

// reportFirstToken reports the first token of an admitted request, once.
func (a *admission) reportFirstToken() {
	if a.state != admissionInFlight || a.firstToken {
		return
	}
	a.firstToken = true
	a.env.firstToken(a.id)
}

// reportUsage reports the worker's usage of an admitted request.
func (a *admission) reportUsage(prompt, completion int) {
	if a.state == admissionInFlight {
		a.env.usage(a.id, uint64(max(0, prompt)), uint64(max(0, completion)))
	}
}

// release tells the scheduler the request is over, when anything is owed.
func (a *admission) release() {
	if a.owes() {
		a.state = admissionReleased
		a.env.release(a.id)
	}
}

// owes reports whether the scheduler still holds something for the
// request.
func (a *admission) owes() bool {
	switch a.state {
	case admissionSubmitted, admissionQueued, admissionInFlight:
		return true
	case admissionIdle, admissionReleased:
	}
	return false
}
