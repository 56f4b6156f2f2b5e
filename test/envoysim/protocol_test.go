package envoysim

import (
	"bytes"
	"net/http"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// The request headers as the server sees them: lower-case keys, values in
// raw_value only, pseudo-headers, x-forwarded-proto and x-request-id.
func TestRequestHeaders_Shape(t *testing.T) {
	addr, _ := recordingBackend(t)
	rec := &recorder{}
	sim := newSim(t, headersOnly(), serveAll(rec, addr))
	resp, err := sim.Do(t.Context(), Request{
		Method: http.MethodPost, Path: "/v1/chat/completions?x=1", Host: "gw.example",
		Header: http.Header{"X-Smg-Priority": {"interactive"}, "Connection": {"keep-alive"}},
		Body:   []byte("{}"),
	})
	wantStatus(t, resp, err, http.StatusOK)
	hh := rec.all()[0].GetRequestHeaders()
	if hh.GetEndOfStream() {
		t.Error("end_of_stream set on headers of a request with a body")
	}
	got := map[string]string{}
	var keys []string
	for _, h := range hh.GetHeaders().GetHeaders() {
		if h.GetValue() != "" {
			t.Errorf("header %q has value %q, want raw_value only", h.GetKey(), h.GetValue())
		}
		got[h.GetKey()] = string(h.GetRawValue())
		keys = append(keys, h.GetKey())
	}
	want := map[string]string{
		":method": "POST", ":path": "/v1/chat/completions?x=1", ":scheme": "http", ":authority": "gw.example",
		"x-smg-priority": "interactive", "x-forwarded-proto": "http",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if len(got["x-request-id"]) != 36 {
		t.Errorf("x-request-id = %q, want a generated UUID", got["x-request-id"])
	}
	if slices.Contains(keys, "connection") || slices.Contains(keys, "host") {
		t.Errorf("keys %q include a hop-by-hop or host header", keys)
	}
}

// protocol_config travels only in the first message, attributes only on the
// first message of the request direction.
func TestProtocolConfigAndAttributes_FirstMessageOnly(t *testing.T) {
	addr, _ := recordingBackend(t)
	rec := &recorder{}
	cfg := Config{
		Mode:              mode(bodyBuffered, true, bodyStreamed),
		RequestAttributes: []string{"source.address", "source.port", "request.path", "request.id"},
	}
	sim := newSim(t, cfg, serveAll(rec, addr))
	resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Path: "/p?q", Body: []byte("b"),
		RemoteAddr: "10.1.2.3:5555", Header: http.Header{"X-Request-Id": {"rid-1"}}})
	wantStatus(t, resp, err, http.StatusOK)
	msgs := rec.all()
	if len(msgs) < 3 {
		t.Fatalf("server saw %q", rec.shapes())
	}
	pc := msgs[0].GetProtocolConfig()
	if pc.GetRequestBodyMode() != bodyBuffered || pc.GetResponseBodyMode() != bodyStreamed {
		t.Errorf("protocol_config %v", pc)
	}
	attrs := msgs[0].GetAttributes()[attributesKey].GetFields()
	if attrs["source.address"].GetStringValue() != "10.1.2.3:5555" || attrs["source.port"].GetNumberValue() != 5555 ||
		attrs["request.path"].GetStringValue() != "/p?q" || attrs["request.id"].GetStringValue() != "rid-1" {
		t.Errorf("attributes %v", attrs)
	}
	for i, m := range msgs[1:] {
		if m.GetProtocolConfig() != nil || m.GetAttributes() != nil {
			t.Errorf("message %d (%s) repeats protocol_config or attributes", i+1, shape(m))
		}
	}
}

