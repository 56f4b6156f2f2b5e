package charttest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/tollgate/tollgate/envoy"
)

// sample workers, policy and priority files used by several tests.
const sampleConfig = `
config:
  workers:
  - {id: w0, address: "10.0.0.5:8000", max_running_requests: 128, model: llama}
  - {id: w1, address: "10.0.0.6:8000", max_running_requests: 128, dp_size: 2, dp_start_rank: 0}
` + samplePolicies

// discoveryConfig is sampleConfig without the workers, for the modes that
// discover them.
const discoveryConfig = `
config:
` + samplePolicies

// samplePolicies are the policy and priority files, under config.
const samplePolicies = `  routerPolicy:
    default_policy_family: regular
    uncached_isl_buckets:
    - {min_tokens: 0, bucket: all}
    policy_classes:
    - {name: premium, policy_family: premium, cache_bucket: all, quantum: 512, prefill_busy_threshold: 1536}
    - {name: regular, policy_family: regular, cache_bucket: all, quantum: 128, prefill_busy_threshold: 1536}
  priorityScheduler:
    enabled: true
    config:
      classes:
        bulk: {reserved_floor: 0, queue_size: 2048, queue_timeout_secs: 300, starvation_threshold_secs: 120, can_preempt: false}
    defaultMaxClass: default
`

// single is one pod: no leader election, no peer channel.
const single = "replicaCount: 1\n"

// scenarios are the value sets every render test covers. The default runs
// two replicas (leader election with the peer channel); the integrations
// and the Kubernetes discovery modes run one pod.
var scenarios = map[string]string{
	"default":      ``,
	"istio":        sampleConfig + single + "integration: istio\n",
	"envoyGateway": sampleConfig + single + "integration: envoyGateway\n",
	// The discovery modes; leader election starts with replicas.
	"kubernetesService": discoveryConfig + single + `
discovery:
  mode: kubernetes
  kubernetes: {service: vllm, port: http}
  defaults: {maxRunningRequests: 256, maxNumBatchedTokens: 8192, dpSize: 2, model: llama}
  debounce: 500ms
`,
	"kubernetesSelector": discoveryConfig + single + `
integration: istio
discovery:
  mode: kubernetes
  kubernetes: {selector: "app=vllm,tier in (gpu)", namespace: models, port: 8000}
`,
	"inferencePool": discoveryConfig + `
replicaCount: 2
discovery:
  mode: inferencepool
  inferencePool: {name: vllm-llama}
  defaults: {maxRunningRequests: 64}
fairness: {mode: tenant, maxFlows: 256, weights: {"header:team-a": 3}}
objectiveClasses: {pinned: system}
`,
	"leaderElection": sampleConfig + `
integration: envoyGateway
replicaCount: 3
leaderElection: {leaseDuration: 20s, renewDeadline: 15s, retryPeriod: 3s}
`,
	// Replicas elected over etcd, as Dynamo deploys it: no Kubernetes API.
	"etcd": sampleConfig + `
leaderElection:
  backend: etcd
  etcdEndpoints: "http://etcd-0.etcd:2379,http://etcd-1.etcd:2379"
  peerPort: 9100
  leaseDuration: 10s
`,
	"everything": sampleConfig + `
integration: istio
serviceMonitor: {enabled: true, labels: {release: prom}}
prometheusRule: {enabled: true, labels: {release: prom}}
podDisruptionBudget: {enabled: true}
grafanaDashboard: {enabled: true}
tenants:
  apiKeys:
  - {id: team-a, key: s3cret-a}
  - {id: team-b, key: s3cret-b}
grpcTLS: {enabled: true, secretName: tollgate-tls, clientCASecretName: envoy-ca}
extraArgs: [--block-size=32]
`,
}

func TestLint(t *testing.T) {
	for name, doc := range scenarios {
		t.Run(name, func(t *testing.T) {
			l := lint.All(chartDir, values(t, doc), namespace, false)
			for _, m := range l.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("lint: %s", m)
				}
			}
		})
	}
}

