package envoysim

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// sseBackend streams n server-sent events, flushing each, then ends with
// chunked encoding (no content-length). It runs in memory, in the test's
// testing/synctest bubble: each event is written once every goroutine waits,
// so the previous one has gone as far as it can and none is coalesced.
func sseBackend(t *testing.T, n int) string {
	t.Helper()
	return memBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for i := range n {
			synctest.Wait()
			_, _ = fmt.Fprintf(w, "data: token%d\n\n", i)
			w.(http.Flusher).Flush()
		}
	})
}

// Response headers SEND and body STREAMED: each upstream chunk becomes a
// response_body message, answered before it reaches the client; the end of a
// chunked body is an empty end_of_stream message.
func TestResponse_StreamedChunks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addr := sseBackend(t, 3)
		rec := &recorder{}
		sim := newSim(t, Config{Mode: mode(bodyNone, true, bodyStreamed)}, func(s stream) error {
			for {
				m, err := s.Recv()
				if err != nil {
					return nil
				}
				rec.add(m)
				reply := continueFor(m, addr)
				if m.GetResponseHeaders() != nil {
					reply.GetResponseHeaders().Response = &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
						SetHeaders: []*corev3.HeaderValueOption{setHeader("x-tollgate-worker", "w1")}}}
				}
				_ = s.Send(reply)
			}
		})
		resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte(`{"stream":true}`)})
		wantStatus(t, resp, err, http.StatusOK)
		want := []string{"request_headers", "response_headers",
			`response_body("data: token0\n\n")`, `response_body("data: token1\n\n")`, `response_body("data: token2\n\n")`,
			`response_body("")+eos`}
		if got := rec.shapes(); !slices.Equal(got, want) {
			t.Errorf("server saw %q, want %q", got, want)
		}
		if string(resp.Body) != "data: token0\n\ndata: token1\n\ndata: token2\n\n" || resp.Header.Get("X-Tollgate-Worker") != "w1" {
			t.Errorf("client got headers %v body %q", resp.Header, resp.Body)
		}
		hh := rec.all()[1].GetResponseHeaders().GetHeaders().GetHeaders()
		if hh[0].GetKey() != ":status" || string(hh[0].GetRawValue()) != "200" {
			t.Errorf("first response header %v, want :status 200", hh[0])
		}
	})
}

// The HTTP/1 codec always ends a response with an empty
// decodeData(end_stream=true), content-length or not
// (http1/codec_impl.cc:1611-1636, ClientConnectionImpl::onMessageCompleteBase),
// so a content-length body ends with an empty end_of_stream chunk; an empty
// body ends the stream on the headers.
func TestResponse_ContentLengthShapes(t *testing.T) {
	for _, tt := range []struct {
		name string
		body string
		want []string
	}{
		{"body", "hello", []string{"request_headers+eos", "response_headers", `response_body("hello")`, `response_body("")+eos`}},
		{"empty", "", []string{"request_headers+eos", "response_headers+eos"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr := backend(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(tt.body)))
				_, _ = io.WriteString(w, tt.body)
			})
			rec := &recorder{}
			sim := newSim(t, Config{Mode: mode(bodyNone, true, bodyStreamed)}, serveAll(rec, addr))
			resp, err := sim.Do(t.Context(), Request{})
			wantStatus(t, resp, err, http.StatusOK)
			if got := rec.shapes(); !slices.Equal(got, tt.want) {
				t.Errorf("server saw %q, want %q", got, tt.want)
			}
			if string(resp.Body) != tt.body {
				t.Errorf("client body %q", resp.Body)
			}
		})
	}
}

// Response BUFFERED: one body message; header and body mutations in its reply
// apply because the headers are held until then.
func TestResponse_Buffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addr := sseBackend(t, 2)
		rec := &recorder{}
		sim := newSim(t, Config{Mode: mode(bodyNone, true, bodyBuffered)}, func(s stream) error {
			for {
				m, err := s.Recv()
				if err != nil {
					return nil
				}
				rec.add(m)
				reply := continueFor(m, addr)
				if b := m.GetResponseBody(); b != nil {
					reply.GetResponseBody().Response = &extprocv3.CommonResponse{
						HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("x-usage", "7")}},
						BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: bytes.ToUpper(b.GetBody())}},
					}
				}
				_ = s.Send(reply)
			}
		})
		resp, err := sim.Do(t.Context(), Request{})
		wantStatus(t, resp, err, http.StatusOK)
		want := []string{"request_headers+eos", "response_headers", `response_body("data: token0\n\ndata: token1\n\n")+eos`}
		if got := rec.shapes(); !slices.Equal(got, want) {
			t.Errorf("server saw %q, want %q", got, want)
		}
		if string(resp.Body) != "DATA: TOKEN0\n\nDATA: TOKEN1\n\n" || resp.Header.Get("X-Usage") != "7" {
			t.Errorf("client got headers %v body %q", resp.Header, resp.Body)
		}
	})
}

