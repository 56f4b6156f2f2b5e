package envoysim

import (
	"net/http"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// With send_body_without_waiting_for_header_response, a STREAMED request
// body goes to the server behind the outstanding headers
// (ext_proc.cc:1085-1094): the server can read the whole body, then answer
// the headers and each chunk in order.
func TestEarlyBody_RequestChunksBehindHeldHeaders(t *testing.T) {
	addr, seen := recordingBackend(t)
	rec := &recorder{}
	cfg := Config{Mode: mode(bodyStreamed, false, bodyNone), SendBodyWithoutWaitingForHeaderResponse: true, RequestChunkSize: 4}
	sim := newSim(t, cfg, func(s stream) error {
		var n int
		for {
			m, err := s.Recv()
			if err != nil {
				return nil
			}
			rec.add(m)
			if m.GetRequestBody() == nil {
				continue
			}
			n++
			if !m.GetRequestBody().GetEndOfStream() {
				continue
			}
			// Only now answer: the headers (with the route), then each chunk.
			_ = s.Send(headersReply(setHeader(DefaultDestinationHeader, addr)))
			for range n {
				_ = s.Send(continueFor(m, ""))
			}
		}
	})
	resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte("0123456789")})
	wantStatus(t, resp, err, http.StatusOK)
	want := []string{"request_headers", `request_body("0123")`, `request_body("4567")`, `request_body("89")+eos`}
	if got := rec.shapes(); !slices.Equal(got, want) {
		t.Errorf("server saw %q, want %q", got, want)
	}
	if !rec.all()[0].GetProtocolConfig().GetSendBodyWithoutWaitingForHeaderResponse() {
		t.Error("protocol_config does not carry the flag")
	}
	if got := seen()[0].Body; got != "0123456789" {
		t.Errorf("upstream body %q", got)
	}
}

// With the flag, response chunks reach the server while it holds the
// response headers; an ImmediateResponse then goes straight to the client,
// which sees its status, headers and body (ext_proc.cc:1876-1899,
// filter_manager.cc:541-547; Envoy's IT GetAndRespondImmediatelyOnResponse).
func TestEarlyBody_ImmediateResponseWithResponseHeadersHeld(t *testing.T) {
	addr := backend(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		_, _ = w.Write([]byte("data: first\n\n"))
	})
	rec := &recorder{}
	cfg := Config{Mode: mode(bodyNone, true, bodyStreamed), SendBodyWithoutWaitingForHeaderResponse: true}
	sim := newSim(t, cfg, func(s stream) error {
		for {
			m, err := s.Recv()
			if err != nil {
				return nil
			}
			rec.add(m)
			switch {
			case m.GetRequestHeaders() != nil:
				_ = s.Send(headersReply(setHeader(DefaultDestinationHeader, addr)))
			case m.GetResponseBody() != nil:
				// Headers still held: answer with a 503 instead.
				_ = s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
					ImmediateResponse: &extprocv3.ImmediateResponse{
						Status:  &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
						Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("x-smg-preempted", "true")}},
						Body:    []byte(`{"error":"preempted"}`),
					}}})
				return nil
			}
		}
	})
	resp, err := sim.Do(t.Context(), Request{})
	wantStatus(t, resp, err, http.StatusServiceUnavailable)
	if resp.Reset || resp.Header.Get("X-Smg-Preempted") != "true" || string(resp.Body) != `{"error":"preempted"}` {
		t.Errorf("client got reset %v headers %v body %q", resp.Reset, resp.Header, resp.Body)
	}
	if got := rec.shapes(); len(got) < 3 || got[1] != "response_headers" || got[2] != `response_body("data: first\n\n")` {
		t.Errorf("server saw %q", got)
	}
}
