package extproc

import (
	"fmt"
	"maps"

	"github.com/prometheus/client_golang/prometheus"

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

// Sources of an objective name, the source label of tollgate_objectives.
const (
	objectiveFromFlag   = "flag"
	objectiveFromObject = "inferenceobjective"
)

// objectiveCollector exports the objective mapping in force: how many
// names map to each class, by where the mapping comes from. Eight series
// at most, whatever the number of names.
type objectiveCollector struct {
	s    *Server
	desc *prometheus.Desc
}

func newObjectiveCollector(s *Server) *objectiveCollector {
	return &objectiveCollector{s: s, desc: prometheus.NewDesc("tollgate_objectives",
		"Objective header values mapped to each priority class, by source: flag (--objective-class) or inferenceobjective (InferenceObjective objects of the pool).",
		[]string{"class", "source"}, nil)}
}

func (c *objectiveCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *objectiveCollector) Collect(ch chan<- prometheus.Metric) {
	var flag, object [sched.NumPriorities]int
	for name, p := range *c.s.planner.objectives.Load() {
		if _, ok := c.s.cfg.Objectives[name]; ok {
			flag[p]++
		} else {
			object[p]++
		}
	}
	for p := range sched.Priority(sched.NumPriorities) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(flag[p]), p.String(), objectiveFromFlag)
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(object[p]), p.String(), objectiveFromObject)
	}
}
