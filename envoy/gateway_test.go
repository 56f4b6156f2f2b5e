package envoy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/envoy"
)

// gatewayFiles returns the Envoy Gateway policy files, name to contents.
func gatewayFiles(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join("envoy-gateway", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 3 {
		t.Fatalf("found %d files in envoy-gateway/; want 3", len(names))
	}
	files := map[string]string{}
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.ToSlash(n)] = string(data)
	}
	return files
}

// loadGateway decodes and checks the policies in files.
func loadGateway(files map[string]string) (*envoy.GatewayPolicies, error) {
	g := new(envoy.GatewayPolicies)
	for _, data := range files {
		docs, err := envoy.SplitYAML([]byte(data))
		if err != nil {
			return nil, err
		}
		for _, doc := range docs {
			if err := g.Decode(doc); err != nil {
				return nil, err
			}
		}
	}
	return g, g.CheckGateway(envoy.Defaults())
}

func TestGatewayPoliciesAreValid(t *testing.T) {
	g, err := loadGateway(gatewayFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	// Envoy Gateway has no max_message_timeout: its messageTimeout must be
	// the bootstrap's max_message_timeout, the budget tollgate plans with.
	b, err := load([]byte(read(t, "envoy.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	_, ep := extProc(t, b)
	got, err := time.ParseDuration(string(*g.Extension[0].Spec.ExtProc[0].MessageTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if want := ep.GetMaxMessageTimeout().AsDuration(); got != want {
		t.Errorf("messageTimeout = %v; want the bootstrap's max_message_timeout %v", got, want)
	}
}

func TestGatewayMutationsFail(t *testing.T) {
	const (
		eep = "envoy-gateway/envoyextensionpolicy.yaml"
		btp = "envoy-gateway/backendtrafficpolicy.yaml"
		ctp = "envoy-gateway/clienttrafficpolicy.yaml"
	)
	for _, tc := range []struct {
		file string
		mutation
	}{
		{eep, mutation{"misspelled field", "messageTimeout: 310s", "messageTimout: 310s", `unknown field "messageTimout"`}},
		{eep, mutation{"misspelled metadata field", "namespace: default", "namepsace: default", `unknown field "namepsace"`}},
		{eep, mutation{"duplicate key", "failOpen: false", "failOpen: false\n    failOpen: true", "already set"}},
		{eep, mutation{"wrong type", "port: 9002", "port: grpc", "cannot unmarshal string"}},
		{eep, mutation{"api version", "gateway.envoyproxy.io/v1alpha1", "gateway.envoyproxy.io/v1", "want gateway.envoyproxy.io/v1alpha1"}},
		{eep, mutation{"fail open", "failOpen: false", "failOpen: true", "failOpen must be false"}},
		{eep, mutation{"short timeout", "messageTimeout: 310s", "messageTimeout: 200ms", "messageTimeout is 200ms"}},
		{eep, mutation{"bad duration", "messageTimeout: 310s", "messageTimeout: 5 minutes", "not a Gateway API duration"}},
		{eep, mutation{"request body", "body: Buffered", "body: Streamed", "processingMode.request.body must be Buffered or FullDuplexStreamed"}},
		{eep, mutation{"response body", "body: Streamed", "body: Buffered", "processingMode.response.body must be Streamed"}},
		{eep, mutation{"namespace", "- envoy.lb", "- envoy.filters.http.ext_proc", "metadata.writableNamespaces must list envoy.lb"}},
		{eep, mutation{"no source.address", "attributes: [source.address]", "attributes: [source.port]", "processingMode.request.attributes must list source.address"}},
		{eep, mutation{"status on error", "statusOnError: 503", "statusOnError: 500", "statusOnError must be 503"}},
		{eep, mutation{"circuit breaker", "maxParallelRequests: 40000", "maxParallelRequests: 1024", "circuitBreaker.maxParallelRequests is below"}},
		{btp, mutation{"header", "header: x-gateway-destination-endpoint", "header: x-other", "must read header x-gateway-destination-endpoint"}},
		{btp, mutation{"route timeout", "requestTimeout: 0s", "requestTimeout: 60s", "timeout.http.requestTimeout is 1m0s"}},
		{btp, mutation{"other route", "name: llm", "name: other", "which no EnvoyExtensionPolicy sends through tollgate"}},
		{ctp, mutation{"buffer", "bufferLimit: 8Mi", "bufferLimit: 32Ki", "connection.bufferLimit is 32Ki"}},
		{ctp, mutation{"stream idle", "      streamIdleTimeout: 330s\n", "", "timeout.http.streamIdleTimeout is 5m0s (unset"}},
		{ctp, mutation{"request received", "requestReceivedTimeout: 330s", "requestReceivedTimeout: 30s", "timeout.http.requestReceivedTimeout is 30s"}},
	} {
		t.Run(strings.TrimSuffix(filepath.Base(tc.file), ".yaml")+"/"+tc.name, func(t *testing.T) {
			files := gatewayFiles(t)
			files[tc.file] = string(tc.apply(t, files[tc.file]))
			_, err := loadGateway(files)
			wantError(t, err, tc.wantErr)
		})
	}
}
