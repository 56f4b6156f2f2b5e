package envoy_test

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	istioclient "istio.io/client-go/pkg/apis/networking/v1alpha3"

	"github.com/tollgate/tollgate/envoy"
)

const envoyFilterFile = "istio/envoyfilter.yaml"

func loadEnvoyFilter(doc []byte) (*istioclient.EnvoyFilter, error) {
	ef, err := envoy.DecodeEnvoyFilter(doc)
	if err != nil {
		return nil, err
	}
	return ef, envoy.CheckEnvoyFilter(ef, envoy.Defaults())
}

func TestEnvoyFilterIsValid(t *testing.T) {
	ef, err := loadEnvoyFilter([]byte(read(t, envoyFilterFile)))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(ef.Spec.GetConfigPatches()); got != 6 {
		t.Errorf("got %d config patches; want 6", got)
	}
}

// patchOf decodes the value of the first patch whose value decodes into m
// and satisfies ok.
func patchOf[T proto.Message](t *testing.T, ef *istioclient.EnvoyFilter, m T, ok func(T) bool) T {
	t.Helper()
	for _, cp := range ef.Spec.GetConfigPatches() {
		js, err := protojson.Marshal(cp.GetPatch().GetValue())
		if err != nil {
			t.Fatal(err)
		}
		v := proto.Clone(m).(T)
		if protojson.Unmarshal(js, v) == nil && ok(v) {
			return v
		}
	}
	t.Fatalf("no patch holds the wanted %T", m)
	return m
}

