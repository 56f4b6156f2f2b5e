package extproc

import (
	"fmt"
	"maps"

	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

// SetObjectives installs objective names found outside the flags (the
// InferenceObjective objects of the pool) and their classes, replacing the
// previous ones. Config.Objectives (--objective-class) wins for any name
// both hold. The merged mapping is checked (names, classes, at most
// policy.MaxObjectives names) and swapped in atomically: each request sees
// either the old mapping or the new one, and the tenant clamp applies
// after it as before. On error the current mapping stays. Safe for
// concurrent use.
func (s *Server) SetObjectives(found policy.Objectives) error {
	merged, err := s.planner.setObjectives(found)
	if err != nil {
		return err
	}
	var byClass [sched.NumPriorities]int
	for _, p := range merged {
		byClass[p]++
	}
	s.log.Info("objective classes applied", "objectives", len(merged), "from_flags", len(s.cfg.Objectives),
		"system", byClass[sched.PrioritySystem], "interactive", byClass[sched.PriorityInteractive],
		"default", byClass[sched.PriorityDefault], "bulk", byClass[sched.PriorityBulk])
	return nil
}

// setObjectives merges found under the configured objectives, checks the
// result and swaps it in.
func (p *planner) setObjectives(found policy.Objectives) (policy.Objectives, error) {
	merged := make(policy.Objectives, len(found)+len(p.cfg.Objectives))
	maps.Copy(merged, found)
	maps.Copy(merged, p.cfg.Objectives)
	if err := merged.Validate(); err != nil {
		return nil, fmt.Errorf("extproc: objective classes: %w", err)
	}
	p.objectives.Store(&merged)
	return merged, nil
}
