package envoysim

import (
	"bytes"
	"net/http"
	"strconv"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// responsePhase is where the response direction stands.
type responsePhase int

const (
	phaseNotStarted   responsePhase = iota
	phaseWaitHeaders                // response_headers outstanding; data is held
	phaseBuffering                  // BUFFERED: collecting the body
	phaseBufferedSent               // BUFFERED: the body message is outstanding
	phaseStreaming                  // STREAMED: chunks sent as they arrive
	phaseTrailers                   // response_trailers outstanding
	phasePassThrough                // no (more) processing: data flows to the client
)

// encoder is the response direction (Envoy's EncodingProcessorState).
type encoder struct {
	headerSend  bool
	bodyMode    extprocfilterv3.ProcessingMode_BodySendMode
	trailerSend bool
	early       bool // STREAMED with send_body_without_waiting_for_header_response

	phase    responsePhase
	headers  *headerMap
	noBody   bool     // the response headers ended the stream
	held     [][]byte // data that arrived while headers or body were held
	heldEOS  bool     // the last held chunk ended the stream
	ended    bool     // the upstream body is complete
	trailers *headerMap
	pending  []chunk // STREAMED chunks not yet answered
	eosSent  bool    // a body message with end_of_stream went out
	replaced bool    // CONTINUE_AND_REPLACE: the upstream body is dropped
}

// noExternalProcess reports whether the response direction sends nothing.
func (e *encoder) noExternalProcess() bool {
	return !e.headerSend && e.bodyMode == extprocfilterv3.ProcessingMode_NONE && !e.trailerSend
}

// expectsBody reports whether a response_body reply is outstanding.
func (e *encoder) expectsBody() bool {
	return e.phase == phaseBufferedSent || (e.phase == phaseStreaming && len(e.pending) > 0)
}

// mutationOptions: content-length may not be set when the body may change
// and the headers cannot follow (STREAMED, or BUFFERED with headers skipped).
func (e *encoder) mutationOptions() mutationOptions {
	return mutationOptions{skipContentLength: e.dropsContentLength()}
}

func (e *encoder) dropsContentLength() bool {
	return e.bodyMode == extprocfilterv3.ProcessingMode_STREAMED ||
		(e.bodyMode == extprocfilterv3.ProcessingMode_BUFFERED && !e.headerSend)
}

// responseHeaderMap converts upstream response headers for ext_proc:
// ":status" first, then lower-case keys without hop-by-hop headers.
func responseHeaderMap(resp *http.Response) *headerMap {
	m := &headerMap{}
	m.add(":status", strconv.Itoa(resp.StatusCode))
	m.addHTTP(resp.Header)
	return m
}

// encodeHeaders is the filter's encodeHeaders for the upstream response.
func (x *exchange) encodeHeaders(h *headerMap, noBody bool) {
	e := &x.enc
	e.headers, e.noBody = h, noBody
	e.ended = noBody
	if x.hook(StageResponseHeaders) {
		return
	}
	if x.complete || !e.headerSend {
		x.continueResponseHeaders()
		return
	}
	e.phase = phaseWaitHeaders
	x.send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers:     h.proto(),
			EndOfStream: noBody,
		}},
	}, true)
}

func (x *exchange) onResponseHeadersResponse(hr *extprocv3.HeadersResponse) error {
	e := &x.enc
	cr := hr.GetResponse()
	if m := cr.GetHeaderMutation(); m != nil {
		if err := x.sim.applyHeaderMutation(m, e.headers, e.mutationOptions()); err != nil {
			return err
		}
	}
	x.finishCall()
	if cr.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE {
		x.replaceResponse(cr.GetBodyMutation())
		return nil
	}
	x.continueResponseHeaders()
	return nil
}

// replaceResponse applies CONTINUE_AND_REPLACE: no more messages in this
// direction and, with a body mutation, the headers go out with the
// replacement body while the upstream body and trailers are dropped.
func (x *exchange) replaceResponse(bm *extprocv3.BodyMutation) {
	e := &x.enc
	e.bodyMode = extprocfilterv3.ProcessingMode_NONE
	e.trailerSend = false
	if bm == nil {
		x.continueResponseHeaders()
		return
	}
	x.complete = true
	x.closeStream()
	e.replaced = true
	e.held = nil
	e.phase = phasePassThrough
	e.headers.remove("content-length")
	x.commit(e.headers)
	if x.deliver(applyBodyMutation(bm, nil)) && e.ended {
		x.finishResponse(nil)
	}
}

