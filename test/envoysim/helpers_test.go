package envoysim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// stream is the server side of one Process stream.
type stream = extprocv3.ExternalProcessor_ProcessServer

// processFunc scripts the fake ext_proc server: it runs once per stream.
type processFunc func(stream) error

type fakeServer struct {
	extprocv3.UnimplementedExternalProcessorServer
	process processFunc
}

func (f *fakeServer) Process(s stream) error { return f.process(s) }

// testTimeout is the message timeout of tests that do not test timers: long
// enough never to fire on a loaded machine.
const testTimeout = 5 * time.Second

// newSim starts a scripted ext_proc server on an in-memory listener and a Sim
// connected to it; both stop at the end of the test.
func newSim(t *testing.T, cfg Config, process processFunc) *Sim {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(srv, &fakeServer{process: process})
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	cfg.ExtProcAddr = "passthrough:///bufnet"
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithContextDialer(
		func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if cfg.UpstreamDialer == nil {
		cfg.UpstreamDialer = dialUpstream
	}
	if cfg.MessageTimeout == 0 {
		cfg.MessageTimeout = testTimeout
	}
	sim, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := sim.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		srv.Stop()
		<-served
	})
	return sim
}

// upstreamSeen is what a recording backend received.
type upstreamSeen struct {
	Method, Path, Host string
	Header             http.Header
	Body               string
	Trailer            http.Header
}

// backend starts an HTTP/1.1 upstream on 127.0.0.1:0 and returns its
// IP:port.
func backend(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// memUpstreams holds the in-memory upstreams by the IP:port a route names;
// memPorts numbers them.
var (
	memUpstreams sync.Map // string -> *bufconn.Listener
	memPorts     atomic.Uint32
)

// memBackend starts an HTTP/1.1 upstream on an in-memory listener and
// returns the IP:port (in TEST-NET-1) that reaches it through a Sim made by
// newSim. Made inside a testing/synctest bubble, it lets the whole request
// path run on fake time.
func memBackend(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	addr := fmt.Sprintf("192.0.2.1:%d", 1024+memPorts.Add(1))
	lis := bufconn.Listen(1 << 16)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	memUpstreams.Store(addr, lis)
	t.Cleanup(func() {
		memUpstreams.Delete(addr)
		_ = srv.Close()
		<-served
	})
	return addr
}

// dialUpstream reaches a memBackend by its address, anything else over TCP.
func dialUpstream(ctx context.Context, network, addr string) (net.Conn, error) {
	if lis, ok := memUpstreams.Load(addr); ok {
		return lis.(*bufconn.Listener).DialContext(ctx)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// recordingBackend answers 200 "upstream-ok" and records each request.
func recordingBackend(t *testing.T) (string, func() []upstreamSeen) {
	t.Helper()
	return recordingOn(t, backend)
}

// recordingMemBackend is recordingBackend in memory (see memBackend).
func recordingMemBackend(t *testing.T) (string, func() []upstreamSeen) {
	t.Helper()
	return recordingOn(t, memBackend)
}

func recordingOn(t *testing.T, start func(*testing.T, http.HandlerFunc) string) (string, func() []upstreamSeen) {
	t.Helper()
	var mu sync.Mutex
	var seen []upstreamSeen
	addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, upstreamSeen{
			Method: r.Method, Path: r.URL.RequestURI(), Host: r.Host,
			Header: r.Header.Clone(), Body: string(b), Trailer: r.Trailer.Clone(),
		})
		mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "upstream-ok")
	})
	return addr, func() []upstreamSeen {
		mu.Lock()
		defer mu.Unlock()
		return append([]upstreamSeen(nil), seen...)
	}
}

// recorder keeps every ProcessingRequest a fake server received.
type recorder struct {
	mu   sync.Mutex
	msgs []*extprocv3.ProcessingRequest
}

func (r *recorder) add(m *extprocv3.ProcessingRequest) {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
}

func (r *recorder) all() []*extprocv3.ProcessingRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*extprocv3.ProcessingRequest(nil), r.msgs...)
}

// shapes describes the received messages, e.g. "request_headers(eos)".
func (r *recorder) shapes() []string {
	var out []string
	for _, m := range r.all() {
		out = append(out, shape(m))
	}
	return out
}