// TestEnvoyFilterMatchesBootstrap keeps the Istio patches equal to the
// standalone bootstrap where they describe the same thing: the ext_proc
// filter (but for Istio's cluster name; request_attributes and
// send_body_without_waiting_for_header_response included), the worker
// cluster (but for its name) and the local reply settings.
func TestEnvoyFilterMatchesBootstrap(t *testing.T) {
	b, err := load([]byte(read(t, "envoy.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	ef, err := loadEnvoyFilter([]byte(read(t, envoyFilterFile)))
	if err != nil {
		t.Fatal(err)
	}
	hcm, ep := extProc(t, b)

	f := patchOf(t, ef, new(hcmv3.HttpFilter), func(f *hcmv3.HttpFilter) bool { return f.GetName() == "envoy.filters.http.ext_proc" })
	iep, err := envoy.Unpack[*extprocv3.ExternalProcessor](f.GetTypedConfig())
	if err != nil {
		t.Fatal(err)
	}
	iep.GrpcService.GetEnvoyGrpc().ClusterName = ep.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	if diff := cmp.Diff(ep, iep, protocmp.Transform()); diff != "" {
		t.Errorf("ext_proc filter differs (-bootstrap +istio):\n%s", diff)
	}

	ic := patchOf(t, ef, new(clusterv3.Cluster), func(c *clusterv3.Cluster) bool { return c.GetType() == clusterv3.Cluster_ORIGINAL_DST })
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetType() == clusterv3.Cluster_ORIGINAL_DST {
			ic.Name = c.GetName()
			if diff := cmp.Diff(c, ic, protocmp.Transform()); diff != "" {
				t.Errorf("ORIGINAL_DST cluster differs (-bootstrap +istio):\n%s", diff)
			}
		}
	}

	var ihcm *hcmv3.HttpConnectionManager
	patchOf(t, ef, new(listenerv3.Filter), func(f *listenerv3.Filter) bool {
		h, err := envoy.Unpack[*hcmv3.HttpConnectionManager](f.GetTypedConfig())
		ihcm = h
		return err == nil
	})
	if diff := cmp.Diff(hcm.GetLocalReplyConfig(), ihcm.GetLocalReplyConfig(), protocmp.Transform()); diff != "" {
		t.Errorf("local_reply_config differs (-bootstrap +istio):\n%s", diff)
	}
	if ihcm.GetStreamIdleTimeout().AsDuration() != hcm.GetStreamIdleTimeout().AsDuration() ||
		ihcm.GetRequestTimeout().AsDuration() != hcm.GetRequestTimeout().AsDuration() {
		t.Errorf("HCM timers differ: istio %v/%v, bootstrap %v/%v", ihcm.GetStreamIdleTimeout(), ihcm.GetRequestTimeout(),
			hcm.GetStreamIdleTimeout(), hcm.GetRequestTimeout())
	}
}

func TestEnvoyFilterMutationsFail(t *testing.T) {
	for _, m := range []mutation{
		{"misspelled metadata field", "namespace: istio-system", "namespce: istio-system", `unknown field "namespce"`},
		{"misspelled spec field", "workloadSelector:", "workloadSelektor:", `unknown field "workloadSelektor"`},
		{"misspelled patch field", "    patch:\n      operation: INSERT_BEFORE", "    patch:\n      operashun: INSERT_BEFORE", `unknown field "operashun"`},
		{"misspelled field in patch value", "failure_mode_allow: false", "failure_mode_alow: false", `unknown field "failure_mode_alow"`},
		{"misspelled field in nested Any", "max_message_timeout: 310s", "max_mesage_timeout: 310s", `unknown field "max_mesage_timeout"`},
		{"bad enum", "applyTo: HTTP_ROUTE", "applyTo: HTTP_ROUT", "for enum istio.networking.v1alpha3.EnvoyFilter.ApplyTo"},
		{"wrong kind", "kind: EnvoyFilter", "kind: Sidecar", "want networking.istio.io/v1alpha3 EnvoyFilter"},
		{"rule inside Any", "max_message_timeout: 310s", "max_message_timeout: 7200s", "value must be inside range"},
		{"rule in cluster", "connect_timeout: 5s", "connect_timeout: 0s", "ConnectTimeout: value must be greater than 0s"},
		{"no selector", "  workloadSelector:\n    labels:\n      istio: ingressgateway\n", "", "neither workloadSelector labels nor targetRefs"},
		{"sidecar context", "      context: GATEWAY\n      listener:\n        filterChain:\n          filter:\n            name: envoy.filters.network.http_connection_manager\n            subFilter:\n              name: envoy.filters.http.router\n    patch:\n      operation: INSERT_BEFORE\n      value:\n        name: envoy.filters.http.ext_proc",
			"      context: SIDECAR_INBOUND\n      listener:\n        filterChain:\n          filter:\n            name: envoy.filters.network.http_connection_manager\n            subFilter:\n              name: envoy.filters.http.router\n    patch:\n      operation: INSERT_BEFORE\n      value:\n        name: envoy.filters.http.ext_proc",
			"match.context is SIDECAR_INBOUND"},
		{"fail open", "failure_mode_allow: false", "failure_mode_allow: true", "failure_mode_allow must be false"},
		{"cluster name", `"outbound|9002||tollgate.tollgate.svc.cluster.local"`, "tollgate", "not an Istio outbound cluster name"},
		{"ORIGINAL_DST lb_policy", "lb_policy: CLUSTER_PROVIDED", "lb_policy: ROUND_ROBIN", "ORIGINAL_DST requires lb_policy CLUSTER_PROVIDED"},
		{"route cluster", "cluster: tollgate-original-dst", "cluster: elsewhere", `route.cluster is "elsewhere"`},
		{"route retries", "num_retries: 0", "num_retries: 2", "retry_policy allows retries"},
		{"route name", "name: tollgate-inference", "name: \"\"", "must name the inference route"},
		{"stream idle", "stream_idle_timeout: 330s", "stream_idle_timeout: 300s", "stream_idle_timeout is 5m0s"},
		{"buffer", "per_connection_buffer_limit_bytes: 8388608", "per_connection_buffer_limit_bytes: 32768", "per_connection_buffer_limit_bytes is 32768"},
		{"no source.address", "request_attributes: [source.address]", "request_attributes: []", "request_attributes must list source.address"},
		{"response headers not holdable", "send_body_without_waiting_for_header_response: true", "send_body_without_waiting_for_header_response: false", "send_body_without_waiting_for_header_response must be true"},
		{"filter order", "name: envoy.filters.http.header_mutation", "name: envoy.filters.http.lua", "needs a envoy.filters.http.header_mutation filter before"},
	} {
		t.Run(m.name, func(t *testing.T) {
			_, err := loadEnvoyFilter(m.apply(t, read(t, envoyFilterFile)))
			wantError(t, err, m.wantErr)
		})
	}
}
