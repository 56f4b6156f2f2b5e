package peer

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/sched"
)

// Limits bound what a peer may announce before anything is allocated.
const (
	// MaxMessageBytes is the largest message either side receives.
	MaxMessageBytes = 1 << 20
	// MaxIdentityBytes bounds a replica's name (Up.Front, Down.Scheduler).
	MaxIdentityBytes = 253
	// MaxStringBytes bounds every other string, except Action.Message.
	MaxStringBytes = 1024
	// MaxMessageTextBytes bounds Action.Message.
	MaxMessageTextBytes = 4096
	// MaxCached bounds Request.Cached.
	MaxCached = 4096
	// MaxAllowedWorkers bounds Request.AllowedWorkers.
	MaxAllowedWorkers = 4096
	// MaxRequiredTaints bounds Request.RequiredTaints.
	MaxRequiredTaints = 64
	// MaxFronts bounds Down.Fronts.
	MaxFronts = 256
)

var upKindNames = [numUpKinds]string{
	"up_kind(0)", "hello", "submit", "adopt", "release", "first_token", "served", "usage", "synced",
}

// String returns the kind's snake_case name; out of range it returns
// "up_kind(N)".
func (k UpKind) String() string {
	if k < numUpKinds {
		return upKindNames[k]
	}
	return "up_kind(" + strconv.Itoa(int(k)) + ")"
}

var downKindNames = [numDownKinds]string{"down_kind(0)", "welcome", "queued", "decided", "preempted", "fronts"}

// String returns the kind's snake_case name; out of range it returns
// "down_kind(N)".
func (k DownKind) String() string {
	if k < numDownKinds {
		return downKindNames[k]
	}
	return "down_kind(" + strconv.Itoa(int(k)) + ")"
}

// Validate reports whether u is well formed: its Kind in range, only the
// fields of its kind set, the ones its kind needs present, and every
// string and list within the limits. ID is 0 for UpHello only.
func (u *Up) Validate() error {
	if err := u.validate(); err != nil {
		return fmt.Errorf("peer: invalid %s message: %w", u.Kind, err)
	}
	return nil
}

func (u *Up) validate() error {
	k := u.Kind
	if k < UpHello || k >= numUpKinds {
		return errors.New("kind out of range")
	}
	if (k == UpHello || k == UpSynced) != (u.ID == 0) {
		return fmt.Errorf("id %d", u.ID)
	}
	switch {
	case u.Front != "" && k != UpHello:
		return errors.New("front set")
	case u.Request != nil && k != UpSubmit && k != UpAdopt:
		return errors.New("request set")
	case u.Booking != nil && k != UpAdopt:
		return errors.New("booking set")
	case (u.Worker != "" || u.Rank != 0) && k != UpServed:
		return errors.New("worker or rank set")
	case (u.Prompt != 0 || u.Completion != 0) && k != UpUsage:
		return errors.New("token usage set")
	}
	switch k {
	case UpHello:
		return checkName("front", u.Front, MaxIdentityBytes)
	case UpSubmit, UpAdopt:
		if u.Request == nil {
			return errors.New("no request")
		}
		if err := validateRequest(u.Request); err != nil {
			return err
		}
		if k == UpSubmit {
			return nil
		}
		if u.Booking == nil {
			return errors.New("no booking")
		}
		return validateBooking(u.Booking)
	case UpServed:
		return checkName("worker", u.Worker, MaxStringBytes)
	case UpRelease, UpFirstToken, UpUsage, UpSynced:
	}
	return nil
}

func validateRequest(r *sched.Request) error {
	if r.Priority >= sched.NumPriorities {
		return fmt.Errorf("request priority %d out of range", r.Priority)
	}
	for _, f := range [...]struct{ name, s string }{
		{"request model", r.Model},
		{"request class", r.Class},
		{"request tenant", r.Tenant},
		{"request fairness key", r.FairnessKey},
	} {
		if err := checkLen(f.name, f.s, MaxStringBytes); err != nil {
			return err
		}
	}
	if err := checkCount("request cached", len(r.Cached), MaxCached); err != nil {
		return err
	}
	for _, c := range r.Cached {
		if err := checkLen("request cached worker", c.Worker, MaxStringBytes); err != nil {
			return err
		}
	}
	if r.Pin != nil {
		if err := checkLen("request pin worker", r.Pin.Worker, MaxStringBytes); err != nil {
			return err
		}
	}
	if err := checkStrings("request required taints", r.RequiredTaints, MaxRequiredTaints); err != nil {
		return err
	}
	return checkStrings("request allowed workers", r.AllowedWorkers, MaxAllowedWorkers)
}

func validateBooking(b *sched.Booking) error {
	if err := checkLen("booking worker", b.Worker, MaxStringBytes); err != nil {
		return err
	}
	return checkLen("booking prefill worker", b.Prefill.Worker, MaxStringBytes)
}