// shape renders one message compactly: its kind, the body for body
// messages, and whether it ends the stream.
func shape(m *extprocv3.ProcessingRequest) string {
	var s string
	switch v := m.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		s = "request_headers" + eosMark(v.RequestHeaders.GetEndOfStream())
	case *extprocv3.ProcessingRequest_RequestBody:
		s = fmt.Sprintf("request_body(%q)%s", v.RequestBody.GetBody(), eosMark(v.RequestBody.GetEndOfStream()))
	case *extprocv3.ProcessingRequest_RequestTrailers:
		s = "request_trailers"
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		s = "response_headers" + eosMark(v.ResponseHeaders.GetEndOfStream())
	case *extprocv3.ProcessingRequest_ResponseBody:
		s = fmt.Sprintf("response_body(%q)%s", v.ResponseBody.GetBody(), eosMark(v.ResponseBody.GetEndOfStream()))
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		s = "response_trailers"
	default:
		s = "unknown"
	}
	return s
}

func eosMark(eos bool) string {
	if eos {
		return "+eos"
	}
	return ""
}

// serveAll answers every message with a plain CONTINUE of the matching kind,
// routing the request headers (or body, in BUFFERED mode, if route is
// given) to route. It records what it receives and returns when the stream
// ends.
func serveAll(rec *recorder, route string) processFunc {
	return func(s stream) error {
		for {
			m, err := s.Recv()
			if err != nil {
				return nil
			}
			if rec != nil {
				rec.add(m)
			}
			if err := s.Send(continueFor(m, route)); err != nil {
				return nil
			}
		}
	}
}

// continueFor returns the CONTINUE reply for m; request headers also carry
// the routing header when route is not empty.
func continueFor(m *extprocv3.ProcessingRequest, route string) *extprocv3.ProcessingResponse {
	switch m.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		if route == "" {
			return headersReply()
		}
		return headersReply(setHeader(DefaultDestinationHeader, route))
	case *extprocv3.ProcessingRequest_RequestBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
	}
	return &extprocv3.ProcessingResponse{}
}

// setHeader is a well-formed set: raw_value and an explicit append=false.
func setHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
		Append: wrapperspb.Bool(false), //nolint:staticcheck // ext_proc honours only the deprecated append flag
	}
}

// headersReply is a request_headers reply with the given set mutations.
func headersReply(set ...*corev3.HeaderValueOption) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set},
		}},
	}}
}

// override is a bare override_message_timeout message.
func override(d time.Duration) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(d)}
}

// Body send modes, for brevity.
const (
	bodyNone       = extprocfilterv3.ProcessingMode_NONE
	bodyStreamed   = extprocfilterv3.ProcessingMode_STREAMED
	bodyBuffered   = extprocfilterv3.ProcessingMode_BUFFERED
	bodyFullDuplex = extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	sendMode       = extprocfilterv3.ProcessingMode_SEND
)

// mode builds a processing mode: request headers SEND, trailers SKIP, the
// given body modes, and response headers SEND or SKIP.
func mode(reqBody extprocfilterv3.ProcessingMode_BodySendMode, respHeaders bool,
	respBody extprocfilterv3.ProcessingMode_BodySendMode) *extprocfilterv3.ProcessingMode {
	m := &extprocfilterv3.ProcessingMode{
		RequestHeaderMode:   extprocfilterv3.ProcessingMode_SEND,
		ResponseHeaderMode:  extprocfilterv3.ProcessingMode_SKIP,
		RequestBodyMode:     reqBody,
		ResponseBodyMode:    respBody,
		RequestTrailerMode:  extprocfilterv3.ProcessingMode_SKIP,
		ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
	}
	if respHeaders {
		m.ResponseHeaderMode = extprocfilterv3.ProcessingMode_SEND
	}
	return m
}

// headersOnly is the project's shipped configuration: request headers SEND,
// everything else SKIP or NONE.
func headersOnly() Config {
	return Config{Mode: mode(bodyNone, false, bodyNone)}
}

// wantStatus fails the test unless resp has the status.
func wantStatus(t *testing.T, resp *Response, err error, status int) {
	t.Helper()
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if resp.Status != status {
		t.Fatalf("status = %d, want %d (details %q, body %q)", resp.Status, status, resp.Details, resp.Body)
	}
}

// inBubble runs a subtest in a testing/synctest bubble (see memBackend).
func inBubble(f func(t *testing.T)) func(t *testing.T) {
	return func(t *testing.T) { synctest.Test(t, f) }
}

// waitFor waits for ch or fails after a generous deadline.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// endOf classifies how a server saw its stream end: "eof" for a half-close,
// "cancelled" for a reset.
func endOf(s stream, err error) string {
	switch {
	case errors.Is(err, io.EOF):
		return "eof"
	case s.Context().Err() != nil:
		return "cancelled"
	case err != nil && strings.Contains(err.Error(), "canceled"):
		return "cancelled"
	}
	return fmt.Sprintf("other: %v", err)
}
