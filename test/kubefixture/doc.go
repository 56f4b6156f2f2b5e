// Package kubefixture holds the Kubernetes fixtures of the discovery tests:
// the objects (Pods, EndpointSlices, InferencePools, InferenceObjectives),
// the fake clients that serve them, and the recorders, log buffers and
// waits the tests observe a source with. Both the unit tests of
// extproc/discovery/kube and the end-to-end tests of test/discovery use it.
//
// The objects are plain corev1, discoveryv1 and unstructured values, and
// the package imports neither the shell package extproc nor
// extproc/discovery/kube, so that kube's own tests can import it without a
// cycle. Production code never imports it.
package kubefixture
