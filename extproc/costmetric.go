package extproc

import "github.com/tollgate/tollgate/extproc/request/tokenize"

// observeCostError records one prompt-token estimate error for model,
// labelled with the kind of tokenizer that serves the model.
func (p *planner) observeCostError(model string, ratio float64) {
	p.metrics.costError.WithLabelValues(p.metrics.models.label(metricModel(model)), tokenize.Kind(p.tok, model)).Observe(ratio)
}
