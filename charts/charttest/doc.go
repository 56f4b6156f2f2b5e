// Package charttest lints and renders the tollgate Helm chart
// (charts/tollgate) with the Helm libraries, for the default values and for
// each Envoy integration, and decodes every rendered object strictly into
// its Kubernetes, Istio, Envoy Gateway or Prometheus Operator Go type. The
// Envoy parts of the rendered objects go through the same checks as the
// shipped Envoy artefacts (package envoy). It needs no cluster and no
// network.
//
// The package has no code outside its tests.
package charttest
