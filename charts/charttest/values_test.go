package charttest

import (
	"strings"
	"testing"
)

// TestSchemaRejectsBadValues: values.schema.json must refuse each of these
// before anything renders.
func TestSchemaRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"unknown top-level key", "replicas: 2\n", "replicas"},
		{"unknown nested key", "image: {tagg: v1}\n", "tagg"},
		{"integration enum", "integration: nginx\n", "integration"},
		{"wrong type", "image: {tag: 5}\n", "tag"},
		{"negative replicas", "replicaCount: -1\n", "replicaCount"},
		{"port range", "ports: {grpc: 70000}\n", "grpc"},
		{"duration format", "envoy: {messageTimeout: 1 second}\n", "messageTimeout"},
		{"worker address is a hostname", "config: {workers: [{id: w0, address: \"vllm:8000\"}]}\n", "address"},
		{"worker without id", "config: {workers: [{address: \"10.0.0.5:8000\"}]}\n", "id"},
		{"worker unknown field", "config: {workers: [{id: w0, address: \"10.0.0.5:8000\", gpu: 1}]}\n", "gpu"},
		{"tenant id with colon", "tenants: {apiKeys: [{id: \"a:b\", key: k}]}\n", "id"},
		{"app protocol", "service: {grpcAppProtocol: http}\n", "grpcAppProtocol"},
		{"priority class", "config: {priorityScheduler: {defaultMaxClass: gold}}\n", "defaultMaxClass"},
		{"log level", "logLevel: verbose\n", "logLevel"},
		{"buffer quantity", "envoyGateway: {clientTrafficPolicy: {bufferLimit: 8 MiB}}\n", "bufferLimit"},
		{"discovery mode", "discovery: {mode: dns}\n", "/discovery/mode"},
		{"discovery unknown key", "discovery: {kubernetes: {labels: app=vllm}}\n", "labels"},
		{"debounce not a duration", "discovery: {debounce: soon}\n", "/discovery/debounce"},
		{"debounce zero", "discovery: {debounce: 0ms}\n", "/discovery/debounce"},
		{"service with a namespace", "discovery: {kubernetes: {service: models/vllm}}\n", "/discovery/kubernetes/service"},
		{"worker namespace", "discovery: {kubernetes: {namespace: Models}}\n", "/discovery/kubernetes/namespace"},
		{"worker port range", "discovery: {kubernetes: {port: 70000}}\n", "/discovery/kubernetes/port"},
		{"worker port name", "discovery: {kubernetes: {port: HTTP_1}}\n", "/discovery/kubernetes/port"},
		{"pool name", "discovery: {inferencePool: {name: Pool_1}}\n", "/discovery/inferencePool/name"},
		{"default dp size", "discovery: {defaults: {dpSize: 2048}}\n", "/discovery/defaults/dpSize"},
		{"default slots negative", "discovery: {defaults: {maxRunningRequests: -1}}\n", "/discovery/defaults/maxRunningRequests"},
		{"default model whitespace", "discovery: {defaults: {model: \" llama\"}}\n", "/discovery/defaults/model"},
		{"fractional lease seconds", "leaderElection: {leaseDuration: 1.5s}\n", "/leaderElection/leaseDuration"},
		{"lease in milliseconds", "leaderElection: {retryPeriod: 1500ms}\n", "/leaderElection/retryPeriod"},
		{"lease zero", "leaderElection: {renewDeadline: 0s}\n", "/leaderElection/renewDeadline"},
		{"leader election switch", "leaderElection: {enabled: \"yes\"}\n", "/leaderElection/enabled"},
		{"lease name", "leaderElection: {leaseName: Tollgate}\n", "/leaderElection/leaseName"},
		{"rbac unknown key", "rbac: {createRoles: true}\n", "createRoles"},
		{"election backend", "leaderElection: {backend: consul}\n", "/leaderElection/backend"},
		{"peer port range", "leaderElection: {peerPort: 0}\n", "/leaderElection/peerPort"},
		{"etcd endpoints with spaces", "leaderElection: {backend: etcd, etcdEndpoints: \"http://a:2379, http://b:2379\"}\n", "/leaderElection/etcdEndpoints"},
		{"negative preStop sleep", "shutdown: {preStopSeconds: -1}\n", "/shutdown/preStopSeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(t, values(t, tc.doc))
			if err == nil {
				t.Fatal("rendered; want a schema error")
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v; want a schema error naming %q", err, tc.want)
			}
		})
	}
}

func TestTemplatesRejectBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"grace period too short", "terminationGracePeriodSeconds: 40\n", "must exceed shutdown.preStopSeconds + shutdown.drainDelaySeconds + shutdown.timeoutSeconds (40)"},
		{"grace period without the preStop sleep", "terminationGracePeriodSeconds: 35\nshutdown: {preStopSeconds: 0}\n", "must exceed shutdown.preStopSeconds + shutdown.drainDelaySeconds + shutdown.timeoutSeconds (35)"},
		{"TLS without a secret", "grpcTLS: {enabled: true}\n", "grpcTLS.secretName is required"},
		{"kubernetes without a source", "discovery: {mode: kubernetes}\n", "discovery.mode kubernetes needs discovery.kubernetes.service"},
		{"kubernetes with two sources", "discovery: {mode: kubernetes, kubernetes: {service: vllm, selector: app=vllm}}\n", "discovery.kubernetes.service and discovery.kubernetes.selector are exclusive"},
		{"inferencepool without a pool", "discovery: {mode: inferencepool}\n", "discovery.mode inferencepool needs discovery.inferencePool.name"},
		{"inferencepool with an Envoy integration", "integration: istio\ndiscovery: {mode: inferencepool, inferencePool: {name: p}}\n", "discovery.mode inferencepool needs integration: none, not istio"},
		{"workers with discovery", "config: {workers: [{id: w0, address: \"10.0.0.5:8000\"}]}\ndiscovery: {mode: kubernetes, kubernetes: {service: vllm}}\n", "config.workers lists workers but discovery.mode is kubernetes"},
		{"peer port on the grpc port", "leaderElection: {peerPort: 9002}\n", "leaderElection.peerPort (9002) must differ from ports.grpc and ports.metrics"},
		{"peer port on the metrics port", "ports: {grpc: 9002, metrics: 9100}\nleaderElection: {peerPort: 9100}\n", "leaderElection.peerPort (9100) must differ"},
		{"etcd without endpoints", "leaderElection: {backend: etcd}\n", "leaderElection.backend etcd needs leaderElection.etcdEndpoints"},
		{"etcd endpoints with the kube backend", "leaderElection: {etcdEndpoints: \"http://etcd:2379\"}\n", "leaderElection.etcdEndpoints is set but leaderElection.backend is kube"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(t, values(t, tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v; want one containing %q", err, tc.want)
			}
		})
	}
	// A long enough grace period is taken as given.
	d, _ := mustRender(t, values(t, "terminationGracePeriodSeconds: 41\n")).deployment(t)
	if gp := d.Spec.Template.Spec.TerminationGracePeriodSeconds; gp == nil || *gp != 41 {
		t.Errorf("terminationGracePeriodSeconds = %v; want 41", gp)
	}
	// One pod ignores the replica values, a peer port clash included.
	if _, err := renderChart(t, values(t, single+"leaderElection: {peerPort: 9002, backend: etcd}\n")); err != nil {
		t.Errorf("one pod with unused replica values: %v", err)
	}
}
