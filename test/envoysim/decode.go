package envoysim

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// attributesKey is the key of ProcessingRequest.attributes.
const attributesKey = "envoy.filters.http.ext_proc"

// decoder is the request direction (Envoy's DecodingProcessorState).
type decoder struct {
	bodyMode    extprocfilterv3.ProcessingMode_BodySendMode
	trailerSend bool
	fd          bool // FULL_DUPLEX_STREAMED: no timers, body streamed back
	early       bool // STREAMED with send_body_without_waiting_for_header_response

	cb       callbackState
	headers  *headerMap
	body     []byte // nil: no body
	trailers *headerMap

	streaming bool    // body chunks went out in STREAMED or FULL_DUPLEX mode
	pending   []chunk // STREAMED chunks not yet answered
	out       []byte  // the processed (STREAMED) or streamed-back (FULL_DUPLEX) body

	// FULL_DUPLEX_STREAMED progress.
	headersReplied  bool
	bodyDone        bool
	trailersSent    bool
	trailersReplied bool

	done bool
}

// expects reports whether a reply of state cb is outstanding.
func (d *decoder) expects(cb callbackState) bool {
	if !d.fd {
		return d.cb == cb
	}
	switch cb {
	case cbHeaders:
		return !d.headersReplied
	case cbTrailers:
		return d.headersReplied && d.trailersSent && !d.trailersReplied
	case cbIdle, cbBufferedBody, cbStreamedBody:
	}
	return false
}

// expectsBody reports whether a request_body reply is outstanding. In
// FULL_DUPLEX mode body replies follow the headers reply until the streamed
// body ends.
func (d *decoder) expectsBody() bool {
	if d.fd {
		return d.headersReplied && d.body != nil && !d.bodyDone && !d.trailersReplied
	}
	return d.cb == cbBufferedBody || (d.cb == cbStreamedBody && len(d.pending) > 0)
}

// finalBody is the body to forward if processing stops now: what was
// processed plus what was sent and not answered.
func (d *decoder) finalBody() []byte {
	if !d.streaming {
		return d.body
	}
	b := append([]byte{}, d.out...)
	for _, c := range d.pending {
		b = append(b, c.data...)
	}
	return b
}

// downstreamBody is the body as the codec hands it to the filter chain. An
// HTTP/1 request with Content-Length: 0 is dispatched as headers with
// end_of_stream (http1/codec_impl.cc:1240-1262): no body at all.
func downstreamBody(r *Request) []byte {
	if len(r.Body) == 0 && len(r.Trailer) == 0 && strings.TrimSpace(headerValue(r.Header, "content-length")) == "0" {
		return nil
	}
	return r.Body
}

// requestHeaderMap builds the headers Envoy's connection manager hands to
// the filter chain: pseudo-headers first, then the client's headers, then
// x-forwarded-proto and x-request-id.
func requestHeaderMap(r *Request) *headerMap {
	authority := r.Host
	if authority == "" {
		authority = headerValue(r.Header, "host")
	}
	scheme := orDefault(r.Scheme, "http")
	m := &headerMap{}
	m.add(":authority", orDefault(authority, "localhost"))
	m.add(":path", orDefault(r.Path, "/"))
	m.add(":method", orDefault(r.Method, http.MethodGet))
	m.add(":scheme", scheme)
	m.addHTTP(r.Header, "host", "x-forwarded-proto", "x-request-id")
	m.add("x-forwarded-proto", scheme)
	m.add("x-request-id", orDefault(headerValue(r.Header, "x-request-id"), newRequestID()))
	return m
}

// headerValue returns the first value of key in h, matching keys
// case-insensitively.
func headerValue(h http.Header, key string) string {
	for k, vs := range h {
		if strings.EqualFold(k, key) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}

// newRequestID returns a random UUID, as Envoy generates for x-request-id.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// decodeHeaders is the filter's decodeHeaders: open the stream, send
// request_headers and, in FULL_DUPLEX mode, the body right behind them.
func (x *exchange) decodeHeaders() {
	if !x.openStream() {
		return
	}
	d := &x.dec
	d.cb = cbHeaders
	x.sendRequest(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers:     d.headers.proto(),
			EndOfStream: d.body == nil,
		}},
	})
	if x.hook(StageRequestHeadersSent) {
		return
	}
	if d.bodyMode == extprocfilterv3.ProcessingMode_BUFFERED && x.cfg.bufferLimit > 0 && len(d.body) > x.cfg.bufferLimit {
		// The body arrives while the filter buffers it (StopIterationAndBuffer)
		// and overflows the limit: the filter manager answers 413 itself
		// (filter_manager.cc:569-576). Streaming modes only apply back-pressure.
		x.sim.stats.inc(statRequestTooLarge)
		x.envoyReply(http.StatusRequestEntityTooLarge, []byte("Payload Too Large"), "request_payload_too_large")
		return
	}
	if d.early && d.body != nil {
		// The chunks go out behind the headers, which stay outstanding.
		x.sendRequestChunks()
		return
	}
	if !d.fd || d.body == nil {
		return
	}
	if !x.sendRequestChunks() {
		return
	}
	if d.trailers != nil {
		d.trailersSent = true
		x.sendRequestTrailers()
	}
}

