package envoysim

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
)

// Request is one downstream HTTP request.
type Request struct {
	// Method defaults to GET.
	Method string
	// Path is the request target (":path"), including any query. Defaults
	// to "/".
	Path string
	// Host is ":authority". Empty means Header's Host, else "localhost".
	Host string
	// Scheme is ":scheme" and x-forwarded-proto. Defaults to "http".
	Scheme string
	// Header holds the client's headers. Keys are lower-cased on the way to
	// the ext_proc server; hop-by-hop headers are dropped. A client
	// x-request-id is kept, otherwise one is generated. Add content-length
	// yourself to mirror an HTTP/1 client.
	Header http.Header
	// Body is the request body. Nil means no body: request_headers carry
	// end_of_stream=true and no body message is ever sent. A non-nil empty
	// slice is a body that turned out empty (an HTTP/2 client sending an
	// empty DATA frame): in BUFFERED and STREAMED mode the server gets one
	// request_body{body: "", end_of_stream: true}.
	Body []byte
	// Trailer holds request trailers; it needs a non-nil Body.
	Trailer http.Header
	// RemoteAddr is the client's address, "IP:port", used for the
	// source.address attribute. Defaults to "127.0.0.1:40000".
	RemoteAddr string
	// LocalAddr is the listener address for destination.* attributes.
	// Defaults to "127.0.0.1:10000".
	LocalAddr string
	// MetadataContext is the request's filter metadata that Envoy forwards
	// to the server in metadata_context of every message
	// (metadata_options.forwarding_namespaces), by namespace; a gateway
	// puts the endpoint picker's subset hint (envoy.lb.subset_hint) here.
	// Nil sends none.
	MetadataContext map[string]*structpb.Struct
	// Close overrides Config.Close for this request.
	Close CloseStyle
	// DisconnectAt, if set, is called at every Stage; returning true makes
	// the client disconnect at that point, exactly as if its context ended
	// there. Use it to reset or half-close a stream at a precise moment.
	DisconnectAt func(Stage) bool
}

// Stage is a point in a request's life where DisconnectAt is consulted.
type Stage int

const (
	// StageRequestHeadersSent: request_headers was handed to the side
	// stream; the server may now hold the request.
	StageRequestHeadersSent Stage = iota + 1
	// StageRequestBodySent: a request_body message was handed to the side
	// stream.
	StageRequestBodySent
	// StageUpstreamRequest: the request phase is over and the request is
	// about to be forwarded to the chosen endpoint.
	StageUpstreamRequest
	// StageResponseHeaders: the upstream's response headers arrived, before
	// any response processing.
	StageResponseHeaders
	// StageResponseBody: a response body chunk was delivered to the client.
	StageResponseBody
	// StageResponseCommitted: the response headers reached the client.
	StageResponseCommitted
)

// String returns the stage's name.
func (s Stage) String() string {
	switch s {
	case StageRequestHeadersSent:
		return "request-headers-sent"
	case StageRequestBodySent:
		return "request-body-sent"
	case StageUpstreamRequest:
		return "upstream-request"
	case StageResponseHeaders:
		return "response-headers"
	case StageResponseBody:
		return "response-body"
	case StageResponseCommitted:
		return "response-committed"
	}
	return fmt.Sprintf("Stage(%d)", int(s))
}

// validate checks what Do cannot simulate.
func (r *Request) validate() error {
	if r.Path != "" && !strings.HasPrefix(r.Path, "/") && r.Path != "*" {
		return fmt.Errorf("envoysim: request path %q must start with /", r.Path)
	}
	if r.Method != "" && !validHeaderName(r.Method) {
		return fmt.Errorf("envoysim: invalid request method %q", r.Method)
	}
	if len(r.Trailer) > 0 && r.Body == nil {
		return fmt.Errorf("envoysim: request trailers need a body")
	}
	for _, h := range []http.Header{r.Header, r.Trailer} {
		for k, vs := range h {
			if !validHeaderName(k) || strings.HasPrefix(k, ":") {
				return fmt.Errorf("envoysim: invalid header name %q", k)
			}
			for _, v := range vs {
				if !validHeaderValue(v) {
					return fmt.Errorf("envoysim: invalid value for header %q", k)
				}
			}
		}
	}
	if r.Close < CloseDefault || r.Close > CloseGraceful {
		return fmt.Errorf("envoysim: unknown close style %d", int(r.Close))
	}
	return nil
}

// Response is what the downstream client sees, plus what the simulator knows
// about how it came to be.
type Response struct {
	// Status is the HTTP status. It is 0 only when Reset is true and no
	// headers reached the client.
	Status int
	// Header holds the response headers with canonical keys.
	Header http.Header
	// Body is the response body (partial when Reset).
	Body []byte
	// Trailer holds the response trailers, if any.
	Trailer http.Header
	// Reset is true when the stream was reset after the response had
	// started (or failed upstream after its headers arrived): the client saw
	// a truncated response.
	Reset bool
	// LocalReply is true when the simulated Envoy, not an upstream, produced
	// the response: an ImmediateResponse, an ext_proc error or a routing
	// failure.
	LocalReply bool
	// Details is Envoy's response code details for a local reply, for
	// example "ext_proc_error_per-message_timeout_exceeded".
	Details string
	// Endpoint is the upstream "IP:port" the request was forwarded to, or
	// empty.
	Endpoint string
	// Upstream is the request as forwarded, after every mutation, or nil.
	Upstream *UpstreamRequest
	// Metadata is the dynamic metadata accepted from the server, by
	// namespace.
	Metadata map[string]*structpb.Struct
	// Timings measure the request from the start of Do.
	Timings Timings
}

// UpstreamRequest is the request the simulated router sent to the endpoint.
type UpstreamRequest struct {
	Method    string
	Path      string
	Authority string
	Header    http.Header
	Body      []byte
	Trailer   http.Header
}

// Timings are measured from the start of the request.
type Timings struct {
	// Decision is when request processing ended: the routing decision, or
	// the local reply that replaced it.
	Decision time.Duration
	// ResponseHeaders is when the response headers reached the client.
	ResponseHeaders time.Duration
	// FirstByte is when the first response body byte reached the client.
	FirstByte time.Duration
	// Total is when the exchange ended.
	Total time.Duration
}

// sink is the downstream connection: what the client receives.
type sink interface {
	writeHeader(status int, h http.Header)
	write(p []byte)
	finish(trailer http.Header)
}

// collector is the sink of Do: it keeps the response in memory.
type collector struct {
	status  int
	header  http.Header
	body    bytes.Buffer
	trailer http.Header
}

func (c *collector) writeHeader(status int, h http.Header) { c.status, c.header = status, h }
func (c *collector) write(p []byte)                        { c.body.Write(p) }
func (c *collector) finish(trailer http.Header)            { c.trailer = trailer }
