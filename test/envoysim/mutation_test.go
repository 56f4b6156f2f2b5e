package envoysim

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// replyOnce answers the request headers with reply and waits for the end.
func replyOnce(reply *extprocv3.ProcessingResponse) processFunc {
	return func(s stream) error {
		if _, err := s.Recv(); err != nil {
			return err
		}
		if err := s.Send(reply); err != nil {
			return err
		}
		_, err := s.Recv()
		return err
	}
}

// mutate is a request_headers reply with an arbitrary mutation plus routing.
func mutate(route string, mut *extprocv3.HeaderMutation) *extprocv3.ProcessingResponse {
	mut.SetHeaders = append(mut.SetHeaders, setHeader(DefaultDestinationHeader, route))
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: mut}}}}
}

func TestMutation_RawValueOnly(t *testing.T) {
	addr, seen := recordingBackend(t)
	sim := newSim(t, headersOnly(), replyOnce(mutate(addr, &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
		{Header: &corev3.HeaderValue{Key: "x-raw", RawValue: []byte("raw")}},
		{Header: &corev3.HeaderValue{Key: "x-value-only", Value: "lost"}},
		{Header: &corev3.HeaderValue{Key: "x-bytes", RawValue: []byte{0xff, 0xfe}}},
	}})))
	resp, err := sim.Do(t.Context(), Request{})
	wantStatus(t, resp, err, http.StatusOK)
	h := seen()[0].Header
	if got := h.Get("X-Raw"); got != "raw" {
		t.Errorf("x-raw = %q, want raw", got)
	}
	if got, ok := h["X-Value-Only"]; !ok || len(got) != 1 || got[0] != "" {
		t.Errorf("x-value-only = %q (present %v), want an empty value", got, ok)
	}
	if got := h.Get("X-Bytes"); got != "\xff\xfe" {
		t.Errorf("x-bytes = %q, want the raw non-UTF-8 bytes", got)
	}
}

// Since Envoy 1.32 only raw_value is read (mutation_utils.cc:204): value
// next to it is ignored, not an error (it was one in 1.28 to 1.31).
func TestMutation_ValueAndRawValue_ValueIgnored(t *testing.T) {
	addr, seen := recordingBackend(t)
	sim := newSim(t, headersOnly(), replyOnce(mutate(addr, &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
		{Header: &corev3.HeaderValue{Key: "x-both", Value: "from-value", RawValue: []byte("from-raw")}},
	}})))
	resp, err := sim.Do(t.Context(), Request{})
	wantStatus(t, resp, err, http.StatusOK)
	if got := seen()[0].Header.Get("X-Both"); got != "from-raw" || sim.Stats().RejectedHeaderMutations != 0 {
		t.Errorf("x-both = %q stats %+v, want from-raw and no rejection", got, sim.Stats())
	}
}

func TestMutation_InvalidCharacters_500(t *testing.T) {
	for name, mut := range map[string]*extprocv3.HeaderMutation{
		"bad value":  {SetHeaders: []*corev3.HeaderValueOption{setHeader("x-a", "line\r\nbreak")}},
		"bad name":   {SetHeaders: []*corev3.HeaderValueOption{setHeader("x a", "v")}},
		"bad remove": {RemoveHeaders: []string{"x\x00"}},
	} {
		t.Run(name, func(t *testing.T) {
			sim := newSim(t, headersOnly(), replyOnce(mutate("127.0.0.1:1", mut)))
			resp, err := sim.Do(t.Context(), Request{})
			wantStatus(t, resp, err, http.StatusInternalServerError)
		})
	}
}

// The deprecated append BoolValue decides: unset or false overwrites, true
// adds. append_action is ignored.
func TestMutation_AppendSemantics(t *testing.T) {
	tests := []struct {
		name string
		opt  *corev3.HeaderValueOption
		want []string
	}{
		{"unset overwrites", &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-tier", RawValue: []byte("server")}}, []string{"server"}},
		{"false overwrites", setHeader("x-tier", "server"), []string{"server"}},
		{"true adds", &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-tier", RawValue: []byte("server")},
			Append: wrapperspb.Bool(true)}, //nolint:staticcheck // the deprecated flag is the one ext_proc honours
			[]string{"client", "server"}},
		{"append_action ignored", &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-tier", RawValue: []byte("server")},
			AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD}, []string{"server"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, seen := recordingBackend(t)
			sim := newSim(t, headersOnly(), replyOnce(mutate(addr, &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{tt.opt}})))
			resp, err := sim.Do(t.Context(), Request{Header: http.Header{"X-Tier": {"client"}}})
			wantStatus(t, resp, err, http.StatusOK)
			if got := seen()[0].Header.Values("X-Tier"); !slices.Equal(got, tt.want) {
				t.Errorf("x-tier = %q, want %q", got, tt.want)
			}
		})
	}
}