// GetBufferedButNoBodies / BufferBodyOverrideGetRequestNoBody: a request
// without a body has end_of_stream on its headers and never a body message;
// BufferBodyOverridePostWithEmptyBody: an empty body is one empty message.
func TestBodyShapes(t *testing.T) {
	tests := []struct {
		name   string
		body   []byte
		header http.Header
		want   []string
	}{
		{"no body", nil, nil, []string{"request_headers+eos"}},
		// An HTTP/2 (or HTTP/1 chunked) empty body: one empty body message.
		{"empty body", []byte{}, nil, []string{"request_headers", `request_body("")+eos`}},
		// HTTP/1 Content-Length: 0 is dispatched as headers with
		// end_of_stream (http1/codec_impl.cc:1240-1262): no body message.
		{"http1 content-length 0", []byte{}, http.Header{"Content-Length": {"0"}}, []string{"request_headers+eos"}},
		{"body", []byte("hello"), nil, []string{"request_headers", `request_body("hello")+eos`}},
	}
	for _, bm := range []struct {
		name string
		mode Config
	}{
		{"buffered", Config{Mode: mode(bodyBuffered, false, bodyNone)}},
		{"streamed", Config{Mode: mode(bodyStreamed, false, bodyNone)}},
	} {
		for _, tt := range tests {
			t.Run(bm.name+"/"+tt.name, func(t *testing.T) {
				addr, seen := recordingBackend(t)
				rec := &recorder{}
				sim := newSim(t, bm.mode, serveAll(rec, addr))
				resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Header: tt.header, Body: tt.body})
				wantStatus(t, resp, err, http.StatusOK)
				if got := rec.shapes(); !slices.Equal(got, tt.want) {
					t.Errorf("server saw %q, want %q", got, tt.want)
				}
				if got := seen()[0].Body; got != string(tt.body) {
					t.Errorf("upstream body %q, want %q", got, tt.body)
				}
			})
		}
	}
}

// Body mode NONE sends no body message but forwards the body.
func TestBodyModeNone_ForwardsBody(t *testing.T) {
	addr, seen := recordingBackend(t)
	rec := &recorder{}
	sim := newSim(t, headersOnly(), serveAll(rec, addr))
	resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte("payload")})
	wantStatus(t, resp, err, http.StatusOK)
	if got := rec.shapes(); !slices.Equal(got, []string{"request_headers"}) {
		t.Errorf("server saw %q", got)
	}
	if seen()[0].Body != "payload" {
		t.Errorf("upstream body %q", seen()[0].Body)
	}
}

// STREAMED mode sends configured chunk sizes, pipelined, and applies each
// chunk's mutation.
func TestStreamedRequestBody_ChunksAndMutation(t *testing.T) {
	addr, seen := recordingBackend(t)
	rec := &recorder{}
	cfg := Config{Mode: mode(bodyStreamed, false, bodyNone), RequestChunkSize: 4}
	sim := newSim(t, cfg, func(s stream) error {
		for {
			m, err := s.Recv()
			if err != nil {
				return nil
			}
			rec.add(m)
			reply := continueFor(m, addr)
			if b := m.GetRequestBody(); b != nil {
				reply.GetRequestBody().Response = &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
					Mutation: &extprocv3.BodyMutation_Body{Body: bytes.ToUpper(b.GetBody())}}}
			}
			if err := s.Send(reply); err != nil {
				return nil
			}
		}
	})
	resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte("abcdefghij")})
	wantStatus(t, resp, err, http.StatusOK)
	want := []string{"request_headers", `request_body("abcd")`, `request_body("efgh")`, `request_body("ij")+eos`}
	if got := rec.shapes(); !slices.Equal(got, want) {
		t.Errorf("server saw %q, want %q", got, want)
	}
	if got := seen()[0].Body; got != "ABCDEFGHIJ" {
		t.Errorf("upstream body %q, want the mutated chunks", got)
	}
}

