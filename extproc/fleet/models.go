package fleet

// maxKnownModels bounds the model names a replica remembers; past it every
// model counts as known, so nothing is answered 404 by mistake.
const maxKnownModels = 1024

// KnownModels is every model some worker served since the start. A model
// outside it is one no worker of this fleet serves, which OpenAI clients
// must hear as 404 model_not_found (a retry cannot help), where a known
// model whose workers are all gone for now keeps the protocol's 503. The
// zero value is empty; it is not safe for concurrent use.
type KnownModels struct {
	names map[string]struct{}
	// all is set once a worker without a model (it serves every model)
	// was seen, or the bound was reached.
	all bool
}

// Note records the models of a worker set.
func (k *KnownModels) Note(ws *Set) {
	if k.names == nil {
		k.names = make(map[string]struct{})
	}
	for _, w := range ws.Sched {
		switch {
		case k.all:
			return
		case w.Model == "":
			k.all = true
		case len(k.names) >= maxKnownModels:
			k.all = true
		default:
			k.names[w.Model] = struct{}{}
		}
	}
}

// Unknown reports a model no worker has served since the start.
func (k *KnownModels) Unknown(model string) bool {
	if k.all || model == "" {
		return false
	}
	_, ok := k.names[model]
	return !ok
}
