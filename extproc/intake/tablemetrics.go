package intake

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/sched"
)

// Sources of an objective name, the source label of tollgate_objectives.
const (
	objectiveFromFlag   = "flag"
	objectiveFromObject = "inferenceobjective"
)

// objectiveCollector exports the objective mapping in force: how many
// names map to each class, by where the mapping comes from. Eight series
// at most, whatever the number of names.
type objectiveCollector struct {
	t    *ObjectiveTable
	desc *prometheus.Desc
}

func newObjectiveCollector(t *ObjectiveTable) *objectiveCollector {
	return &objectiveCollector{t: t, desc: prometheus.NewDesc("tollgate_objectives",
		"Objective header values mapped to each priority class, by source: flag (--objective-class) or inferenceobjective (InferenceObjective objects of the pool).",
		[]string{"class", "source"}, nil)}
}

func (c *objectiveCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *objectiveCollector) Collect(ch chan<- prometheus.Metric) {
	flag, object := c.t.Counts()
	for p := range sched.Priority(sched.NumPriorities) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(flag[p]), p.String(), objectiveFromFlag)
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(object[p]), p.String(), objectiveFromObject)
	}
}

// Sources of a rewrite rule, the source label of tollgate_model_rewrites.
const (
	rewriteFromFlag   = "flag"
	rewriteFromObject = "inferencemodelrewrite"
)

// rewriteCollector exports the rewrite table in force: how many model
// names have a rule, by source, and whether a rule rewrites every other
// name. Three series, whatever the number of names.
type rewriteCollector struct {
	t    *RewriteTable
	desc *prometheus.Desc
}

func newRewriteCollector(t *RewriteTable) *rewriteCollector {
	return &rewriteCollector{t: t, desc: prometheus.NewDesc("tollgate_model_rewrites",
		"Model-name rewrite rules in force, by source: flag (--model-rewrite) or inferencemodelrewrite (InferenceModelRewrite objects of the pool); match is exact (one per model name) or any (a rule without matches, 0 or 1).",
		[]string{"source", "match"}, nil)}
}

func (c *rewriteCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *rewriteCollector) Collect(ch chan<- prometheus.Metric) {
	flag, object, anyOther := c.t.Counts()
	other := 0
	if anyOther {
		other = 1
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(flag), rewriteFromFlag, "exact")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(object), rewriteFromObject, "exact")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(other), rewriteFromObject, "any")
}