// BUFFERED mode: a header mutation in the body reply applies (headers are
// still held), and a body mutation that contradicts content-length is an
// error.
func TestBufferedRequestBody_Mutations(t *testing.T) {
	bodyReply := func(route, newBody string, extra ...*corev3.HeaderValueOption) *extprocv3.ProcessingResponse {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
				HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: append(extra, setHeader(DefaultDestinationHeader, route))},
				BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(newBody)}},
			}}}}
	}
	script := func(reply func(addr string) *extprocv3.ProcessingResponse, addr string) processFunc {
		return func(s stream) error {
			if _, err := s.Recv(); err != nil {
				return err
			}
			_ = s.Send(headersReply())
			if _, err := s.Recv(); err != nil {
				return err
			}
			_ = s.Send(reply(addr))
			_, err := s.Recv()
			return err
		}
	}
	t.Run("mutation applies", func(t *testing.T) {
		addr, seen := recordingBackend(t)
		sim := newSim(t, Config{Mode: mode(bodyBuffered, false, bodyNone)}, script(func(a string) *extprocv3.ProcessingResponse {
			return bodyReply(a, "rewritten", setHeader("content-length", "9"), setHeader("x-model", "m1"))
		}, addr))
		resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte("original"),
			Header: http.Header{"Content-Length": {"8"}}})
		wantStatus(t, resp, err, http.StatusOK)
		got := seen()[0]
		if got.Body != "rewritten" || got.Header.Get("X-Model") != "m1" {
			t.Errorf("upstream saw body %q headers %v", got.Body, got.Header)
		}
	})
	t.Run("content-length mismatch", func(t *testing.T) {
		addr, _ := recordingBackend(t)
		sim := newSim(t, Config{Mode: mode(bodyBuffered, false, bodyNone)}, script(func(a string) *extprocv3.ProcessingResponse {
			return bodyReply(a, "rewritten")
		}, addr))
		resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte("original"),
			Header: http.Header{"Content-Length": {"8"}}})
		wantStatus(t, resp, err, http.StatusInternalServerError)
		if !strings.HasPrefix(resp.Details, "mismatch_between_content_length") {
			t.Errorf("details %q", resp.Details)
		}
	})
}

// In STREAMED mode a header mutation in a body reply is ignored.
func TestStreamedRequestBody_HeaderMutationIgnored(t *testing.T) {
	addr, seen := recordingBackend(t)
	sim := newSim(t, Config{Mode: mode(bodyStreamed, false, bodyNone)}, func(s stream) error {
		if _, err := s.Recv(); err != nil {
			return err
		}
		_ = s.Send(headersReply(setHeader(DefaultDestinationHeader, addr)))
		if _, err := s.Recv(); err != nil {
			return err
		}
		_ = s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
				HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("x-late", "1")}},
			}}}})
		_, err := s.Recv()
		return err
	})
	resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte("b")})
	wantStatus(t, resp, err, http.StatusOK)
	if seen()[0].Header.Get("X-Late") != "" {
		t.Error("a header mutation in a STREAMED body reply was applied")
	}
}

// A clean close while STREAMED chunks are unanswered lets the rest of the
// body through unmodified.
func TestStreamedRequestBody_CleanCloseMidway(t *testing.T) {
	addr, seen := recordingBackend(t)
	cfg := Config{Mode: mode(bodyStreamed, false, bodyNone), RequestChunkSize: 2}
	sim := newSim(t, cfg, func(s stream) error {
		if _, err := s.Recv(); err != nil {
			return err
		}
		_ = s.Send(headersReply(setHeader(DefaultDestinationHeader, addr)))
		if _, err := s.Recv(); err != nil {
			return err
		}
		_ = s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
				BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte("AB")}},
			}}}})
		return nil
	})
	resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte("abcdef")})
	wantStatus(t, resp, err, http.StatusOK)
	if got := seen()[0].Body; got != "ABcdef" {
		t.Errorf("upstream body %q, want the first chunk mutated and the rest unmodified", got)
	}
}

// Request trailers are sent when request_trailer_mode is SEND, and their
// mutation reaches the upstream.
func TestRequestTrailers(t *testing.T) {
	addr, seen := recordingBackend(t)
	rec := &recorder{}
	cfg := Config{Mode: mode(bodyBuffered, false, bodyNone)}
	cfg.Mode.RequestTrailerMode = sendMode
	sim := newSim(t, cfg, func(s stream) error {
		for {
			m, err := s.Recv()
			if err != nil {
				return nil
			}
			rec.add(m)
			reply := continueFor(m, addr)
			if m.GetRequestTrailers() != nil {
				reply.GetRequestTrailers().HeaderMutation = &extprocv3.HeaderMutation{
					SetHeaders: []*corev3.HeaderValueOption{setHeader("x-checksum", "ok")}}
			}
			_ = s.Send(reply)
		}
	})
	resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte("abc"),
		Trailer: http.Header{"X-Checksum": {"raw"}}})
	wantStatus(t, resp, err, http.StatusOK)
	want := []string{"request_headers", `request_body("abc")`, "request_trailers"}
	if got := rec.shapes(); !slices.Equal(got, want) {
		t.Errorf("server saw %q, want %q", got, want)
	}
	if got := seen()[0]; got.Body != "abc" || got.Trailer.Get("X-Checksum") != "ok" {
		t.Errorf("upstream saw body %q trailers %v", got.Body, got.Trailer)
	}
}