// sendRequest sends a request-direction message: attributes go on the first
// one, and the timer runs unless the direction is FULL_DUPLEX_STREAMED.
func (x *exchange) sendRequest(m *extprocv3.ProcessingRequest) {
	if !x.sentAttribs && len(x.cfg.attributes) > 0 {
		m.Attributes = map[string]*structpb.Struct{attributesKey: x.attributes()}
		x.sentAttribs = true
	}
	x.send(m, !x.dec.fd)
}

// sendRequestChunks sends the body as STREAMED or FULL_DUPLEX chunks without
// waiting for answers, and reports whether the exchange goes on.
func (x *exchange) sendRequestChunks() bool {
	d := &x.dec
	d.streaming = true
	if !d.fd && d.cb != cbHeaders {
		d.cb = cbStreamedBody
	}
	chunks := split(d.body, x.cfg.chunkSize)
	for i, c := range chunks {
		eos := i == len(chunks)-1 && d.trailers == nil
		if !d.fd {
			d.pending = append(d.pending, chunk{data: c, eos: eos})
		}
		x.sendRequest(&extprocv3.ProcessingRequest{
			Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: c, EndOfStream: eos}},
		})
		if x.hook(StageRequestBodySent) {
			return false
		}
	}
	return true
}

func (x *exchange) sendRequestTrailers() {
	if !x.dec.fd {
		x.dec.cb = cbTrailers
	}
	x.sendRequest(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{Trailers: x.dec.trailers.proto()}},
	})
}

// split cuts b into chunks of at most size bytes (size 0: one chunk). An
// empty body is one empty chunk.
func split(b []byte, size int) [][]byte {
	if size <= 0 || len(b) <= size {
		return [][]byte{b}
	}
	var out [][]byte
	for len(b) > size {
		out = append(out, b[:size])
		b = b[size:]
	}
	return append(out, b)
}

// requestMutationOptions: content-length may not be set when the body may
// change size on the way (STREAMED, FULL_DUPLEX_STREAMED).
func (x *exchange) requestMutationOptions(replacing bool) mutationOptions {
	m := x.dec.bodyMode
	return mutationOptions{
		replacing:         replacing,
		skipContentLength: m == extprocfilterv3.ProcessingMode_STREAMED || m == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
	}
}

// clearRouteCache applies the clear_route_cache bit of a request-direction
// reply: without a header mutation in the same reply it is ignored. Route
// selection itself is not modelled.
func (x *exchange) clearRouteCache(cr *extprocv3.CommonResponse) {
	if cr.GetClearRouteCache() && cr.GetHeaderMutation() == nil {
		x.sim.stats.inc(statClearRouteCacheIgnored)
	}
}

func (x *exchange) onRequestHeadersResponse(hr *extprocv3.HeadersResponse) error {
	d := &x.dec
	cr := hr.GetResponse()
	replace := cr.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE
	if m := cr.GetHeaderMutation(); m != nil {
		if err := x.sim.applyHeaderMutation(m, d.headers, x.requestMutationOptions(replace)); err != nil {
			return err
		}
	}
	x.clearRouteCache(cr)
	x.finishCall()
	if d.fd {
		d.headersReplied = true
		x.maybeFinishFullDuplex()
		return nil
	}
	d.cb = cbIdle
	if replace {
		// The reply replaces the whole message: the body (if a mutation is
		// given) and no further messages in this direction.
		if bm := cr.GetBodyMutation(); bm != nil {
			d.headers.remove("content-length")
			d.body = applyBodyMutation(bm, d.body)
		}
		d.bodyMode = extprocfilterv3.ProcessingMode_NONE
		d.trailerSend = false
		x.requestDone()
		return nil
	}
	switch {
	case d.body == nil:
		x.requestDone()
	case d.bodyMode == extprocfilterv3.ProcessingMode_BUFFERED:
		d.cb = cbBufferedBody
		x.sendRequest(&extprocv3.ProcessingRequest{
			Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: d.body, EndOfStream: d.trailers == nil}},
		})
		x.hook(StageRequestBodySent)
	case d.bodyMode == extprocfilterv3.ProcessingMode_STREAMED && d.streaming:
		d.cb = cbStreamedBody // sent early; their replies follow
	case d.bodyMode == extprocfilterv3.ProcessingMode_STREAMED:
		x.sendRequestChunks()
	default:
		x.afterRequestBody()
	}
	return nil
}