// Validate reports whether d is well formed: its Kind in range, only the
// fields of its kind set, the ones its kind needs present, and every
// string and list within the limits. ID is 0 for DownWelcome only.
func (d *Down) Validate() error {
	if err := d.validate(); err != nil {
		return fmt.Errorf("peer: invalid %s message: %w", d.Kind, err)
	}
	return nil
}

func (d *Down) validate() error {
	k := d.Kind
	if k < DownWelcome || k >= numDownKinds {
		return errors.New("kind out of range")
	}
	if (k == DownWelcome || k == DownFronts) != (d.ID == 0) {
		return fmt.Errorf("id %d", d.ID)
	}
	switch {
	case d.Scheduler != "" && k != DownWelcome:
		return errors.New("scheduler set")
	case d.Decision != nil && k != DownDecided:
		return errors.New("decision set")
	case d.Fronts != nil && k != DownFronts:
		return errors.New("fronts set")
	}
	switch k {
	case DownWelcome:
		return checkName("scheduler", d.Scheduler, MaxIdentityBytes)
	case DownDecided:
		if d.Decision == nil {
			return errors.New("no decision")
		}
		if err := validateAction(&d.Decision.Action); err != nil {
			return err
		}
		return validateTarget("target", &d.Decision.Target, sched.MaxFallbacks)
	case DownFronts:
		if len(d.Fronts) > MaxFronts {
			return fmt.Errorf("%d fronts, more than %d", len(d.Fronts), MaxFronts)
		}
		for _, f := range d.Fronts {
			if err := checkName("front", f, MaxIdentityBytes); err != nil {
				return err
			}
		}
	case DownQueued, DownPreempted:
	}
	return nil
}

// validateAction checks a dispatch or a reject: its enums in range, its
// strings bounded, and no Fallbacks (they travel resolved, in the Target).
func validateAction(a *sched.Action) error {
	switch {
	case a.Kind != sched.ActionDispatch && a.Kind != sched.ActionReject:
		return fmt.Errorf("action kind %s is neither dispatch nor reject", a.Kind)
	case a.Outcome >= sched.NumOutcomes:
		return fmt.Errorf("action outcome %d out of range", a.Outcome)
	case a.Priority >= sched.NumPriorities || a.By >= sched.NumPriorities:
		return fmt.Errorf("action priority %d or by %d out of range", a.Priority, a.By)
	case a.LimitKind >= sched.NumLimitKinds:
		return fmt.Errorf("action limit kind %d out of range", a.LimitKind)
	case a.Stage >= sched.NumDeadlineStages:
		return fmt.Errorf("action stage %d out of range", a.Stage)
	case len(a.Fallbacks) != 0:
		return errors.New("action fallbacks set (they belong in the target)")
	}
	for _, f := range [...]struct{ name, s string }{
		{"action worker", a.Worker},
		{"action model", a.Model},
		{"action policy class", a.PolicyClass},
		{"action prefill worker", a.Prefill.Worker},
	} {
		if err := checkLen(f.name, f.s, MaxStringBytes); err != nil {
			return err
		}
	}
	return checkLen("action message", a.Message, MaxMessageTextBytes)
}

// validateTarget checks t's strings and at most maxFallbacks fallbacks,
// which have none of their own.
func validateTarget(name string, t *fleet.Target, maxFallbacks int) error {
	for _, f := range [...]struct{ name, s string }{
		{name + " worker", t.Worker},
		{name + " address", t.Address},
		{name + " prefiller", t.Prefiller},
	} {
		if err := checkLen(f.name, f.s, MaxStringBytes); err != nil {
			return err
		}
	}
	if err := checkCount(name+" fallbacks", len(t.Fallbacks), maxFallbacks); err != nil {
		return err
	}
	for i := range t.Fallbacks {
		if err := validateTarget(name+" fallback", &t.Fallbacks[i], 0); err != nil {
			return err
		}
	}
	return nil
}

// checkName requires a non-empty s of at most limit bytes.
func checkName(name, s string, limit int) error {
	if s == "" {
		return errors.New("no " + name)
	}
	return checkLen(name, s, limit)
}

func checkLen(name, s string, limit int) error {
	if len(s) > limit {
		return fmt.Errorf("%s is %d bytes, over %d", name, len(s), limit)
	}
	return nil
}

func checkCount(name string, n, limit int) error {
	if n > limit {
		return fmt.Errorf("%s has %d entries, over %d", name, n, limit)
	}
	return nil
}

// checkStrings bounds a list's length and each entry's.
func checkStrings(name string, ss []string, limit int) error {
	if err := checkCount(name, len(ss), limit); err != nil {
		return err
	}
	for _, s := range ss {
		if err := checkLen(name+" entry", s, MaxStringBytes); err != nil {
			return err
		}
	}
	return nil
}
