package extproc

import "github.com/tollgate/tollgate/extproc/fleet"

// maxKnownModels bounds the model names a replica remembers; past it every
// model counts as known, so nothing is answered 404 by mistake.
const maxKnownModels = 1024

// knownModels is every model some worker served since the start. A model
// outside it is one no worker of this fleet serves, which OpenAI clients
// must hear as 404 model_not_found (a retry cannot help), where a known
// model whose workers are all gone for now keeps the protocol's 503. Owned
// by the dispatcher.
type knownModels struct {
	names map[string]struct{}
	// all is set once a worker without a model (it serves every model)
	// was seen, or the bound was reached.
	all bool
}

// note records the models of a worker set.
func (k *knownModels) note(ws *fleet.Set) {
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

// unknown reports a model no worker has served since the start.
func (k *knownModels) unknown(model string) bool {
	if k.all || model == "" {
		return false
	}
	_, ok := k.names[model]
	return !ok
}
