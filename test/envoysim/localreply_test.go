package envoysim

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// holdRequest is a processor that never answers request messages (as one
// holding a queued request) and answers response messages with CONTINUE.
// It records what it receives and reports how its stream ended.
func holdRequest(rec *recorder, ended chan<- string) processFunc {
	return func(s stream) error {
		for {
			m, err := s.Recv()
			if err != nil {
				if ended != nil {
					ended <- endOf(s, err)
				}
				return nil
			}
			rec.add(m)
			switch m.GetRequest().(type) {
			case *extprocv3.ProcessingRequest_ResponseHeaders, *extprocv3.ProcessingRequest_ResponseBody,
				*extprocv3.ProcessingRequest_ResponseTrailers:
				if err := s.Send(continueFor(m, "")); err != nil {
					return nil
				}
			}
		}
	}
}

// sawShapes compares what a server saw with want; a nil want means a
// release that skips local replies: the server saw no response message
// (the request messages it saw depend on when the reset cut the stream).
func sawShapes(got, want []string) bool {
	if want == nil {
		return !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "response_") })
	}
	return slices.Equal(got, want)
}

// Envoy 1.37+ sends its own local replies through ext_proc: encodeHeaders
// has no local-reply check any more (ext_proc.cc:1351-1393; PR #41769
// removed skip_ext_proc_on_local_reply). 1.34 to 1.36 skipped them.
func TestLocalReply_RouterReplyGoesToTheProcessor(t *testing.T) {
	for _, tt := range []struct {
		v    Version
		want []string
	}{
		{0, []string{"request_headers+eos", "response_headers", `response_body("no healthy upstream")+eos`}},
		{Version1_36, []string{"request_headers+eos"}},
		{Version1_34, []string{"request_headers+eos"}},
	} {
		t.Run(orDefault(tt.v, VersionLatest).String(), func(t *testing.T) {
			rec := &recorder{}
			sim := newSim(t, Config{Version: tt.v, Mode: mode(bodyBuffered, true, bodyStreamed)}, serveAll(rec, ""))
			resp, err := sim.Do(t.Context(), Request{})
			wantStatus(t, resp, err, http.StatusServiceUnavailable)
			if string(resp.Body) != "no healthy upstream" || resp.Details != "no_healthy_upstream" || !resp.LocalReply {
				t.Errorf("client got %q details %q", resp.Body, resp.Details)
			}
			if got := rec.shapes(); !slices.Equal(got, tt.want) {
				t.Errorf("server saw %q, want %q", got, tt.want)
			}
		})
	}
}

// A BUFFERED body over the buffer limit gets the filter manager's 413
// (filter_manager.cc:569-576), whether the processor already answered the
// headers or still holds them; on 1.37+ it passes through the processor,
// whose CONTINUE lets the client see it unchanged.
func TestLocalReply_413BufferedBodyOverTheLimit(t *testing.T) {
	body := []byte(strings.Repeat("x", 100))
	for _, tt := range []struct {
		name    string
		v       Version
		process func(*recorder, chan<- string) processFunc
		want    []string
	}{
		{"headers answered", 0, func(r *recorder, _ chan<- string) processFunc { return serveAll(r, "127.0.0.1:1") },
			[]string{"request_headers", "response_headers", `response_body("Payload Too Large")+eos`}},
		{"headers held", 0, holdRequest,
			[]string{"request_headers", "response_headers", `response_body("Payload Too Large")+eos`}},
		{"headers held 1.36", Version1_36, holdRequest, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			ended := make(chan string, 1)
			sim := newSim(t, Config{Version: tt.v, Mode: mode(bodyBuffered, true, bodyStreamed), BufferLimitBytes: 64}, tt.process(rec, ended))
			resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: body})
			wantStatus(t, resp, err, http.StatusRequestEntityTooLarge)
			if string(resp.Body) != "Payload Too Large" || resp.Details != "request_payload_too_large" {
				t.Errorf("client got %q details %q", resp.Body, resp.Details)
			}
			if got := rec.shapes(); !sawShapes(got, tt.want) {
				t.Errorf("server saw %q, want %q", got, tt.want)
			}
			if st := sim.Stats(); st.RequestTooLarge != 1 || st.UpstreamRequests != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// A streaming body mode never buffers the whole body: over the limit it
// only applies back-pressure (a watermark), so there is no 413.
func TestLocalReply_No413ForStreamedBodies(t *testing.T) {
	addr, seen := recordingBackend(t)
	sim := newSim(t, Config{Mode: mode(bodyStreamed, false, bodyNone), BufferLimitBytes: 64}, serveAll(nil, addr))
	resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte(strings.Repeat("y", 100))})
	wantStatus(t, resp, err, http.StatusOK)
	if got := seen()[0].Body; len(got) != 100 {
		t.Errorf("upstream body of %d bytes, want 100", len(got))
	}
}

