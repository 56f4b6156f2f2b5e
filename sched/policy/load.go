package policy

import (
	"errors"

	"github.com/tollgate/tollgate/sched"
)

// Files names the configuration files tollgate reads and the flags that
// stand in for them, as `tollgate serve` takes them.
type Files struct {
	// RouterPolicy is the Dynamo router policy file (--router-policy-config);
	// empty means none.
	RouterPolicy string
	// QueueThreshold and QueuePolicy shape the synthetic default class used
	// without a profile (--router-queue-threshold, nil when unset, and
	// --router-queue-policy).
	QueueThreshold *float64
	QueuePolicy    string
	// PriorityEnabled turns SMG priority admission on
	// (--priority-scheduler-enabled); PriorityConfig is its file
	// (--priority-scheduler-config), empty for the built-in defaults.
	PriorityEnabled bool
	PriorityConfig  string
}

// Load reads f: the policy configuration, with the synthetic default class
// as its fallback, and the priority file (nil when priority admission is
// off; the built-in defaults when it is on without a file). It reports
// every problem, joined.
func Load(f Files) (sched.PolicyConfig, *PriorityFile, error) {
	var errs []error
	var pc sched.PolicyConfig
	if f.RouterPolicy != "" {
		c, err := LoadRouterPolicy(f.RouterPolicy)
		if err != nil {
			errs = append(errs, err)
		} else {
			pc = *c
		}
	}
	fallback, err := SyntheticDefault(f.QueueThreshold, f.QueuePolicy)
	if err != nil {
		errs = append(errs, err)
	}
	pc.Fallback = fallback

	var pf *PriorityFile
	switch {
	case f.PriorityEnabled && f.PriorityConfig != "":
		if pf, err = LoadPriorityConfig(f.PriorityConfig); err != nil {
			errs = append(errs, err)
			pf = DefaultPriorityFile()
		}
	case f.PriorityEnabled:
		pf = DefaultPriorityFile()
	case f.PriorityConfig != "":
		errs = append(errs, errors.New("--priority-scheduler-config needs --priority-scheduler-enabled"))
	}
	return pc, pf, errors.Join(errs...)
}