// FULL_DUPLEX_STREAMED: Envoy sends headers, body and trailers without
// waiting; the server answers the headers and streams the body back in its
// own chunks, which are reassembled and forwarded.
func TestFullDuplex_Echo(t *testing.T) {
	addr, seen := recordingBackend(t)
	rec := &recorder{}
	cfg := Config{Mode: mode(bodyFullDuplex, false, bodyNone), RequestChunkSize: 3}
	cfg.Mode.RequestTrailerMode = sendMode
	sim := newSim(t, cfg, func(s stream) error {
		var body []byte
		for {
			m, err := s.Recv()
			if err != nil {
				return err
			}
			rec.add(m)
			if b := m.GetRequestBody(); b != nil {
				body = append(body, b.GetBody()...)
				if b.GetEndOfStream() {
					break
				}
			}
		}
		// Everything arrived before any answer: now answer.
		_ = s.Send(headersReply(setHeader(DefaultDestinationHeader, addr)))
		upper := bytes.ToUpper(body)
		for i, part := range [][]byte{upper[:5], upper[5:]} {
			_ = s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
				RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
					BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
						StreamedResponse: &extprocv3.StreamedBodyResponse{Body: part, EndOfStream: i == 1}}}}}}})
		}
		_, err := s.Recv()
		return err
	})
	resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte("full duplex")})
	wantStatus(t, resp, err, http.StatusOK)
	want := []string{"request_headers", `request_body("ful")`, `request_body("l d")`, `request_body("upl")`, `request_body("ex")+eos`}
	if got := rec.shapes(); !slices.Equal(got, want) {
		t.Errorf("server saw %q, want %q", got, want)
	}
	if got := seen()[0].Body; got != "FULL DUPLEX" {
		t.Errorf("upstream body %q, want the streamed-back body", got)
	}
}

// FULL_DUPLEX: a body reply before the headers reply is spurious.
func TestFullDuplex_BodyBeforeHeadersSpurious(t *testing.T) {
	cfg := Config{Mode: mode(bodyFullDuplex, false, bodyNone)}
	cfg.Mode.RequestTrailerMode = sendMode
	sim := newSim(t, cfg, func(s stream) error {
		_, _ = s.Recv()
		_, _ = s.Recv()
		_ = s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{}}})
		_, err := s.Recv()
		return err
	})
	resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte("x")})
	wantStatus(t, resp, err, http.StatusInternalServerError)
}

// CONTINUE_AND_REPLACE on request headers replaces the body and ends the
// request direction: no body message follows.
func TestContinueAndReplace_Request(t *testing.T) {
	addr, seen := recordingBackend(t)
	rec := &recorder{}
	sim := newSim(t, Config{Mode: mode(bodyBuffered, false, bodyNone)}, func(s stream) error {
		m, err := s.Recv()
		if err != nil {
			return err
		}
		rec.add(m)
		_ = s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
			RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
				Status: extprocv3.CommonResponse_CONTINUE_AND_REPLACE,
				HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
					setHeader(DefaultDestinationHeader, addr), setHeader(":method", "PUT")}},
				BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte("replaced")}},
			}}}})
		for {
			m, err := s.Recv()
			if err != nil {
				return nil
			}
			rec.add(m)
		}
	})
	resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte("original")})
	wantStatus(t, resp, err, http.StatusOK)
	if got := rec.shapes(); !slices.Equal(got, []string{"request_headers"}) {
		t.Errorf("server saw %q, want only the headers", got)
	}
	if got := seen()[0]; got.Body != "replaced" || got.Method != http.MethodPut {
		t.Errorf("upstream saw %s body %q", got.Method, got.Body)
	}
}