// continueResponseHeaders lets the headers go on after their reply (or
// without one), choosing how the body will flow.
func (x *exchange) continueResponseHeaders() {
	e := &x.enc
	if !x.complete && (e.noBody ||
		(e.bodyMode == extprocfilterv3.ProcessingMode_NONE && !e.trailerSend)) {
		// Nothing more will be sent in this direction.
		x.lastReplyDone()
	}
	active := !x.complete && !e.noBody
	switch {
	case active && e.bodyMode == extprocfilterv3.ProcessingMode_BUFFERED:
		e.phase = phaseBuffering
		if !e.headerSend {
			// Skipped headers are not held: they go out now, without a
			// content-length since the body may change.
			e.headers.remove("content-length")
			x.commit(e.headers)
		}
		if e.ended {
			x.sendBufferedResponseBody()
		}
	case active && e.bodyMode == extprocfilterv3.ProcessingMode_STREAMED:
		e.phase = phaseStreaming
		e.headers.remove("content-length")
		x.commit(e.headers)
		if len(e.held) > 0 {
			// Data that arrived while the headers were held goes as one chunk.
			data := bytes.Join(e.held, nil)
			e.held = nil
			x.sendResponseChunk(data, e.heldEOS)
		}
		x.streamingProgress()
	default:
		e.phase = phasePassThrough
		x.commit(e.headers)
		x.flushHeld()
	}
}

// flushHeld delivers held data unmodified and, if the upstream is done,
// ends the response.
func (x *exchange) flushHeld() {
	e := &x.enc
	held := e.held
	e.held = nil
	for _, p := range held {
		if !x.deliver(p) {
			return
		}
	}
	if e.ended {
		x.passThroughEnd()
	}
}

// encodeData is the filter's encodeData for one upstream chunk; eos marks
// the chunk that completes a content-length body.
func (x *exchange) encodeData(p []byte, eos bool) {
	e := &x.enc
	if eos {
		e.ended = true
	}
	switch e.phase {
	case phaseWaitHeaders, phaseBufferedSent:
		if e.phase == phaseWaitHeaders && e.early {
			// The chunk goes to the server now; it is held in Envoy until
			// answered, and restarts the message timer.
			x.sendResponseChunk(p, eos)
			return
		}
		e.held = append(e.held, p)
		e.heldEOS = eos
	case phaseBuffering:
		e.held = append(e.held, p)
		if eos {
			x.sendBufferedResponseBody()
		}
	case phaseStreaming:
		x.sendResponseChunk(p, eos)
	case phasePassThrough:
		if e.replaced {
			if eos {
				x.finishResponse(nil)
			}
			return
		}
		if x.deliver(p) && eos {
			x.passThroughEnd()
		}
	case phaseNotStarted, phaseTrailers:
		// No data follows trailers, and none precedes headers.
	}
}

// encodeEnd is the end of the upstream body, with its trailers if any.
func (x *exchange) encodeEnd(trailers *headerMap) {
	e := &x.enc
	e.ended = true
	e.trailers = trailers
	switch e.phase {
	case phaseBuffering:
		x.sendBufferedResponseBody()
	case phaseStreaming:
		x.streamingProgress()
	case phasePassThrough:
		if e.replaced {
			x.finishResponse(nil)
			return
		}
		x.passThroughEnd()
	case phaseWaitHeaders:
		if e.early && !x.complete && trailers == nil && !e.eosSent {
			x.sendResponseChunk([]byte{}, true) // the codec's empty end chunk
		}
	case phaseNotStarted, phaseBufferedSent, phaseTrailers:
		// Handled when the outstanding reply arrives.
	}
}

// passThroughEnd ends a response whose body was not processed: trailers go
// to the server if it wants them, else the response is complete.
func (x *exchange) passThroughEnd() {
	e := &x.enc
	if !x.complete && e.trailerSend && e.trailers != nil {
		x.sendResponseTrailers()
		return
	}
	x.finishResponse(e.trailers)
}

