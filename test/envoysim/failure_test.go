package envoysim

import (
	"net/http"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// GetAndCloseStream: a server that returns OK before answering lets the
// request through unmodified. Here the client's own routing header survives,
// which is why a routing server must fail closed.
func TestGetAndCloseStream_PassesThroughUnmodified(t *testing.T) {
	addr, seen := recordingBackend(t)
	sim := newSim(t, headersOnly(), func(s stream) error {
		_, _ = s.Recv()
		return nil
	})
	resp, err := sim.Do(t.Context(), Request{
		Path:   "/v1/models",
		Header: http.Header{"X-Gateway-Destination-Endpoint": {addr}, "X-Client": {"a"}},
	})
	wantStatus(t, resp, err, http.StatusOK)
	if string(resp.Body) != "upstream-ok" || resp.LocalReply {
		t.Errorf("body %q local %v, want the upstream's answer", resp.Body, resp.LocalReply)
	}
	got := seen()
	if len(got) != 1 || got[0].Header.Get("X-Client") != "a" || got[0].Path != "/v1/models" {
		t.Errorf("upstream saw %+v, want the unmodified request", got)
	}
	if st := sim.Stats(); st.StreamsClosed != 1 || st.StreamsFailed != 0 {
		t.Errorf("stats %+v, want one clean close", st)
	}
}

// GetAndFailStream: a gRPC error gives status_on_error (500 by default).
func TestGetAndFailStream_StatusOnError(t *testing.T) {
	tests := []struct {
		name          string
		statusOnError int
		want          int
	}{
		{"default is 500", 0, 500},
		{"configured 503", 503, 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := headersOnly()
			cfg.StatusOnError = tt.statusOnError
			sim := newSim(t, cfg, func(s stream) error {
				_, _ = s.Recv()
				return status.Error(codes.Unavailable, "queue is gone")
			})
			resp, err := sim.Do(t.Context(), Request{})
			wantStatus(t, resp, err, tt.want)
			if want := "ext_proc_error_gRPC_error_14{queue_is_gone}"; resp.Details != want {
				t.Errorf("details %q, want %q", resp.Details, want)
			}
			if !resp.LocalReply || sim.Stats().StreamsFailed != 1 {
				t.Errorf("local %v stats %+v, want a local reply and a failed stream", resp.LocalReply, sim.Stats())
			}
		})
	}
}

// A gRPC error while the response is being processed also gives
// status_on_error, as long as the response has not started.
func TestGetAndFailStream_OnResponse(t *testing.T) {
	addr, _ := recordingBackend(t)
	sim := newSim(t, Config{Mode: mode(bodyNone, true, bodyNone)}, func(s stream) error {
		m, _ := s.Recv()
		if err := s.Send(continueFor(m, addr)); err != nil {
			return err
		}
		_, _ = s.Recv() // response_headers
		return status.Error(codes.Internal, "boom")
	})
	resp, err := sim.Do(t.Context(), Request{})
	wantStatus(t, resp, err, http.StatusInternalServerError)
	if resp.Endpoint != addr {
		t.Errorf("endpoint %q, want %q: the request was forwarded before the failure", resp.Endpoint, addr)
	}
}

// The stream cannot be opened: a status_on_error local reply.
func TestUnreachableServer_StatusOnError(t *testing.T) {
	sim, err := New(Config{ExtProcAddr: "127.0.0.1:1", Mode: mode(bodyNone, false, bodyNone)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sim.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	resp, err := sim.Do(t.Context(), Request{})
	wantStatus(t, resp, err, http.StatusInternalServerError)
	if !strings.HasPrefix(resp.Details, "ext_proc_error_gRPC_error_14") {
		t.Errorf("details %q, want an Unavailable gRPC error", resp.Details)
	}
}

// Every kind of spurious message fails closed with status_on_error.
func TestSpuriousMessage_FailsClosed(t *testing.T) {
	empty := &extprocv3.ProcessingResponse{}
	metadataOnly := &extprocv3.ProcessingResponse{DynamicMetadata: &structpb.Struct{}}
	wrongOneof := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{}}}
	tests := []struct {
		name    string
		reply   *extprocv3.ProcessingResponse
		details string
	}{
		{"no oneof", empty, "unhandled_message"},
		{"metadata only", metadataOnly, "unhandled_message"},
		{"wrong oneof", wrongOneof, "spurious_message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim := newSim(t, headersOnly(), func(s stream) error {
				_, _ = s.Recv()
				_ = s.Send(tt.reply)
				_, err := s.Recv()
				return err
			})
			resp, err := sim.Do(t.Context(), Request{})
			wantStatus(t, resp, err, http.StatusInternalServerError)
			if resp.Details != tt.details || sim.Stats().SpuriousMsgsReceived != 1 {
				t.Errorf("details %q stats %+v, want %q and one spurious message", resp.Details, sim.Stats(), tt.details)
			}
		})
	}
}

// A reply when nothing is outstanding is spurious too, even while the request
// is already on its way upstream.
func TestSpuriousMessage_NothingOutstanding(t *testing.T) {
	release := make(chan struct{})
	addr := backend(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	sim := newSim(t, Config{Mode: mode(bodyNone, true, bodyNone)}, func(s stream) error {
		m, _ := s.Recv()
		_ = s.Send(continueFor(m, addr))
		_ = s.Send(continueFor(m, addr)) // a second answer to the same message
		_, err := s.Recv()
		return err
	})
	resp, err := sim.Do(t.Context(), Request{})
	wantStatus(t, resp, err, http.StatusInternalServerError)
	if resp.Details != "spurious_message" {
		t.Errorf("details %q, want spurious_message", resp.Details)
	}
}

// ResponseFromExtProcServerTooLarge: a reply above the receive limit is a
// gRPC error.
func TestOversizedReply_StatusOnError(t *testing.T) {
	cfg := headersOnly()
	cfg.MaxReceiveMessageBytes = 1024
	sim := newSim(t, cfg, func(s stream) error {
		_, _ = s.Recv()
		_ = s.Send(headersReply(setHeader("x-big", strings.Repeat("a", 4096))))
		_, err := s.Recv()
		return err
	})
	resp, err := sim.Do(t.Context(), Request{})
	wantStatus(t, resp, err, http.StatusInternalServerError)
	if !strings.HasPrefix(resp.Details, "ext_proc_error_gRPC_error_8") {
		t.Errorf("details %q, want ResourceExhausted", resp.Details)
	}
}

// With failure_mode_allow a gRPC error or a spurious message lets the request
// continue unmodified.
func TestFailureModeAllow_ContinuesUnmodified(t *testing.T) {
	addr, _ := recordingBackend(t)
	cases := map[string]processFunc{
		"grpc error": func(s stream) error {
			_, _ = s.Recv()
			return status.Error(codes.Internal, "boom")
		},
		"spurious": func(s stream) error {
			_, _ = s.Recv()
			_ = s.Send(&extprocv3.ProcessingResponse{})
			_, err := s.Recv()
			return err
		},
	}
	for name, process := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := headersOnly()
			cfg.FailureModeAllow = true
			sim := newSim(t, cfg, process)
			resp, err := sim.Do(t.Context(), Request{Header: http.Header{DefaultDestinationHeader: {addr}}})
			wantStatus(t, resp, err, http.StatusOK)
			if sim.Stats().FailureModeAllowed != 1 {
				t.Errorf("stats %+v, want failure_mode_allowed 1", sim.Stats())
			}
		})
	}
}