// A client-sent routing header is overwritten by the server's (append false).
func TestMutation_RoutingHeaderOverwritten(t *testing.T) {
	addr, _ := recordingBackend(t)
	sim := newSim(t, headersOnly(), replyOnce(mutate(addr, &extprocv3.HeaderMutation{})))
	resp, err := sim.Do(t.Context(), Request{Header: http.Header{DefaultDestinationHeader: {"10.9.9.9:1"}}})
	wantStatus(t, resp, err, http.StatusOK)
	if resp.Endpoint != addr {
		t.Errorf("endpoint %q, want the server's %q", resp.Endpoint, addr)
	}
}

// GetAndSetHeaders / GetAndSetPathHeader: x-envoy-*, :authority, host,
// :scheme and :method are silently ignored and counted; :path changes.
// Pseudo-headers and host cannot be removed.
func TestMutation_DisallowedIgnored(t *testing.T) {
	addr, seen := recordingBackend(t)
	sim := newSim(t, headersOnly(), replyOnce(mutate(addr, &extprocv3.HeaderMutation{
		SetHeaders: []*corev3.HeaderValueOption{
			setHeader("x-envoy-original-dst-host", "10.0.0.1:80"),
			setHeader(":authority", "evil.example"),
			setHeader("host", "evil.example"),
			setHeader(":scheme", "https"),
			setHeader(":method", "DELETE"),
			setHeader(":path", "/rewritten"),
		},
		RemoveHeaders: []string{":path", "host", "x-envoy-custom", "x-remove-me"},
	})))
	resp, err := sim.Do(t.Context(), Request{Path: "/orig", Host: "gw.local",
		Header: http.Header{"X-Remove-Me": {"1"}, "X-Envoy-Custom": {"true"}}})
	wantStatus(t, resp, err, http.StatusOK)
	got := seen()[0]
	if got.Path != "/rewritten" || got.Host != "gw.local" || got.Method != http.MethodGet {
		t.Errorf("upstream saw %s %s host %s, want GET /rewritten host gw.local", got.Method, got.Path, got.Host)
	}
	if got.Header.Get("X-Envoy-Original-Dst-Host") != "" || got.Header.Get("X-Remove-Me") != "" ||
		got.Header.Get("X-Envoy-Custom") != "true" {
		t.Errorf("upstream headers %v", got.Header)
	}
	// Five refused sets and three refused removes.
	if n := sim.Stats().RejectedHeaderMutations; n != 8 {
		t.Errorf("rejected_header_mutations = %d, want 8", n)
	}
}

func TestMutation_CountLimit_500(t *testing.T) {
	cfg := headersOnly()
	cfg.MaxHeadersCount = 5
	var set []*corev3.HeaderValueOption
	for i := range 6 {
		set = append(set, setHeader(fmt.Sprintf("x-h%d", i), "v"))
	}
	sim := newSim(t, cfg, replyOnce(headersReply(set...)))
	resp, err := sim.Do(t.Context(), Request{})
	wantStatus(t, resp, err, http.StatusInternalServerError)
}

func TestMutation_ResultSizeLimit_500(t *testing.T) {
	cfg := headersOnly()
	cfg.MaxHeadersKB = 1
	sim := newSim(t, cfg, replyOnce(headersReply(setHeader("x-big", fmt.Sprintf("%02048d", 0)))))
	resp, err := sim.Do(t.Context(), Request{})
	wantStatus(t, resp, err, http.StatusInternalServerError)
}