// A processor that fails its stream on the local reply's headers (what
// tollgate did before it knew local replies arrive) makes Envoy replace its
// own 413 with status_on_error.
func TestLocalReply_ProcessorErrorReplacesEnvoysStatus(t *testing.T) {
	sim := newSim(t, Config{Mode: mode(bodyBuffered, true, bodyStreamed), BufferLimitBytes: 64, StatusOnError: 503},
		func(s stream) error {
			for {
				m, err := s.Recv()
				if err != nil {
					return nil
				}
				if m.GetResponseHeaders() != nil {
					return status.Error(codes.FailedPrecondition, "response headers in stage body")
				}
			}
		})
	resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte(strings.Repeat("x", 100))})
	wantStatus(t, resp, err, http.StatusServiceUnavailable)
	if !strings.HasPrefix(resp.Details, "ext_proc_error_gRPC_error_9") {
		t.Errorf("details %q", resp.Details)
	}
}

// The connection manager's stream_idle_timeout and request_timeout fire on
// a held request; the whole request was received, so the answer is 504
// (conn_manager_impl.cc:1061-1077, http/utility.cc:1535-1540). On 1.37+ it
// passes through the processor; on 1.36 the processor only sees its stream
// end.
func TestLocalReply_HCMTimeoutWhileHeld(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cfg     Config
		body    string
		details string
		want    []string
		end     string
	}{
		{"stream idle", Config{StreamIdleTimeout: 50 * time.Millisecond}, "stream timeout", "stream_idle_timeout",
			[]string{"request_headers", "response_headers", `response_body("stream timeout")+eos`}, "cancelled"},
		{"request timeout", Config{RequestTimeout: 50 * time.Millisecond}, "request timeout", "request_overall_timeout",
			[]string{"request_headers", "response_headers", `response_body("request timeout")+eos`}, "cancelled"},
		{"stream idle 1.36", Config{StreamIdleTimeout: 50 * time.Millisecond, Version: Version1_36}, "stream timeout", "stream_idle_timeout",
			nil, "cancelled"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{}
				ended := make(chan string, 1)
				cfg := tt.cfg
				cfg.Mode = mode(bodyStreamed, true, bodyStreamed)
				sim := newSim(t, cfg, holdRequest(rec, ended))
				start := time.Now()
				resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte("{}")})
				wantStatus(t, resp, err, http.StatusGatewayTimeout)
				if elapsed := time.Since(start); elapsed != 50*time.Millisecond {
					t.Errorf("504 after %v, want the 50ms timer", elapsed)
				}
				if string(resp.Body) != tt.body || resp.Details != tt.details {
					t.Errorf("client got %q details %q", resp.Body, resp.Details)
				}
				if got := waitFor(t, ended, "server stream end"); got != tt.end {
					t.Errorf("server stream ended %s, want %s", got, tt.end)
				}
				if got := rec.shapes(); !sawShapes(got, tt.want) {
					t.Errorf("server saw %q, want %q", got, tt.want)
				}
				if st := sim.Stats(); st.DownstreamTimeouts != 1 {
					t.Errorf("stats %+v", st)
				}
			})
		})
	}
}

// The client may still go away while Envoy's own reply is with the
// processor: nobody gets a reply and the side stream is closed, by reset or
// (ext_proc_graceful_grpc_close) by half-close (ext_proc.cc:847-876).
func TestLocalReply_ClientGoneDuringReply(t *testing.T) {
	for _, tt := range []struct {
		style CloseStyle
		want  string
	}{{CloseReset, "cancelled"}, {CloseGraceful, "eof"}} {
		t.Run(tt.style.String(), func(t *testing.T) { clientGoneDuringReply(t, tt.style, tt.want) })
	}
}

