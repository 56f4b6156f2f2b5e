package envoy_test

import (
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/tollgate/tollgate/envoy"
)

var bootstraps = []string{"envoy.yaml", "envoy-full-duplex.yaml"}

// load decodes, deep-validates and checks a bootstrap.
func load(doc []byte) (*bootstrapv3.Bootstrap, error) {
	b, err := envoy.DecodeBootstrap(doc)
	if err != nil {
		return nil, err
	}
	return b, envoy.CheckBootstrap(b, envoy.Defaults())
}

func TestBootstrapsAreValid(t *testing.T) {
	for _, name := range bootstraps {
		t.Run(name, func(t *testing.T) {
			if _, err := load([]byte(read(t, name))); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// extProc returns the ext_proc filter config of the first HCM in b.
func extProc(t *testing.T, b *bootstrapv3.Bootstrap) (*hcmv3.HttpConnectionManager, *extprocv3.ExternalProcessor) {
	t.Helper()
	hcm, err := envoy.Unpack[*hcmv3.HttpConnectionManager](
		b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range hcm.GetHttpFilters() {
		if f.GetName() == "envoy.filters.http.ext_proc" {
			ep, err := envoy.Unpack[*extprocv3.ExternalProcessor](f.GetTypedConfig())
			if err != nil {
				t.Fatal(err)
			}
			return hcm, ep
		}
	}
	t.Fatal("no ext_proc filter")
	return nil, nil
}

func TestBootstrapProcessingModes(t *testing.T) {
	for _, tc := range []struct {
		file    string
		body    extprocv3.ProcessingMode_BodySendMode
		trailer extprocv3.ProcessingMode_HeaderSendMode
	}{
		{"envoy.yaml", extprocv3.ProcessingMode_BUFFERED, extprocv3.ProcessingMode_SKIP},
		{"envoy-full-duplex.yaml", extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocv3.ProcessingMode_SEND},
	} {
		b, err := load([]byte(read(t, tc.file)))
		if err != nil {
			t.Fatal(err)
		}
		_, ep := extProc(t, b)
		pm := ep.GetProcessingMode()
		want := &extprocv3.ProcessingMode{
			RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
			RequestBodyMode:     tc.body,
			RequestTrailerMode:  tc.trailer,
			ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
			ResponseBodyMode:    extprocv3.ProcessingMode_STREAMED,
			ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
		}
		if diff := cmp.Diff(want, pm, protocmp.Transform()); diff != "" {
			t.Errorf("%s processing_mode (-want +got):\n%s", tc.file, diff)
		}
		if ep.GetFailureModeAllow() {
			t.Errorf("%s: failure_mode_allow is true", tc.file)
		}
		// The flags tollgate runs with must match (see the chart's values).
		if got := ep.GetMessageTimeout().AsDuration().String(); got != "1s" {
			t.Errorf("%s: message_timeout = %s; want 1s", tc.file, got)
		}
		if got := ep.GetMaxMessageTimeout().AsDuration().String(); got != "5m10s" {
			t.Errorf("%s: max_message_timeout = %s; want 310s", tc.file, got)
		}
	}
}

// TestFullDuplexDiffersOnlyInRequestMode keeps the two bootstraps from
// drifting apart: with the request body and trailer modes copied over,
// the full-duplex file must equal the buffered one.
func TestFullDuplexDiffersOnlyInRequestMode(t *testing.T) {
	buffered, err := load([]byte(read(t, "envoy.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	duplex, err := load([]byte(read(t, "envoy-full-duplex.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	hcm, ep := extProc(t, duplex)
	_, bep := extProc(t, buffered)
	ep.ProcessingMode.RequestBodyMode = bep.GetProcessingMode().GetRequestBodyMode()
	ep.ProcessingMode.RequestTrailerMode = bep.GetProcessingMode().GetRequestTrailerMode()
	for _, f := range hcm.GetHttpFilters() {
		if f.GetName() == "envoy.filters.http.ext_proc" {
			f.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, ep)}
		}
	}
	duplex.StaticResources.Listeners[0].FilterChains[0].Filters[0].ConfigType =
		&listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, hcm)}
	if diff := cmp.Diff(buffered, duplex, protocmp.Transform()); diff != "" {
		t.Errorf("envoy-full-duplex.yaml differs from envoy.yaml beyond the request modes (-buffered +duplex):\n%s", diff)
	}
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestBootstrapMutationsFail proves the validation can fail: each edit of
// a shipped bootstrap must be rejected with the named problem.
func TestBootstrapMutationsFail(t *testing.T) {
	for _, m := range []mutation{
		{"misspelled field", "failure_mode_allow: false", "failure_mode_alow: false", `unknown field "failure_mode_alow"`},
		{"misspelled field in Any", "max_message_timeout: 310s", "max_mesage_timeout: 310s", `unknown field "max_mesage_timeout"`},
		{"misspelled top-level field", "static_resources:", "static_resource:", `unknown field "static_resource"`},
		{"duplicate key", "stream_idle_timeout: 330s", "stream_idle_timeout: 330s\n          stream_idle_timeout: 331s", "already set"},
		{"bad enum", "request_body_mode: BUFFERED", "request_body_mode: BUFFERD", "invalid value for enum"},
		{"unregistered type", "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router", "type.googleapis.com/envoy.extensions.filters.http.nope.v3.Nope", "unable to resolve"},
		{"rule inside Any", "max_message_timeout: 310s", "max_message_timeout: 7200s", "MaxMessageTimeout: value must be inside range"},
		{"ORIGINAL_DST lb_policy", "lb_policy: CLUSTER_PROVIDED", "lb_policy: ROUND_ROBIN", "ORIGINAL_DST requires lb_policy CLUSTER_PROVIDED"},
		{"ORIGINAL_DST without use_http_header", "use_http_header: true", "use_http_header: false", "http_header_name requires use_http_header"},
		{"ORIGINAL_DST other header", "http_header_name: x-gateway-destination-endpoint", "http_header_name: x-other", "must take the host from header"},
		{"fail open", "failure_mode_allow: false", "failure_mode_allow: true", "failure_mode_allow must be false"},
		{"status_on_error", "status_on_error: {code: ServiceUnavailable}", "status_on_error: {code: InternalServerError}", "status_on_error is 500"},
		{"no envoy.lb", "untyped: [envoy.lb]", "untyped: [envoy.other]", "receiving_namespaces.untyped must list envoy.lb"},
		{"both services", "grpc_service:\n", "http_service: {http_service: {http_uri: {uri: \"http://x\", cluster: tollgate, timeout: 1s}}}\n              grpc_service:\n", "exactly one of grpc_service and http_service"},
		{"body mode", "request_body_mode: BUFFERED", "request_body_mode: STREAMED", "want BUFFERED or FULL_DUPLEX_STREAMED"},
		{"response body", "response_body_mode: STREAMED", "response_body_mode: NONE", "response_body_mode is NONE"},
		{"response headers", "response_header_mode: SEND", "response_header_mode: SKIP", "response_header_mode is SKIP"},
		{"trailers", "request_trailer_mode: SKIP", "request_trailer_mode: SEND", "request_trailer_mode is SEND; want SKIP"},
		{"message timers", "max_message_timeout: 310s", "max_message_timeout: 300s", "neither message_timeout nor max_message_timeout exceeds"},
		{"stream idle", "stream_idle_timeout: 330s", "stream_idle_timeout: 300s", "stream_idle_timeout is 5m0s"},
		{"stream idle default", "          stream_idle_timeout: 330s\n", "", "stream_idle_timeout is 5m0s (unset"},
		{"request timeout", "request_timeout: 330s", "request_timeout: 60s", "request_timeout is 1m0s"},
		{"route timeout", "timeout: 0s", "timeout: 15s", "route.timeout is 15s"},
		{"route retries", "timeout: 0s", "timeout: 0s\n                  retry_policy: {retry_on: 5xx}", "retry_policy allows retries"},
		{"route to ext_proc cluster", "cluster: original_destination_cluster", "cluster: tollgate", "want the ORIGINAL_DST cluster"},
		{"ext_proc cluster HTTP/1", "http2_protocol_options:\n            connection_keepalive: {interval: 30s, timeout: 5s}", "http_protocol_options: {}", "must use HTTP/2"},
		{"circuit breakers", "{max_connections: 40000, max_pending_requests: 40000, max_requests: 40000}", "{max_connections: 40000, max_pending_requests: 40000}", "max_requests is 0 (default 1024 when unset)"},
		{"buffer limit", "per_connection_buffer_limit_bytes: 8388608", "per_connection_buffer_limit_bytes: 1048576", "per_connection_buffer_limit_bytes is 1048576"},
		{"header strip", "- remove: x-gateway-destination-endpoint", "- remove: x-other", "do not remove x-gateway-destination-endpoint"},
		{"no source.address", "request_attributes: [source.address]", "request_attributes: [source.port]", "request_attributes must list source.address"},
		{"response headers not holdable", "send_body_without_waiting_for_header_response: true", "send_body_without_waiting_for_header_response: false", "send_body_without_waiting_for_header_response must be true"},
		{"body_format rewrites answers", "          http_filters:\n", "          local_reply_config: {body_format: {text_format: \"%RESPONSE_CODE%\"}}\n          http_filters:\n", "body_format must be unset"},
	} {
		t.Run(m.name, func(t *testing.T) {
			_, err := load(m.apply(t, read(t, "envoy.yaml")))
			wantError(t, err, m.wantErr)
		})
	}
}

func TestFullDuplexMutationsFail(t *testing.T) {
	for _, m := range []mutation{
		{"trailers", "request_trailer_mode: SEND", "request_trailer_mode: SKIP", "FULL_DUPLEX_STREAMED requires SEND"},
		{"no source.address", "request_attributes: [source.address]", "", "request_attributes must list source.address"},
		{"response headers not holdable", "              send_body_without_waiting_for_header_response: true\n", "", "send_body_without_waiting_for_header_response must be true"},
		{"fail open", "failure_mode_allow: false", "failure_mode_allow: true", "FULL_DUPLEX_STREAMED with failure_mode_allow true"},
		{"stream idle", "stream_idle_timeout: 330s", "stream_idle_timeout: 120s", "stream_idle_timeout is 2m0s"},
	} {
		t.Run(m.name, func(t *testing.T) {
			_, err := load(m.apply(t, read(t, "envoy-full-duplex.yaml")))
			wantError(t, err, m.wantErr)
		})
	}
}

// TestValidateDeepReachesAny shows why the deep walk exists: a rule broken
// inside a typed_config passes the bootstrap's own ValidateAll.
func TestValidateDeepReachesAny(t *testing.T) {
	doc := mutation{"", "max_message_timeout: 310s", "max_message_timeout: 7200s", ""}.apply(t, read(t, "envoy.yaml"))
	b := new(bootstrapv3.Bootstrap)
	if err := envoy.DecodeProto(doc, b); err != nil {
		t.Fatal(err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("Bootstrap.ValidateAll() = %v; want nil (it does not look inside Any)", err)
	}
	wantError(t, envoy.ValidateDeep(b), "value must be inside range [0s, 1h0m0s]")
}

// TestSourceAddressNeededOnlyWhenRead: a tollgate run with
// --client-ip-source x-forwarded-for does not read the attribute, so a
// configuration without it passes.
func TestSourceAddressNeededOnlyWhenRead(t *testing.T) {
	doc := mutation{"", "request_attributes: [source.address]", "request_attributes: []", ""}.apply(t, read(t, "envoy.yaml"))
	b, err := envoy.DecodeBootstrap(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := envoy.CheckBootstrap(b, envoy.Needs{LongestQueueWait: envoy.LongestQueueWait}); err != nil {
		t.Errorf("x-forwarded-for tollgate: %v", err)
	}
	wantError(t, envoy.CheckBootstrap(b, envoy.Defaults()), "request_attributes must list source.address")
}