// clear_route_cache without a header mutation in the same reply is ignored
// and counted; with one it is honoured.
func TestClearRouteCache_NeedsMutation(t *testing.T) {
	addr, _ := recordingBackend(t)
	without := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{ClearRouteCache: true}}}}
	with := mutate(addr, &extprocv3.HeaderMutation{})
	with.GetRequestHeaders().Response.ClearRouteCache = true
	for name, tc := range map[string]struct {
		reply   *extprocv3.ProcessingResponse
		ignored uint64
	}{
		"without mutation": {without, 1},
		"with mutation":    {with, 0},
	} {
		t.Run(name, func(t *testing.T) {
			sim := newSim(t, headersOnly(), replyOnce(tc.reply))
			resp, err := sim.Do(t.Context(), Request{Header: http.Header{DefaultDestinationHeader: {addr}}})
			wantStatus(t, resp, err, http.StatusOK)
			if n := sim.Stats().ClearRouteCacheIgnored; n != tc.ignored {
				t.Errorf("clear_route_cache_ignored = %d, want %d", n, tc.ignored)
			}
		})
	}
}

// Dynamic metadata is kept only for receiving namespaces.
func TestMetadata_ReceivingNamespaces(t *testing.T) {
	md, err := structpb.NewStruct(map[string]any{
		"envoy.lb":  map[string]any{DefaultDestinationHeader: "10.0.0.7:8000"},
		"other.ns":  map[string]any{"k": "v"},
		"custom.ns": map[string]any{"k": "v"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		receiving []string
		want      []string
	}{
		{"default is envoy.lb", nil, []string{"envoy.lb"}},
		{"configured", []string{"custom.ns"}, []string{"custom.ns"}},
		{"none", []string{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, _ := recordingBackend(t)
			reply := mutate(addr, &extprocv3.HeaderMutation{})
			reply.DynamicMetadata = md
			cfg := headersOnly()
			cfg.ReceivingNamespaces = tt.receiving
			sim := newSim(t, cfg, replyOnce(reply))
			resp, err := sim.Do(t.Context(), Request{})
			wantStatus(t, resp, err, http.StatusOK)
			var got []string
			for ns := range resp.Metadata {
				got = append(got, ns)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("namespaces %q, want %q", got, tt.want)
			}
		})
	}
}

// GetAndRespondImmediately: the client gets the server's status, headers and
// body; x-envoy-* headers in it are still refused; the stream ends.
func TestImmediateResponse(t *testing.T) {
	ended := make(chan string, 1)
	sim := newSim(t, headersOnly(), func(s stream) error {
		_, _ = s.Recv()
		_ = s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
			ImmediateResponse: &extprocv3.ImmediateResponse{
				Status: &typev3.HttpStatus{Code: typev3.StatusCode_Unauthorized},
				Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
					setHeader("content-type", "application/json"),
					setHeader("x-smg-error-code", "unauthorized"),
					setHeader("x-envoy-ratelimited", "true"),
				}},
				Body:    []byte(`{"error":"no"}`),
				Details: "denied by policy",
			}}})
		_, err := s.Recv()
		ended <- endOf(s, err)
		return nil
	})
	resp, err := sim.Do(t.Context(), Request{})
	wantStatus(t, resp, err, http.StatusUnauthorized)
	if string(resp.Body) != `{"error":"no"}` || resp.Header.Get("Content-Type") != "application/json" ||
		resp.Header.Get("X-Smg-Error-Code") != "unauthorized" || resp.Header.Get("X-Envoy-Ratelimited") != "" {
		t.Errorf("got headers %v body %q", resp.Header, resp.Body)
	}
	if resp.Details != "denied_by_policy" || !resp.LocalReply || resp.Endpoint != "" {
		t.Errorf("details %q local %v endpoint %q", resp.Details, resp.LocalReply, resp.Endpoint)
	}
	if got := waitFor(t, ended, "server stream end"); got != "cancelled" {
		t.Errorf("server saw %s, want the stream closed", got)
	}
}

// A missing or below-200 status becomes 200.
func TestImmediateResponse_DefaultStatus(t *testing.T) {
	for name, st := range map[string]*typev3.HttpStatus{
		"missing":   nil,
		"below 200": {Code: typev3.StatusCode_Continue},
	} {
		t.Run(name, func(t *testing.T) {
			sim := newSim(t, headersOnly(), replyOnce(&extprocv3.ProcessingResponse{
				Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{Status: st}}}))
			resp, err := sim.Do(t.Context(), Request{})
			wantStatus(t, resp, err, http.StatusOK)
		})
	}
}
