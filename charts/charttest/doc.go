// Package charttest lints and renders the tollgate Helm chart
// (charts/tollgate) with the Helm libraries, for the default values, for
// each Envoy integration, for each worker discovery mode (static,
// Kubernetes EndpointSlices by Service or by selector, InferencePool) and
// with replicas (leader election over a Lease or etcd, the peer channel, the
// NetworkPolicy's peer rule, the preStop sleep and the
// PodDisruptionBudget), and decodes every rendered object strictly into its
// Kubernetes (RBAC included), Istio, Envoy Gateway or Prometheus Operator Go
// type. The Envoy parts of the rendered objects go through the same checks
// as the shipped Envoy artefacts (package envoy); the rendered arguments and
// files go through the real `tollgate check-config`; the RBAC rules are
// compared exactly against the least privilege each mode needs; the
// InferencePool example values are held to the plain-manifest example in
// examples/kubernetes. It needs no cluster and no network.
//
// The package has no code outside its tests.
package charttest
