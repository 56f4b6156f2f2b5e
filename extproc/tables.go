package extproc

import (
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

// SetObjectives installs the objective names found outside the flags (the
// InferenceObjective objects of the pool) and their classes, replacing the
// previous ones. Config.Objectives (--objective-class) wins for any name
// both hold, and the found names past the budget of policy.MaxObjectives
// (by name order) are left out; the answer lists both, for the source to
// report. The merged mapping is checked and swapped in atomically: each
// request sees either the old mapping or the new one, and the tenant clamp
// applies after it as before. On error the current mapping stays. Safe
// for concurrent use.
func (s *Server) SetObjectives(found policy.Objectives) (intake.Merge, error) {
	m, err := s.deps.planner.Objectives().Set(found)
	if err != nil {
		return m, err
	}
	flag, object := s.deps.planner.Objectives().Counts()
	var byClass [sched.NumPriorities]int
	for p := range byClass {
		byClass[p] = flag[p] + object[p]
	}
	s.log.Info("objective classes applied", "objectives", m.Total, "from_flags", m.FromFlags,
		"system", byClass[sched.PrioritySystem], "interactive", byClass[sched.PriorityInteractive],
		"default", byClass[sched.PriorityDefault], "bulk", byClass[sched.PriorityBulk])
	return m, nil
}

// SetModelRewrites installs the rewrite rules found outside the flags (the
// InferenceModelRewrite objects of the pool), replacing the previous ones.
// Config.ModelRewrites (--model-rewrite) wins for any name both hold,
// found.Other applies only to names neither names, and the found names
// past the budget of intake.MaxModelRewrites (by name order) are left out;
// the answer lists what was shadowed and left out. The merged table is
// checked (intake.MaxRewriteTargets targets of weight 1 to
// intake.MaxRewriteWeight per name) and swapped in atomically: each
// request is rewritten by either the old table or the new one. On error
// the current table stays. Safe for concurrent use.
func (s *Server) SetModelRewrites(found intake.ModelRewriteRules) (intake.Merge, error) {
	m, err := s.deps.planner.Rewrites().Set(found)
	if err != nil {
		return m, err
	}
	s.log.Info("model rewrites applied", "models", m.Total, "from_flags", m.FromFlags,
		"other_models_rewritten", len(found.Other) > 0)
	return m, nil
}