func TestRenderKinds(t *testing.T) {
	for _, tc := range []struct {
		scenario string
		want     []string
	}{
		{"default", []string{"ConfigMap", "Deployment", "NetworkPolicy", "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"}},
		{"istio", []string{"ConfigMap", "Deployment", "EnvoyFilter", "NetworkPolicy", "PodDisruptionBudget", "Service", "ServiceAccount"}},
		{"envoyGateway", []string{"BackendTrafficPolicy", "ClientTrafficPolicy", "ConfigMap", "Deployment", "EnvoyExtensionPolicy", "NetworkPolicy", "PodDisruptionBudget", "Service", "ServiceAccount"}},
		{"everything", []string{"ConfigMap", "ConfigMap", "Deployment", "EnvoyFilter", "NetworkPolicy", "PodDisruptionBudget", "PrometheusRule", "Role", "RoleBinding", "Secret", "Service", "ServiceAccount", "ServiceMonitor"}},
		{"kubernetesService", []string{"ConfigMap", "Deployment", "NetworkPolicy", "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"}},
		{"kubernetesSelector", []string{"ConfigMap", "Deployment", "EnvoyFilter", "NetworkPolicy", "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"}},
		{"inferencePool", []string{"ConfigMap", "Deployment", "NetworkPolicy", "PodDisruptionBudget", "Role", "Role", "RoleBinding", "RoleBinding", "Service", "ServiceAccount"}},
		{"leaderElection", []string{"BackendTrafficPolicy", "ClientTrafficPolicy", "ConfigMap", "Deployment", "EnvoyExtensionPolicy", "NetworkPolicy", "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"}},
		// etcd elects: no Lease, so no Role.
		{"etcd", []string{"ConfigMap", "Deployment", "NetworkPolicy", "PodDisruptionBudget", "Service", "ServiceAccount"}},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			r := mustRender(t, values(t, scenarios[tc.scenario]))
			if diff := cmp.Diff(tc.want, r.kinds); diff != "" {
				t.Errorf("rendered kinds (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeployment(t *testing.T) {
	r := mustRender(t, values(t, scenarios["istio"]))
	d, c := r.deployment(t)
	if want := "ghcr.io/tollgate/tollgate:" + loadChart(t).Metadata.AppVersion; c.Image != want {
		t.Errorf("image = %q; want %q", c.Image, want)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if diff := cmp.Diff(map[string]int32{"grpc": 9002, "metrics": 9090}, ports); diff != "" {
		t.Errorf("container ports (-want +got):\n%s", diff)
	}
	probe := func(name string, p *corev1.Probe) *corev1.Probe {
		if p == nil {
			t.Fatalf("%s probe is missing", name)
		}
		return p
	}
	metrics := intstr.FromString("metrics")
	if g := probe("readiness", c.ReadinessProbe).HTTPGet; g == nil || g.Path != "/readyz" || g.Port != metrics {
		t.Errorf("readiness probe = %+v; want GET /readyz on the metrics port", c.ReadinessProbe.ProbeHandler)
	}
	if g := probe("liveness", c.LivenessProbe).HTTPGet; g == nil || g.Path != "/healthz" || g.Port != metrics {
		t.Errorf("liveness probe = %+v; want GET /healthz on the metrics port", c.LivenessProbe.ProbeHandler)
	}
	if g := probe("startup", c.StartupProbe).GRPC; g == nil || g.Port != 9002 {
		t.Errorf("startup probe = %+v; want gRPC health on port 9002", c.StartupProbe.ProbeHandler)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("securityContext = %+v; want non-root, read-only root, no privilege escalation, drop ALL", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources = %+v; want CPU requests and a memory limit", c.Resources)
	}
	if gp := d.Spec.Template.Spec.TerminationGracePeriodSeconds; gp == nil || *gp <= 5+5+30 {
		t.Errorf("terminationGracePeriodSeconds = %v; want more than preStop sleep + drain delay + shutdown timeout (40)", gp)
	}
	want := map[string]string{
		"grpc-addr":                            ":9002",
		"metrics-addr":                         ":9090",
		"discovery":                            "static",
		"workers":                              "/etc/tollgate/config/workers.yaml",
		"router-policy-config":                 "/etc/tollgate/config/router-policy.yaml",
		"priority-scheduler-enabled":           "",
		"priority-scheduler-config":            "/etc/tollgate/config/priority.yaml",
		"priority-scheduler-default-max-class": "default",
		"envoy-message-timeout":                "1s",
		"envoy-max-message-timeout":            "310s",
		"max-body-bytes":                       "8388608",
		"engine-metrics-interval":              "500ms",
		"engine-metrics-timeout":               "400ms",
		"engine-metrics-max-inflight":          "32",
		"engine-metrics-staleness":             "2s",
		"engine-saturation":                    "true",
		"engine-saturation-waiting":            "5",
		"engine-saturation-kv":                 "0.8",
		"engine-warm-start":                    "true",
		"engine-capacity":                      "true",
		"tokenizer":                            "estimate",
		"drain-delay":                          "5s",
		"shutdown-timeout":                     "30s",
		"max-concurrent-streams":               "40000",
		"first-message-timeout":                "10s",
		"log-level":                            "info",
	}
	for name, v := range want {
		got, ok := flag(c.Args, name)
		if !ok || got != v {
			t.Errorf("flag --%s = %q (present %v); want %q", name, got, ok, v)
		}
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Errorf("args = %q; want the serve command first", c.Args)
	} else if len(c.Args)-1 != len(want) {
		t.Errorf("args = %q; want serve and exactly the %d flags above", c.Args, len(want))
	}
}

func TestDeploymentOptionalParts(t *testing.T) {
	r := mustRender(t, values(t, scenarios["everything"]))
	_, c := r.deployment(t)
	for name, v := range map[string]string{
		"tenant-api-keys-file": "/etc/tollgate/tenants/keys",
		"grpc-tls-cert":        "/etc/tollgate/tls/tls.crt",
		"grpc-tls-key":         "/etc/tollgate/tls/tls.key",
		"grpc-client-ca":       "/etc/tollgate/client-ca/ca.crt",
		"block-size":           "32",
	} {
		if got, ok := flag(c.Args, name); !ok || got != v {
			t.Errorf("flag --%s = %q (present %v); want %q", name, got, ok, v)
		}
	}
	// A Kubernetes gRPC probe cannot speak TLS, so startup falls back to HTTP.
	if c.StartupProbe.GRPC != nil || c.StartupProbe.HTTPGet == nil || c.StartupProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("startup probe with grpcTLS = %+v; want GET /healthz", c.StartupProbe.ProbeHandler)
	}
	if len(r.secrets) != 1 || string(r.secrets[0].Data["keys"]) != "team-a:s3cret-a\nteam-b:s3cret-b\n" {
		t.Errorf("tenant Secret = %+v; want keys with one ID:KEY per line", r.secrets)
	}
	if len(r.serviceMonitors) != 1 || r.serviceMonitors[0].Spec.Endpoints[0].Port != "metrics" ||
		r.serviceMonitors[0].Spec.Endpoints[0].Path != "/metrics" || r.serviceMonitors[0].Labels["release"] != "prom" {
		t.Errorf("ServiceMonitor = %+v; want the metrics port at /metrics with the extra label", r.serviceMonitors)
	}
	if len(r.pdbs) != 1 || r.pdbs[0].Spec.MaxUnavailable == nil || r.pdbs[0].Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget = %+v; want maxUnavailable 1", r.pdbs)
	}
}

func TestService(t *testing.T) {
	r := mustRender(t, nil)
	if len(r.services) != 1 {
		t.Fatalf("rendered %d Services; want 1", len(r.services))
	}
	type port struct {
		Port        int32
		Target      string
		AppProtocol string
	}
	got := map[string]port{}
	for _, p := range r.services[0].Spec.Ports {
		got[p.Name] = port{p.Port, p.TargetPort.String(), *p.AppProtocol}
	}
	want := map[string]port{"grpc": {9002, "grpc", "grpc"}, "metrics": {9090, "metrics", "http"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Service ports (-want +got):\n%s", diff)
	}
}

func TestConfigFiles(t *testing.T) {
	r := mustRender(t, values(t, scenarios["istio"]))
	cm := r.configMap(t, "-config")
	var workers struct {
		Workers []map[string]any `json:"workers"`
	}
	if err := yaml.UnmarshalStrict([]byte(cm.Data["workers.yaml"]), &workers); err != nil {
		t.Fatal(err)
	}
	if len(workers.Workers) != 2 || workers.Workers[0]["address"] != "10.0.0.5:8000" || workers.Workers[1]["dp_size"] != float64(2) {
		t.Errorf("workers.yaml = %s", cm.Data["workers.yaml"])
	}
	for _, key := range []string{"router-policy.yaml", "priority.yaml"} {
		if strings.TrimSpace(cm.Data[key]) == "" {
			t.Errorf("ConfigMap has no %s", key)
		}
	}
	// The priority file is left out while the priority scheduler is off.
	r = mustRender(t, values(t, sampleConfig+"config: {priorityScheduler: {enabled: false}}\n"))
	if _, ok := r.configMap(t, "-config").Data["priority.yaml"]; ok {
		t.Error("priority.yaml rendered with the priority scheduler off")
	}
	// A file given as a string is written as given.
	r = mustRender(t, values(t, "config: {routerPolicy: \"classes: []\\n\"}\n"))
	if got := r.configMap(t, "-config").Data["router-policy.yaml"]; got != "classes: []\n" {
		t.Errorf("router-policy.yaml = %q; want the string as given", got)
	}
}

// TestChecksumRollsPods: a configuration change must change the pod
// template (so the Deployment rolls), and an unrelated change must not.
func TestChecksumRollsPods(t *testing.T) {
	annotations := func(doc string) map[string]string {
		d, _ := mustRender(t, values(t, doc)).deployment(t)
		return d.Spec.Template.Annotations
	}
	base := annotations(scenarios["istio"])
	if base["checksum/config"] == "" || base["checksum/tenants"] == "" {
		t.Fatalf("pod annotations = %v; want checksum/config and checksum/tenants", base)
	}
	for _, tc := range []struct {
		name, extra, key string
		changes          bool
	}{
		{"worker added", "config: {workers: [{id: w9, address: \"10.0.0.9:8000\"}]}\n", "checksum/config", true},
		{"policy changed", "config: {routerPolicy: {classes: [{name: batch}]}}\n", "checksum/config", true},
		{"tenant key changed", "tenants: {apiKeys: [{id: a, key: b}]}\n", "checksum/tenants", true},
		{"resources changed", "resources: {requests: {cpu: '2'}}\n", "checksum/config", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := annotations(scenarios["istio"] + tc.extra)
			if changed := got[tc.key] != base[tc.key]; changed != tc.changes {
				t.Errorf("%s changed = %v; want %v", tc.key, changed, tc.changes)
			}
		})
	}
}

// TestIntegrations runs the rendered Envoy objects through the same checks
// as the shipped artefacts and checks that tollgate is told the timers the
// rendered Envoy configuration really uses.
func TestIntegrations(t *testing.T) {
	t.Run("istio", func(t *testing.T) {
		r := mustRender(t, values(t, scenarios["istio"]))
		if len(r.envoyFilters) != 1 {
			t.Fatalf("rendered %d EnvoyFilters; want 1", len(r.envoyFilters))
		}
		ef := r.envoyFilters[0]
		_, c := r.deployment(t)
		if err := envoy.CheckEnvoyFilter(ef, needs(c.Args)); err != nil {
			t.Fatal(err)
		}
		if ef.Namespace != "istio-system" {
			t.Errorf("EnvoyFilter namespace = %q; want the gateway's, istio-system", ef.Namespace)
		}
		ep, err := envoy.ExtProcOf(ef)
		if err != nil {
			t.Fatal(err)
		}
		if want := "outbound|9002||tollgate.inference.svc.cluster.local"; ep.GetGrpcService().GetEnvoyGrpc().GetClusterName() != want {
			t.Errorf("ext_proc cluster = %q; want %q", ep.GetGrpcService().GetEnvoyGrpc().GetClusterName(), want)
		}
		wantFlag(t, c.Args, "envoy-message-timeout", ep.GetMessageTimeout().AsDuration())
		wantFlag(t, c.Args, "envoy-max-message-timeout", ep.GetMaxMessageTimeout().AsDuration())
	})
	t.Run("envoyGateway", func(t *testing.T) {
		r := mustRender(t, values(t, scenarios["envoyGateway"]))
		_, c := r.deployment(t)
		if err := r.gateway.CheckGateway(needs(c.Args)); err != nil {
			t.Fatal(err)
		}
		x := r.gateway.Extension[0].Spec.ExtProc[0]
		if got := x.BackendRefs[0].Name; got != "tollgate" || *x.BackendRefs[0].Port != 9002 {
			t.Errorf("extProc backendRef = %s:%d; want tollgate:9002", got, *x.BackendRefs[0].Port)
		}
		mt, err := time.ParseDuration(string(*x.MessageTimeout))
		if err != nil {
			t.Fatal(err)
		}
		wantFlag(t, c.Args, "envoy-message-timeout", mt)
		// Envoy Gateway cannot set max_message_timeout: tollgate must not
		// count on an override, so the flag says overrides are off.
		wantFlag(t, c.Args, "envoy-max-message-timeout", 0)
	})
	t.Run("bad values fail the checks", func(t *testing.T) {
		r := mustRender(t, values(t, scenarios["istio"]+"envoy: {maxMessageTimeout: 200s, streamIdleTimeout: 300s}\n"))
		err := envoy.CheckEnvoyFilter(r.envoyFilters[0], envoy.Defaults())
		for _, want := range []string{"neither message_timeout nor max_message_timeout exceeds", "stream_idle_timeout is 5m0s"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("CheckEnvoyFilter error = %v; want one containing %q", err, want)
			}
		}
	})
}

// needs is what the tollgate the chart runs needs from Envoy: it reads
// source.address unless told to read x-forwarded-for.
func needs(args []string) envoy.Needs {
	n := envoy.Defaults()
	if v, ok := flag(args, "client-ip-source"); ok && v == "x-forwarded-for" {
		n.SourceAddress = false
	}
	return n
}

// TestIntegrationsNeedTheEnvoyFeaturesTollgateReads breaks the rendered
// Envoy objects where tollgate needs them: the source.address attribute
// (read by default) and, for Istio, send_body_without_waiting_for_header_response.
func TestIntegrationsNeedTheEnvoyFeaturesTollgateReads(t *testing.T) {
	for _, tc := range []struct {
		scenario, old, new, want string
	}{
		{"istio", "request_attributes: [source.address]", "request_attributes: []", "request_attributes must list source.address"},
		{"istio", "send_body_without_waiting_for_header_response: true", "send_body_without_waiting_for_header_response: false", "send_body_without_waiting_for_header_response must be true"},
		{"envoyGateway", "attributes: [source.address]", "attributes: []", "processingMode.request.attributes must list source.address"},
	} {
		t.Run(tc.scenario+"/"+tc.want, func(t *testing.T) {
			files, err := renderChart(t, values(t, scenarios[tc.scenario]))
			if err != nil {
				t.Fatal(err)
			}
			changed := 0
			for name, doc := range files {
				if strings.Contains(doc, tc.old) {
					files[name] = strings.ReplaceAll(doc, tc.old, tc.new)
					changed++
				}
			}
			if changed != 1 {
				t.Fatalf("%q found in %d templates; want 1", tc.old, changed)
			}
			r, err := decodeAll(files)
			if err != nil {
				t.Fatal(err)
			}
			_, c := r.deployment(t)
			if tc.scenario == "istio" {
				err = envoy.CheckEnvoyFilter(r.envoyFilters[0], needs(c.Args))
			} else {
				err = r.gateway.CheckGateway(needs(c.Args))
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v; want one containing %q", err, tc.want)
			}
		})
	}
}

func wantFlag(t *testing.T, args []string, name string, want time.Duration) {
	t.Helper()
	v, ok := flag(args, name)
	if !ok {
		t.Errorf("--%s is missing; want %v", name, want)
		return
	}
	got, err := time.ParseDuration(v)
	if err != nil || got != want {
		t.Errorf("--%s=%s; want %v, what the rendered Envoy config uses", name, v, want)
	}
}