func (x *exchange) onRequestBodyResponse(br *extprocv3.BodyResponse) error {
	d := &x.dec
	cr := br.GetResponse()
	switch {
	case d.fd:
		sr := cr.GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			return rejectf("full-duplex body response without streamed_response")
		}
		d.out = append(d.out, sr.GetBody()...)
		d.bodyDone = sr.GetEndOfStream()
		x.clearRouteCache(cr)
		x.maybeFinishFullDuplex()
	case d.cb == cbBufferedBody:
		// Headers are still held, so a header mutation here applies.
		if m := cr.GetHeaderMutation(); m != nil {
			if err := x.sim.applyHeaderMutation(m, d.headers, x.requestMutationOptions(false)); err != nil {
				return err
			}
		}
		if bm := cr.GetBodyMutation(); bm != nil {
			if err := checkContentLength(d.headers, bm); err != nil {
				return err
			}
			d.body = applyBodyMutation(bm, d.body)
		}
		x.finishCall()
		x.clearRouteCache(cr)
		d.cb = cbIdle
		x.afterRequestBody()
	default: // STREAMED: header mutations are ignored here.
		c := d.pending[0]
		d.pending = d.pending[1:]
		if bm := cr.GetBodyMutation(); bm != nil {
			c.data = applyBodyMutation(bm, c.data)
		}
		d.out = append(d.out, c.data...)
		x.finishCall()
		x.clearRouteCache(cr)
		if len(d.pending) == 0 {
			d.cb = cbIdle
			d.body = d.out
			d.streaming = false
			x.afterRequestBody()
		}
	}
	return nil
}

// afterRequestBody sends the trailers if the server wants them, or ends
// the request phase.
func (x *exchange) afterRequestBody() {
	if x.dec.trailerSend && x.dec.trailers != nil {
		x.sendRequestTrailers()
		return
	}
	x.requestDone()
}

func (x *exchange) onRequestTrailersResponse(tr *extprocv3.TrailersResponse) error {
	d := &x.dec
	if m := tr.GetHeaderMutation(); m != nil {
		if err := x.sim.applyHeaderMutation(m, d.trailers, mutationOptions{}); err != nil {
			return err
		}
	}
	x.finishCall()
	if d.fd {
		d.trailersReplied = true
		x.maybeFinishFullDuplex()
		return nil
	}
	d.cb = cbIdle
	x.requestDone()
	return nil
}

// maybeFinishFullDuplex ends the FULL_DUPLEX request phase once the headers
// are answered, the body has been streamed back (end_of_stream, or the
// trailers reply) and the trailers, if sent, are answered.
func (x *exchange) maybeFinishFullDuplex() {
	d := &x.dec
	if !d.headersReplied || (d.trailersSent && !d.trailersReplied) {
		return
	}
	if d.body != nil && !d.bodyDone && !d.trailersReplied {
		return
	}
	if d.body != nil {
		d.body = d.out
	}
	d.streaming = false
	x.requestDone()
}

// requestDone ends the request phase: the stream closes if the response
// needs no processing, then the request is routed.
func (x *exchange) requestDone() {
	d := &x.dec
	d.done = true
	d.cb = cbIdle
	x.markDecision()
	if !x.complete && x.enc.noExternalProcess() {
		x.lastReplyDone()
	}
	x.route()
}

// attributes evaluates the configured request attributes.
func (x *exchange) attributes() *structpb.Struct {
	h := x.dec.headers
	get := func(k string) string { v, _ := h.get(k); return v }
	path := get(":path")
	urlPath, query, _ := strings.Cut(path, "?")
	remote := orDefault(x.req.RemoteAddr, "127.0.0.1:40000")
	local := orDefault(x.req.LocalAddr, "127.0.0.1:10000")
	fields := map[string]*structpb.Value{}
	for _, a := range x.cfg.attributes {
		var v *structpb.Value
		switch a {
		case "source.address":
			v = structpb.NewStringValue(remote)
		case "source.port":
			v = portValue(remote)
		case "destination.address":
			v = structpb.NewStringValue(local)
		case "destination.port":
			v = portValue(local)
		case "request.path":
			v = structpb.NewStringValue(path)
		case "request.url_path":
			v = structpb.NewStringValue(urlPath)
		case "request.query":
			v = structpb.NewStringValue(query)
		case "request.host":
			v = structpb.NewStringValue(get(":authority"))
		case "request.scheme":
			v = structpb.NewStringValue(get(":scheme"))
		case "request.method":
			v = structpb.NewStringValue(get(":method"))
		case "request.id":
			v = structpb.NewStringValue(get("x-request-id"))
		case "request.protocol":
			v = structpb.NewStringValue("HTTP/1.1")
		}
		if v != nil {
			fields[a] = v
		}
	}
	return &structpb.Struct{Fields: fields}
}

// portValue returns the port of addr as a number, or null.
func portValue(addr string) *structpb.Value {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return structpb.NewNullValue()
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return structpb.NewNullValue()
	}
	return structpb.NewNumberValue(float64(n))
}
