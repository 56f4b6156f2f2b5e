package envoysim

import (
	"net"
	"net/http"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The header routes to a literal IP:port; anything else has no host (503).
func TestRouting_Header(t *testing.T) {
	addr, seen := recordingBackend(t)
	tests := []struct {
		name, value string
		want        int
		invalid     uint64
	}{
		{"literal ip:port", addr, http.StatusOK, 0},
		{"hostname", "localhost:" + portOf(t, addr), http.StatusServiceUnavailable, 1},
		{"list", addr + "," + addr, http.StatusServiceUnavailable, 1},
		{"no port", "127.0.0.1", http.StatusServiceUnavailable, 1},
		{"missing", "", http.StatusServiceUnavailable, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reply := headersReply()
			if tt.value != "" {
				reply = headersReply(setHeader(DefaultDestinationHeader, tt.value))
			}
			sim := newSim(t, headersOnly(), replyOnce(reply))
			resp, err := sim.Do(t.Context(), Request{})
			wantStatus(t, resp, err, tt.want)
			st := sim.Stats()
			if st.OriginalDstHostInvalid != tt.invalid {
				t.Errorf("original_dst_host_invalid = %d, want %d", st.OriginalDstHostInvalid, tt.invalid)
			}
			if tt.want == http.StatusOK {
				if resp.Endpoint != addr || string(resp.Body) != "upstream-ok" || resp.Upstream == nil {
					t.Errorf("endpoint %q body %q", resp.Endpoint, resp.Body)
				}
				return
			}
			if string(resp.Body) != "no healthy upstream" || resp.Details != "no_healthy_upstream" || st.NoHealthyUpstream != 1 {
				t.Errorf("body %q details %q stats %+v", resp.Body, resp.Details, st)
			}
		})
	}
	if n := len(seen()); n != 1 {
		t.Errorf("upstream got %d requests, want 1", n)
	}
}

// Only the first value of the header counts.
func TestRouting_FirstHeaderValue(t *testing.T) {
	addr, _ := recordingBackend(t)
	sim := newSim(t, headersOnly(), replyOnce(headersReply()))
	resp, err := sim.Do(t.Context(), Request{Header: http.Header{DefaultDestinationHeader: {addr, "bogus"}}})
	wantStatus(t, resp, err, http.StatusOK)
}

// With a metadata key the envoy.lb metadata routes first; a list uses its
// first element; the header is the fallback.
func TestRouting_Metadata(t *testing.T) {
	addr, _ := recordingBackend(t)
	withMetadata := func(v any) *extprocv3.ProcessingResponse {
		md, err := structpb.NewStruct(map[string]any{"envoy.lb": map[string]any{DefaultDestinationHeader: v}})
		if err != nil {
			t.Fatal(err)
		}
		r := headersReply()
		r.DynamicMetadata = md
		return r
	}
	tests := []struct {
		name   string
		reply  *extprocv3.ProcessingResponse
		header string
		ignore bool
		want   int
	}{
		{"metadata string", withMetadata(addr), "", true, http.StatusOK},
		{"metadata list", withMetadata([]any{addr, "10.0.0.1:1"}), "", true, http.StatusOK},
		{"metadata wins over header", withMetadata(addr), "10.255.255.1:1", false, http.StatusOK},
		{"invalid metadata falls back to header", withMetadata("worker-1:8000"), addr, false, http.StatusOK},
		{"header ignored", headersReply(), addr, true, http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := headersOnly()
			cfg.Route = Route{MetadataKey: DefaultDestinationHeader, IgnoreHeader: tt.ignore}
			sim := newSim(t, cfg, replyOnce(tt.reply))
			req := Request{}
			if tt.header != "" {
				req.Header = http.Header{DefaultDestinationHeader: {tt.header}}
			}
			resp, err := sim.Do(t.Context(), req)
			wantStatus(t, resp, err, tt.want)
		})
	}
}

// An endpoint that refuses connections gives Envoy's 503 before headers.
func TestRouting_ConnectFailure(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	_ = l.Close()
	sim := newSim(t, headersOnly(), replyOnce(headersReply(setHeader(DefaultDestinationHeader, dead))))
	resp, err := sim.Do(t.Context(), Request{})
	wantStatus(t, resp, err, http.StatusServiceUnavailable)
	if resp.Details != "upstream_reset_before_response_started{connection_failure}" ||
		!strings.HasPrefix(string(resp.Body), "upstream connect error") {
		t.Errorf("details %q body %q", resp.Details, resp.Body)
	}
}

// The forwarded request carries the mutated headers and body; the response
// reports the endpoint and timings.
func TestRouting_ForwardedRequestAndTimings(t *testing.T) {
	addr, seen := recordingBackend(t)
	sim := newSim(t, headersOnly(), replyOnce(headersReply(setHeader(DefaultDestinationHeader, addr), setHeader("x-worker", "w1"))))
	resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Path: "/v1/completions?stream=false",
		Host: "api.example", Body: []byte(`{"prompt":"hi"}`)})
	wantStatus(t, resp, err, http.StatusOK)
	got := seen()[0]
	if got.Method != http.MethodPost || got.Path != "/v1/completions?stream=false" || got.Host != "api.example" ||
		got.Body != `{"prompt":"hi"}` || got.Header.Get("X-Worker") != "w1" || got.Header.Get("X-Forwarded-Proto") != "http" ||
		got.Header.Get(DefaultDestinationHeader) != addr {
		t.Errorf("upstream saw %+v", got)
	}
	if resp.Upstream.Header.Get("X-Worker") != "w1" || string(resp.Upstream.Body) != `{"prompt":"hi"}` {
		t.Errorf("Response.Upstream %+v", resp.Upstream)
	}
	tm := resp.Timings
	if tm.Decision <= 0 || tm.ResponseHeaders < tm.Decision || tm.FirstByte < tm.ResponseHeaders || tm.Total < tm.FirstByte {
		t.Errorf("timings out of order: %+v", tm)
	}
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