// Response trailers go to the server when response_trailer_mode is SEND.
func TestResponse_Trailers(t *testing.T) {
	addr := backend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Usage")
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-Usage", "raw")
	})
	rec := &recorder{}
	cfg := Config{Mode: mode(bodyNone, true, bodyStreamed)}
	cfg.Mode.ResponseTrailerMode = sendMode
	sim := newSim(t, cfg, func(s stream) error {
		for {
			m, err := s.Recv()
			if err != nil {
				return nil
			}
			rec.add(m)
			reply := continueFor(m, addr)
			if m.GetResponseTrailers() != nil {
				reply.GetResponseTrailers().HeaderMutation = &extprocv3.HeaderMutation{
					SetHeaders: []*corev3.HeaderValueOption{setHeader("x-usage", "counted")}}
			}
			_ = s.Send(reply)
		}
	})
	resp, err := sim.Do(t.Context(), Request{})
	wantStatus(t, resp, err, http.StatusOK)
	want := []string{"request_headers+eos", "response_headers", `response_body("body")`, "response_trailers"}
	if got := rec.shapes(); !slices.Equal(got, want) {
		t.Errorf("server saw %q, want %q", got, want)
	}
	if resp.Trailer.Get("X-Usage") != "counted" {
		t.Errorf("client trailers %v", resp.Trailer)
	}
}

// An ImmediateResponse on response headers replaces the upstream response.
func TestResponse_ImmediateResponseOnHeaders(t *testing.T) {
	addr, _ := recordingBackend(t)
	sim := newSim(t, Config{Mode: mode(bodyNone, true, bodyNone)}, func(s stream) error {
		m, _ := s.Recv()
		_ = s.Send(continueFor(m, addr))
		_, _ = s.Recv()
		_ = s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
			ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
				Body: []byte("preempted")}}})
		_, err := s.Recv()
		return err
	})
	resp, err := sim.Do(t.Context(), Request{})
	wantStatus(t, resp, err, http.StatusServiceUnavailable)
	if string(resp.Body) != "preempted" || resp.Reset {
		t.Errorf("body %q reset %v", resp.Body, resp.Reset)
	}
}

// GetAndRespondImmediatelyOnResponseBody: once the response started, an
// ImmediateResponse can only reset the stream.
func TestResponse_ImmediateResponseAfterStartResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addr := sseBackend(t, 3)
		sim := newSim(t, Config{Mode: mode(bodyNone, true, bodyStreamed)}, func(s stream) error {
			for i := 0; ; i++ {
				m, err := s.Recv()
				if err != nil {
					return nil
				}
				reply := continueFor(m, addr)
				if m.GetResponseBody() != nil && i == 3 { // the second chunk
					reply = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
						ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}}}}
				}
				_ = s.Send(reply)
			}
		})
		resp, err := sim.Do(t.Context(), Request{})
		if err != nil {
			t.Fatal(err)
		}
		if !resp.Reset || resp.Status != http.StatusOK || string(resp.Body) != "data: token0\n\n" {
			t.Errorf("reset %v status %d body %q, want a reset after the first chunk", resp.Reset, resp.Status, resp.Body)
		}
	})
}

// With the response side skipped, the stream closes right after the request
// headers reply, before the upstream answers.
func TestResponse_SkippedClosesStreamEarly(t *testing.T) {
	release := make(chan struct{})
	addr := backend(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		_, _ = io.WriteString(w, "late")
	})
	ended := make(chan string, 1)
	sim := newSim(t, headersOnly(), func(s stream) error {
		_, _ = s.Recv()
		_ = s.Send(headersReply(setHeader(DefaultDestinationHeader, addr)))
		_, err := s.Recv()
		ended <- endOf(s, err)
		return nil
	})
	done := make(chan *Response, 1)
	go func() {
		resp, _ := sim.Do(t.Context(), Request{})
		done <- resp
	}()
	if got := waitFor(t, ended, "stream end before the response"); got != "cancelled" {
		t.Errorf("server saw %s, want a reset", got)
	}
	close(release)
	if resp := waitFor(t, done, "response"); resp == nil || string(resp.Body) != "late" {
		t.Errorf("response %+v", resp)
	}
}

