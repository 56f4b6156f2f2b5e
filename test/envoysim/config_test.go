package envoysim

import (
	"strings"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
)

func TestConfig_Defaults(t *testing.T) {
	c := Config{ExtProcAddr: "127.0.0.1:9002"}
	s, err := c.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if s.messageTimeout != 200*time.Millisecond || s.maxMessageTimeout != 0 || s.statusOnError != 500 ||
		s.closeStyle != CloseReset || s.remoteClose != time.Second || s.routeHeader != DefaultDestinationHeader ||
		len(s.receiving) != 1 || s.receiving[0] != "envoy.lb" {
		t.Errorf("defaults %+v", s)
	}
	// Envoy's default processing mode: headers both ways, no bodies or
	// trailers.
	if !s.responseHeaderSend || s.requestBodyMode != bodyNone || s.responseBodyMode != bodyNone ||
		s.requestTrailerSend || s.responseTrailerSend {
		t.Errorf("default mode %+v", s)
	}
}

func TestConfig_Invalid(t *testing.T) {
	fd := mode(bodyFullDuplex, false, bodyNone)
	skipReq := mode(bodyNone, false, bodyNone)
	skipReq.RequestHeaderMode = extprocfilterv3.ProcessingMode_SKIP
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no address", Config{}, "ExtProcAddr is required"},
		{"negative timeout", Config{ExtProcAddr: "a", MessageTimeout: -1}, "MessageTimeout"},
		{"timeout over an hour", Config{ExtProcAddr: "a", MessageTimeout: 2 * time.Hour}, "MessageTimeout 2h0m0s is outside"},
		{"max over an hour", Config{ExtProcAddr: "a", MaxMessageTimeout: 2 * time.Hour}, "MaxMessageTimeout"},
		{"bad status", Config{ExtProcAddr: "a", StatusOnError: 42}, "StatusOnError 42"},
		{"unknown attribute", Config{ExtProcAddr: "a", RequestAttributes: []string{"connection.mtls"}}, `"connection.mtls" is not modelled`},
		{"full duplex without trailers", Config{ExtProcAddr: "a", Mode: fd}, "requires request_trailer_mode SEND"},
		{"full duplex with failure mode allow", Config{ExtProcAddr: "a", Mode: fd, FailureModeAllow: true}, "with failure_mode_allow is not modelled"},
		{"request headers skipped", Config{ExtProcAddr: "a", Mode: skipReq}, "request_header_mode SKIP is not modelled"},
		{"buffered partial", Config{ExtProcAddr: "a", Mode: mode(extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL, false, bodyNone)}, "BUFFERED_PARTIAL is not modelled"},
		{"full duplex response", Config{ExtProcAddr: "a", Mode: mode(bodyNone, false, bodyFullDuplex)}, "response_body_mode FULL_DUPLEX_STREAMED is not modelled"},
		{"negative chunk", Config{ExtProcAddr: "a", RequestChunkSize: -1}, "RequestChunkSize"},
		{"negative header limit", Config{ExtProcAddr: "a", MaxHeadersCount: -1}, "MaxHeadersCount is negative"},
		{"unroutable", Config{ExtProcAddr: "a", Route: Route{IgnoreHeader: true}}, "no request can be routed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// Every problem is reported at once.
func TestConfig_AllProblems(t *testing.T) {
	_, err := New(Config{MessageTimeout: -1, StatusOnError: 1})
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{"ExtProcAddr", "MessageTimeout", "StatusOnError"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestRequest_Invalid(t *testing.T) {
	sim := newSim(t, headersOnly(), serveAll(nil, ""))
	for name, req := range map[string]Request{
		"relative path":       {Path: "v1/models"},
		"bad method":          {Method: "GE T"},
		"trailers no body":    {Trailer: map[string][]string{"X-A": {"1"}}},
		"bad header value":    {Header: map[string][]string{"X-A": {"a\nb"}}},
		"pseudo header":       {Header: map[string][]string{":path": {"/"}}},
		"unknown close style": {Close: CloseStyle(9)},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := sim.Do(t.Context(), req); err == nil {
				t.Error("Do accepted an invalid request")
			}
		})
	}
}