func (x *exchange) sendResponseChunk(p []byte, eos bool) {
	e := &x.enc
	e.pending = append(e.pending, chunk{data: p, eos: eos})
	e.eosSent = e.eosSent || eos
	x.send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: p, EndOfStream: eos}},
	}, true)
}

// streamingProgress moves a STREAMED response on once the upstream is done
// and every chunk is answered: trailers, a final empty end_of_stream chunk
// (what Envoy sends at the end of a chunked body), or the end.
func (x *exchange) streamingProgress() {
	e := &x.enc
	if len(e.pending) > 0 || !e.ended || x.finished {
		return
	}
	switch {
	case e.eosSent:
		x.finishResponse(nil)
	case e.trailers != nil && e.trailerSend:
		x.sendResponseTrailers()
	case e.trailers != nil:
		x.finishResponse(e.trailers)
	default:
		x.sendResponseChunk([]byte{}, true)
	}
}

// sendBufferedResponseBody sends the whole BUFFERED body in one message.
func (x *exchange) sendBufferedResponseBody() {
	e := &x.enc
	e.phase = phaseBufferedSent
	body := bytes.Join(e.held, nil)
	if body == nil {
		body = []byte{}
	}
	e.held = [][]byte{body}
	x.send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}},
	}, true)
}

func (x *exchange) sendResponseTrailers() {
	x.enc.phase = phaseTrailers
	x.send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{Trailers: x.enc.trailers.proto()}},
	}, true)
}

func (x *exchange) onResponseBodyResponse(br *extprocv3.BodyResponse) error {
	e := &x.enc
	cr := br.GetResponse()
	if e.phase == phaseBufferedSent {
		body := e.held[0]
		if !x.committed {
			// The headers are still held, so a header mutation here applies.
			if m := cr.GetHeaderMutation(); m != nil {
				if err := x.sim.applyHeaderMutation(m, e.headers, e.mutationOptions()); err != nil {
					return err
				}
			}
			if bm := cr.GetBodyMutation(); bm != nil {
				if err := checkContentLength(e.headers, bm); err != nil {
					return err
				}
			}
		}
		if bm := cr.GetBodyMutation(); bm != nil {
			body = applyBodyMutation(bm, body)
		}
		x.finishCall()
		e.held = nil
		e.phase = phasePassThrough
		x.commit(e.headers)
		if x.deliver(body) {
			x.passThroughEnd()
		}
		return nil
	}
	// STREAMED: answer for the oldest chunk; header mutations are ignored.
	c := e.pending[0]
	e.pending = e.pending[1:]
	if bm := cr.GetBodyMutation(); bm != nil {
		c.data = applyBodyMutation(bm, c.data)
	}
	x.finishCall()
	if x.deliver(c.data) {
		x.streamingProgress()
	}
	return nil
}

func (x *exchange) onResponseTrailersResponse(tr *extprocv3.TrailersResponse) error {
	e := &x.enc
	if m := tr.GetHeaderMutation(); m != nil {
		if err := x.sim.applyHeaderMutation(m, e.trailers, mutationOptions{}); err != nil {
			return err
		}
	}
	x.finishCall()
	e.phase = phasePassThrough
	x.finishResponse(e.trailers)
	return nil
}

// passThroughResponse stops processing the response: whatever was held or
// not yet answered goes to the client unmodified.
func (x *exchange) passThroughResponse() {
	e := &x.enc
	var held [][]byte
	for _, c := range e.pending {
		held = append(held, c.data)
	}
	e.held = append(held, e.held...)
	e.pending = nil
	e.phase = phasePassThrough
	if e.headers == nil {
		return // the upstream has not answered yet
	}
	x.commit(e.headers)
	x.flushHeld()
}

// finishResponse completes the response.
func (x *exchange) finishResponse(trailers *headerMap) {
	if x.finished {
		return
	}
	var t http.Header
	if trailers != nil {
		t = trailers.httpHeader()
	}
	x.out.finish(t)
	x.finished = true
}