// An upstream that dies mid-body resets the client's stream.
func TestResponse_UpstreamResetMidBody(t *testing.T) {
	addr := backend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		_, _ = io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	sim := newSim(t, headersOnly(), replyOnce(headersReply(setHeader(DefaultDestinationHeader, addr))))
	resp, err := sim.Do(t.Context(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Reset || resp.Status != http.StatusOK || string(resp.Body) != "partial" {
		t.Errorf("reset %v status %d body %q", resp.Reset, resp.Status, resp.Body)
	}
}

// CONTINUE_AND_REPLACE on response headers sends the replacement body and
// drops the upstream's; without a body mutation the upstream body passes.
func TestResponse_ContinueAndReplace(t *testing.T) {
	for _, tt := range []struct {
		name string
		bm   *extprocv3.BodyMutation
		want string
	}{
		{"with body", &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte("replacement")}}, "replacement"},
		{"without body", nil, "data: token0\n\ndata: token1\n\n"},
	} {
		t.Run(tt.name, inBubble(func(t *testing.T) {
			addr := sseBackend(t, 2)
			rec := &recorder{}
			sim := newSim(t, Config{Mode: mode(bodyNone, true, bodyStreamed)}, func(s stream) error {
				for {
					m, err := s.Recv()
					if err != nil {
						return nil
					}
					rec.add(m)
					reply := continueFor(m, addr)
					if m.GetResponseHeaders() != nil {
						reply.GetResponseHeaders().Response = &extprocv3.CommonResponse{
							Status: extprocv3.CommonResponse_CONTINUE_AND_REPLACE, BodyMutation: tt.bm}
					}
					_ = s.Send(reply)
				}
			})
			resp, err := sim.Do(t.Context(), Request{})
			wantStatus(t, resp, err, http.StatusOK)
			if string(resp.Body) != tt.want {
				t.Errorf("client body %q, want %q", resp.Body, tt.want)
			}
			if got := rec.shapes(); !slices.Equal(got, []string{"request_headers+eos", "response_headers"}) {
				t.Errorf("server saw %q, want no body messages", got)
			}
		}))
	}
}

// BUFFERED with response headers skipped: the headers leave at once (without
// content-length), so a header mutation in the body reply is ignored while
// the body mutation applies.
func TestResponse_BufferedHeadersSkipped(t *testing.T) {
	addr := backend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		_, _ = io.WriteString(w, "hello")
	})
	sim := newSim(t, Config{Mode: mode(bodyNone, false, bodyBuffered)}, func(s stream) error {
		for {
			m, err := s.Recv()
			if err != nil {
				return nil
			}
			reply := continueFor(m, addr)
			if m.GetResponseBody() != nil {
				reply.GetResponseBody().Response = &extprocv3.CommonResponse{
					HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("x-late", "1")}},
					BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte("HELLO, WORLD")}},
				}
			}
			_ = s.Send(reply)
		}
	})
	resp, err := sim.Do(t.Context(), Request{})
	wantStatus(t, resp, err, http.StatusOK)
	if string(resp.Body) != "HELLO, WORLD" || resp.Header.Get("X-Late") != "" || resp.Header.Get("Content-Length") != "" {
		t.Errorf("headers %v body %q", resp.Header, resp.Body)
	}
}

// A clean close while STREAMED response chunks are unanswered lets the rest
// of the response through unmodified.
func TestResponse_CleanCloseMidStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addr := sseBackend(t, 3)
		sim := newSim(t, Config{Mode: mode(bodyNone, true, bodyStreamed)}, func(s stream) error {
			for {
				m, err := s.Recv()
				if err != nil {
					return nil
				}
				if m.GetResponseBody() != nil {
					return nil // stop processing at the first chunk
				}
				_ = s.Send(continueFor(m, addr))
			}
		})
		resp, err := sim.Do(t.Context(), Request{})
		wantStatus(t, resp, err, http.StatusOK)
		if string(resp.Body) != "data: token0\n\ndata: token1\n\ndata: token2\n\n" || resp.Reset {
			t.Errorf("body %q reset %v", resp.Body, resp.Reset)
		}
	})
}

// A response headers reply may change :status; an invalid status is refused
// and counted. clear_body empties a BUFFERED body.
func TestResponse_StatusMutationAndClearBody(t *testing.T) {
	for _, tt := range []struct {
		name, status string
		want         int
		rejected     uint64
	}{
		{"valid", "429", http.StatusTooManyRequests, 0},
		{"invalid", "abc", http.StatusOK, 1},
		{"out of range", "700", http.StatusOK, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr, _ := recordingBackend(t)
			sim := newSim(t, Config{Mode: mode(bodyNone, true, bodyBuffered)}, func(s stream) error {
				for {
					m, err := s.Recv()
					if err != nil {
						return nil
					}
					reply := continueFor(m, addr)
					switch {
					case m.GetResponseHeaders() != nil:
						reply.GetResponseHeaders().Response = &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
							SetHeaders: []*corev3.HeaderValueOption{setHeader(":status", tt.status), setHeader("content-length", "0")}}}
					case m.GetResponseBody() != nil:
						reply.GetResponseBody().Response = &extprocv3.CommonResponse{
							BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}}
					}
					_ = s.Send(reply)
				}
			})
			resp, err := sim.Do(t.Context(), Request{})
			wantStatus(t, resp, err, tt.want)
			if len(resp.Body) != 0 || sim.Stats().RejectedHeaderMutations != tt.rejected {
				t.Errorf("body %q stats %+v", resp.Body, sim.Stats())
			}
		})
	}
}