func clientGoneDuringReply(t *testing.T, style CloseStyle, want string) {
	rec := &recorder{}
	ended := make(chan string, 1)
	sim := newSim(t, Config{Mode: mode(bodyBuffered, true, bodyStreamed), BufferLimitBytes: 8, Close: style}, func(s stream) error {
		for {
			m, err := s.Recv()
			if err != nil {
				ended <- endOf(s, err)
				return nil
			}
			rec.add(m) // answers nothing: the reply's headers stay outstanding
		}
	})
	req := Request{Method: http.MethodPost, Body: []byte("0123456789"),
		DisconnectAt: func(s Stage) bool { return s == StageResponseHeaders }}
	_, err := sim.Do(t.Context(), req)
	if !errors.Is(err, ErrDisconnected) {
		t.Fatalf("Do: %v, want ErrDisconnected", err)
	}
	if got := waitFor(t, ended, "server stream end"); got != want {
		t.Errorf("server stream ended %s, want %s", got, want)
	}
}

// The side stream closes right after the last needed reply only from 1.37
// (ext_proc.cc:1733-1789, ext_proc_stream_close_optimization); before, it
// stays open until the HTTP stream ends.
func TestVersion_StreamCloseAfterLastReply(t *testing.T) {
	for _, tt := range []struct {
		v          Version
		openAtCall bool
	}{
		{0, false},
		{Version1_36, true},
	} {
		t.Run(orDefault(tt.v, VersionLatest).String(), inBubble(func(t *testing.T) {
			ended := make(chan string, 1)
			var openAtCall bool
			addr := memBackend(t, func(w http.ResponseWriter, _ *http.Request) {
				// Once every goroutine waits, a side stream that was to
				// close after the last reply has closed.
				synctest.Wait()
				select {
				case e := <-ended:
					ended <- e
				default:
					openAtCall = true
				}
				_, _ = w.Write([]byte("ok"))
			})
			sim := newSim(t, Config{Version: tt.v, Mode: mode(bodyNone, false, bodyNone)}, func(s stream) error {
				_, _ = s.Recv()
				_ = s.Send(headersReply(setHeader(DefaultDestinationHeader, addr)))
				_, err := s.Recv()
				ended <- endOf(s, err)
				return nil
			})
			resp, err := sim.Do(t.Context(), Request{})
			wantStatus(t, resp, err, http.StatusOK)
			waitFor(t, ended, "server stream end")
			if openAtCall != tt.openAtCall {
				t.Errorf("stream open when the upstream was called: %v, want %v", openAtCall, tt.openAtCall)
			}
		}))
	}
}

// request_attributes: source.address is sent only when configured
// (ext_proc.cc:1607-1621).
func TestRequestAttributes_OnlyWhenConfigured(t *testing.T) {
	for _, attrs := range [][]string{nil, {"source.address"}} {
		rec := &recorder{}
		addr, _ := recordingBackend(t)
		sim := newSim(t, Config{Mode: mode(bodyNone, false, bodyNone), RequestAttributes: attrs}, serveAll(rec, addr))
		resp, err := sim.Do(t.Context(), Request{RemoteAddr: "198.51.100.7:4242"})
		wantStatus(t, resp, err, http.StatusOK)
		got, ok := rec.all()[0].GetAttributes()[attributesKey].GetFields()["source.address"]
		if want := attrs != nil; ok != want || (ok && got.GetStringValue() != "198.51.100.7:4242") {
			t.Errorf("attributes %v: source.address %v present %v", attrs, got, ok)
		}
	}
}

func TestVersion_Validation(t *testing.T) {
	for _, v := range []Version{33, 40} {
		if _, err := New(Config{ExtProcAddr: "a", Version: v}); err == nil || !strings.Contains(err.Error(), "not modelled") {
			t.Errorf("version %v: %v", v, err)
		}
	}
	sim, err := New(Config{ExtProcAddr: "a", Version: Version1_34, StatusOnError: 503})
	if err != nil {
		t.Fatal(err)
	}
	_ = sim.Close()
}

// Before 1.36 status_on_error does not exist: errors answer 500.
func TestVersion_StatusOnErrorFrom136(t *testing.T) {
	for _, tt := range []struct {
		v    Version
		want int
	}{{Version1_34, 500}, {Version1_36, 503}} {
		sim := newSim(t, Config{Version: tt.v, StatusOnError: 503}, func(stream) error { return status.Error(codes.Unavailable, "x") })
		resp, err := sim.Do(t.Context(), Request{})
		wantStatus(t, resp, err, tt.want)
	}
}
