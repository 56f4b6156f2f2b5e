package envoysim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// callbackState is what a direction waits for from the server, after
// Envoy's ProcessorState::CallbackState.
type callbackState int

const (
	cbIdle callbackState = iota
	cbHeaders
	cbBufferedBody
	cbStreamedBody
	cbTrailers
)

// chunk is a body chunk sent in STREAMED or FULL_DUPLEX_STREAMED mode and not
// yet answered.
type chunk struct {
	data []byte
	eos  bool
}

// errHookDisconnect is the cause recorded when Request.DisconnectAt asks for
// a disconnect.
var errHookDisconnect = errors.New("envoysim: disconnect requested by the request's DisconnectAt")

// exchange is one HTTP request passing through the simulated filter chain.
// It is owned by one goroutine, which runs an event loop over the side
// stream, the message timer, the upstream call and the client's context,
// the way Envoy's dispatcher drives a filter.
type exchange struct {
	sim   *Sim
	cfg   *settings
	ctx   context.Context
	req   *Request
	out   sink
	style CloseStyle
	start time.Time

	ss           *sideStream // nil before the stream opens and after it closes
	streamFailed bool        // the side stream ended with a gRPC error
	complete     bool        // Envoy's processing_complete_: no more ext_proc work
	sentFirst    bool        // protocol_config goes only in the first message
	sentAttribs  bool

	timer         *time.Timer
	timerOn       bool
	overrideTaken bool // an override was accepted for the outstanding message

	// The connection manager's stream_idle_timeout and request_timeout.
	hcmTimer     *time.Timer
	hcmAt        time.Time // when hcmTimer fires; zero: stopped
	lastActivity time.Time // the last traffic to or from the client
	sentUpstream bool      // the request went upstream: request_timeout is disarmed
	envoyReplied bool      // Envoy's own local reply is under way

	dec      decoder
	enc      encoder
	metadata map[string]*structpb.Struct

	up       *upstreamCall
	endpoint string
	// retryHosts are the fallback endpoints not tried yet (Route.Fallbacks).
	retryHosts []string
	upstream   *UpstreamRequest

	committed bool // response headers reached the client
	finished  bool
	res       result
}

// result is how the exchange ended.
type result struct {
	localReply   bool
	details      string
	reset        bool
	disconnected error
	timings      Timings
}

func (s *Sim) newExchange(ctx context.Context, req *Request, out sink) *exchange {
	x := &exchange{
		sim:   s,
		cfg:   s.cfg,
		ctx:   ctx,
		req:   req,
		out:   out,
		style: orDefault(req.Close, s.cfg.closeStyle),
		start: time.Now(),
	}
	x.lastActivity = x.start
	x.dec = decoder{
		bodyMode:    s.cfg.requestBodyMode,
		trailerSend: s.cfg.requestTrailerSend,
		fd:          s.cfg.requestBodyMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		early:       s.cfg.early && s.cfg.requestBodyMode == extprocfilterv3.ProcessingMode_STREAMED,
		headers:     requestHeaderMap(req),
		body:        downstreamBody(req),
		trailers:    headerMapFromHTTP(req.Trailer),
	}
	x.enc = encoder{
		headerSend:  s.cfg.responseHeaderSend,
		bodyMode:    s.cfg.responseBodyMode,
		trailerSend: s.cfg.responseTrailerSend,
		early:       s.cfg.early && s.cfg.responseBodyMode == extprocfilterv3.ProcessingMode_STREAMED,
	}
	return x
}

// run drives the exchange to its end.
func (x *exchange) run() {
	defer x.teardown()
	x.decodeHeaders()
	for !x.finished {
		x.armHCMTimer()
		select {
		case <-x.hcmC():
			x.onHCMTimeout()
		case ev := <-x.streamEvents():
			if x.timerFired() {
				// The timer expired before this message was looked at: the
				// timeout wins, whatever the order the runtime chose.
				x.onMessageTimeout()
				if x.finished {
					break
				}
			}
			x.onStreamEvent(ev)
		case <-x.timerC():
			x.onMessageTimeout()
		case ev := <-x.upstreamEvents():
			x.onUpstreamEvent(ev)
		case <-x.ctx.Done():
			x.disconnect(context.Cause(x.ctx))
		}
	}
}

// teardown is Envoy's onDestroy: timers off, side stream closed, upstream
// call ended.
func (x *exchange) teardown() {
	if x.hcmTimer != nil {
		x.hcmTimer.Stop()
	}
	x.finishCall()
	x.closeStream()
	x.stopUpstream()
	x.res.timings.Total = time.Since(x.start)
}

func (x *exchange) streamEvents() <-chan streamEvent {
	if x.ss == nil {
		return nil
	}
	return x.ss.events
}

// timerFired reports, without blocking, whether the running timer expired.
func (x *exchange) timerFired() bool {
	if !x.timerOn {
		return false
	}
	select {
	case <-x.timer.C:
		return true
	default:
		return false
	}
}

func (x *exchange) timerC() <-chan time.Time {
	if !x.timerOn {
		return nil
	}
	return x.timer.C
}

func (x *exchange) upstreamEvents() <-chan upstreamEvent {
	if x.up == nil {
		return nil
	}
	return x.up.events
}

// hook consults Request.DisconnectAt and reports whether the exchange is
// over (it was already, or the client disconnected now).
func (x *exchange) hook(s Stage) bool {
	if x.finished {
		return true
	}
	if x.req.DisconnectAt != nil && x.req.DisconnectAt(s) {
		x.disconnect(errHookDisconnect)
	}
	return x.finished
}

// openStream opens the side stream if needed. It reports false when that
// failed; the failure has then been handled like a gRPC error.
func (x *exchange) openStream() bool {
	if x.ss != nil {
		return true
	}
	ss, err := x.sim.openStream()
	x.sim.stats.inc(statStreamsStarted)
	if err != nil {
		x.onGrpcError(err)
		return false
	}
	x.ss = ss
	return true
}

// send hands m to the side stream and, if timed, starts the message timer.
func (x *exchange) send(m *extprocv3.ProcessingRequest, timed bool) {
	if x.ss == nil {
		return
	}
	if len(x.req.MetadataContext) > 0 {
		m.MetadataContext = &corev3.Metadata{FilterMetadata: x.req.MetadataContext}
	}
	if x.cfg.reportServed && x.endpoint != "" && isResponseMessage(m) {
		fm := maps.Clone(m.GetMetadataContext().GetFilterMetadata())
		if fm == nil {
			fm = map[string]*structpb.Struct{}
		}
		fm[DefaultMetadataNamespace] = &structpb.Struct{Fields: map[string]*structpb.Value{
			servedKey: structpb.NewStringValue(x.endpoint),
		}}
		m.MetadataContext = &corev3.Metadata{FilterMetadata: fm}
	}
	if !x.sentFirst && x.cfg.omitProtocol {
		x.sentFirst = true
	}
	if !x.sentFirst {
		m.ProtocolConfig = &extprocv3.ProtocolConfiguration{
			RequestBodyMode:                         x.cfg.requestBodyMode,
			ResponseBodyMode:                        x.cfg.responseBodyMode,
			SendBodyWithoutWaitingForHeaderResponse: x.cfg.early,
		}
		x.sentFirst = true
	}
	x.ss.enqueue(m)
	x.sim.stats.inc(statStreamMsgsSent)
	if timed {
		x.startTimer(x.cfg.messageTimeout)
	}
}

// startTimer is onStartProcessorCall: a fresh timer and a fresh override
// allowance for the message just sent.
func (x *exchange) startTimer(d time.Duration) {
	if x.timer == nil {
		x.timer = time.NewTimer(d)
	} else {
		x.timer.Reset(d)
	}
	x.timerOn = true
	x.overrideTaken = false
}

// finishCall is onFinishProcessorCall: the timer stops on every answer.
func (x *exchange) finishCall() {
	if x.timer != nil {
		x.timer.Stop()
	}
	x.timerOn = false
	x.overrideTaken = false
}

// closeStream closes the side stream, if open, in the exchange's style.
func (x *exchange) closeStream() {
	if x.ss == nil {
		return
	}
	ss := x.ss
	x.ss = nil
	if !x.streamFailed {
		x.sim.stats.inc(statStreamsClosed)
	}
	x.sim.closeStream(ss, x.style)
}

func (x *exchange) onStreamEvent(ev streamEvent) {
	if ev.err == nil {
		x.onMessage(ev.msg)
		return
	}
	if errors.Is(ev.err, io.EOF) {
		x.onGrpcClose()
		return
	}
	x.onGrpcError(ev.err)
}

// onMessage is Envoy's onReceiveMessage.
func (x *exchange) onMessage(m *extprocv3.ProcessingResponse) {
	if x.complete {
		return
	}
	if d := m.GetOverrideMessageTimeout(); d != nil {
		// Every other field of an override message is ignored.
		x.onNewTimeout(d)
		return
	}
	var err error
	switch r := m.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		if !x.dec.expects(cbHeaders) {
			x.onSpurious("spurious message")
			return
		}
		if x.requestAborted() {
			return
		}
		x.setMetadata(m)
		err = x.onRequestHeadersResponse(r.RequestHeaders)
	case *extprocv3.ProcessingResponse_RequestBody:
		if !x.dec.expectsBody() {
			x.onSpurious("spurious message")
			return
		}
		if x.requestAborted() {
			return
		}
		x.setMetadata(m)
		err = x.onRequestBodyResponse(r.RequestBody)
	case *extprocv3.ProcessingResponse_RequestTrailers:
		if !x.dec.expects(cbTrailers) {
			x.onSpurious("spurious message")
			return
		}
		if x.requestAborted() {
			return
		}
		x.setMetadata(m)
		err = x.onRequestTrailersResponse(r.RequestTrailers)
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		if x.enc.phase != phaseWaitHeaders {
			x.onSpurious("spurious message")
			return
		}
		x.setMetadata(m)
		err = x.onResponseHeadersResponse(r.ResponseHeaders)
	case *extprocv3.ProcessingResponse_ResponseBody:
		if !x.enc.expectsBody() {
			x.onSpurious("spurious message")
			return
		}
		x.setMetadata(m)
		err = x.onResponseBodyResponse(r.ResponseBody)
	case *extprocv3.ProcessingResponse_ResponseTrailers:
		if x.enc.phase != phaseTrailers {
			x.onSpurious("spurious message")
			return
		}
		x.setMetadata(m)
		err = x.onResponseTrailersResponse(r.ResponseTrailers)
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		x.sim.stats.inc(statStreamMsgsReceived)
		x.setMetadata(m)
		x.onImmediateResponse(r.ImmediateResponse)
		return
	default:
		// No oneof (a keepalive or metadata-only message), or one the
		// simulator does not model (streamed_immediate_response).
		x.onSpurious("unhandled message")
		return
	}
	x.sim.stats.inc(statStreamMsgsReceived)
	if err != nil {
		details := err.Error()
		if r, ok := errors.AsType[*rejection](err); ok {
			details = r.details
		}
		x.errorReply(responseDetails(details))
	}
}

// requestAborted reports, for a reply to a request message that was
// outstanding, whether Envoy's own local reply stopped the request: the
// reply is accepted and changes nothing, since continuing an aborted
// decoder filter chain is a no-op.
func (x *exchange) requestAborted() bool {
	if !x.envoyReplied {
		return false
	}
	x.sim.stats.inc(statStreamMsgsReceived)
	return true
}

// onNewTimeout applies Envoy's override_message_timeout rules.
func (x *exchange) onNewTimeout(d *durationpb.Duration) {
	if d.CheckValid() != nil || d.AsDuration() < 0 {
		x.sim.stats.inc(statOverrideIgnored)
		return
	}
	ms := d.AsDuration().Milliseconds()
	if ms < 1 || ms > x.cfg.maxMessageTimeout.Milliseconds() || !x.timerOn || x.overrideTaken {
		x.sim.stats.inc(statOverrideIgnored)
		return
	}
	x.timer.Reset(time.Duration(ms) * time.Millisecond)
	x.overrideTaken = true
	x.sim.stats.inc(statOverrideReceived)
}

// onSpurious handles a message that fits no outstanding state: fail closed
// with status_on_error, or with failure_mode_allow drop ext_proc for the
// rest of the request.
func (x *exchange) onSpurious(details string) {
	x.sim.stats.inc(statSpuriousMsgsReceived)
	if x.cfg.failureModeAllow {
		x.sim.stats.inc(statFailureModeAllowed)
		x.abandonProcessing()
		return
	}
	x.errorReply(responseDetails(details))
}

// onGrpcClose: the server ended the stream with OK status. Whatever was not
// answered continues unmodified.
func (x *exchange) onGrpcClose() {
	if x.complete {
		x.closeStream()
		return
	}
	x.abandonProcessing()
}

// onGrpcError: the stream failed (or could not be opened).
func (x *exchange) onGrpcError(err error) {
	x.streamFailed = true
	x.sim.stats.inc(statStreamsFailed)
	if x.complete {
		x.closeStream()
		return
	}
	if x.cfg.failureModeAllow {
		x.sim.stats.inc(statFailureModeAllowed)
		x.abandonProcessing()
		return
	}
	st := status.Convert(err)
	x.errorReply(responseDetails(fmt.Sprintf("ext_proc_error_gRPC_error_%d{%s}", st.Code(), st.Message())))
}

// onMessageTimeout: the message timer fired.
func (x *exchange) onMessageTimeout() {
	x.timerOn = false
	x.sim.stats.inc(statMessageTimeouts)
	if x.cfg.failureModeAllow {
		x.sim.stats.inc(statFailureModeAllowed)
		x.abandonProcessing()
		return
	}
	x.localReply(http.StatusGatewayTimeout, nil, nil, "ext_proc_error_per-message_timeout_exceeded")
}

// abandonProcessing is Envoy's clearAsyncState after a clean close or a
// tolerated failure: ext_proc is done for this request, and whatever it
// still held continues unmodified.
func (x *exchange) abandonProcessing() {
	x.complete = true
	x.finishCall()
	x.closeStream()
	if !x.dec.done {
		if x.dec.fd && x.dec.body != nil && !x.dec.bodyDone && !x.dec.trailersReplied {
			// The body went to the server, which never streamed it back.
			x.errorReply("ext_proc_error_full_duplex_body_incomplete")
			return
		}
		x.dec.body = x.dec.finalBody()
		x.requestDone()
		return
	}
	if x.enc.phase != phaseNotStarted {
		x.passThroughResponse()
	}
}

// errorReply is Envoy's handleErrorResponse: a status_on_error local reply.
func (x *exchange) errorReply(details string) {
	x.localReply(x.cfg.statusOnError, nil, nil, details)
}

// onImmediateResponse sends the server's local reply and ends processing.
func (x *exchange) onImmediateResponse(ir *extprocv3.ImmediateResponse) {
	// A missing status or one below 200 becomes 200, as in Envoy; so does
	// one above 999, which no HTTP/1 status line can carry.
	code := int(ir.GetStatus().GetCode())
	if code < 200 || code > 999 {
		code = http.StatusOK
	}
	x.localReply(code, ir.GetBody(), ir.GetHeaders(), responseDetails(ir.GetDetails()))
}

// localReply is sendLocalReply: the client gets status, body and headers
// (after mut, checked by the filter's mutation rules; failures there are
// ignored, as in Envoy). If the response already started, the stream is
// reset instead.
func (x *exchange) localReply(code int, body []byte, mut *extprocv3.HeaderMutation, details string) {
	if x.finished {
		return
	}
	x.complete = true
	x.finishCall()
	x.closeStream()
	x.stopUpstream()
	x.sim.stats.inc(statLocalReplies)
	x.res.localReply = true
	x.res.details = details
	x.markDecision()
	x.finished = true
	if x.committed {
		x.res.reset = true
		return
	}
	h := &headerMap{}
	h.add(":status", strconv.Itoa(code))
	if len(body) > 0 {
		h.add("content-type", "text/plain")
	}
	h.add("content-length", strconv.Itoa(len(body)))
	if mut != nil {
		_ = x.sim.applyHeaderMutation(mut, h, mutationOptions{}) // ignored, as in Envoy
	}
	x.commit(h)
	x.deliver(body)
	x.out.finish(nil)
}

// envoyReply is a local reply Envoy makes itself: the router's 503s, the
// filter manager's 413 and the connection manager's timeouts. Since 1.37
// the ext_proc filter's encodeHeaders sends any response headers to the
// server while processing is incomplete, these included
// (ext_proc.cc:1351-1393), so the reply goes through the response
// direction like an upstream response. Earlier releases skip local
// replies, and once response headers are in the filter chain the reply
// goes straight to the client (filter_manager.cc:541-547); in both cases
// it is a plain localReply.
func (x *exchange) envoyReply(code int, body []byte, details string) {
	if x.finished {
		return
	}
	if x.complete || x.ss == nil || !x.cfg.version.localRepliesToProcessor() || !x.enc.headerSend ||
		x.enc.phase != phaseNotStarted || x.committed {
		x.localReply(code, body, nil, details)
		return
	}
	x.stopUpstream()
	x.sim.stats.inc(statLocalReplies)
	x.sim.stats.inc(statLocalRepliesProcessed)
	x.res.localReply, x.res.details = true, details
	x.markDecision()
	x.envoyReplied = true
	x.dec.done = true // the decoder filter chain is stopped
	h := &headerMap{}
	h.add(":status", strconv.Itoa(code))
	if len(body) > 0 {
		h.add("content-type", "text/plain")
	}
	h.add("content-length", strconv.Itoa(len(body)))
	x.encodeHeaders(h, len(body) == 0)
	if !x.finished && len(body) > 0 {
		// sendLocalReply encodes the whole body with end_stream.
		x.encodeData(body, true)
	}
}

// hcmDeadline is when the connection manager's next timer fires:
// stream_idle_timeout after the last traffic with the client, and
// request_timeout from the start until the request went upstream or a
// response started.
func (x *exchange) hcmDeadline() (time.Time, bool) {
	var at time.Time
	if x.envoyReplied || x.res.localReply {
		return at, false
	}
	if d := x.cfg.streamIdle; d > 0 {
		at = x.lastActivity.Add(d)
	}
	if d := x.cfg.requestTimeout; d > 0 && !x.sentUpstream && !x.committed {
		if r := x.start.Add(d); at.IsZero() || r.Before(at) {
			at = r
		}
	}
	return at, !at.IsZero()
}

// armHCMTimer sets the connection manager's timer to hcmDeadline.
func (x *exchange) armHCMTimer() {
	at, ok := x.hcmDeadline()
	if !ok {
		if x.hcmTimer != nil && !x.hcmAt.IsZero() {
			x.hcmTimer.Stop()
		}
		x.hcmAt = time.Time{}
		return
	}
	if at.Equal(x.hcmAt) {
		return
	}
	x.hcmAt = at
	d := max(0, time.Until(at))
	if x.hcmTimer == nil {
		x.hcmTimer = time.NewTimer(d)
		return
	}
	x.hcmTimer.Reset(d)
}

func (x *exchange) hcmC() <-chan time.Time {
	if x.hcmAt.IsZero() {
		return nil
	}
	return x.hcmTimer.C
}

// onHCMTimeout: stream_idle_timeout or request_timeout fired. The request
// is complete (the simulator holds it whole), so the answer is 504, not
// 408 (conn_manager_impl.cc:1061-1077, http/utility.cc:1535-1540); once
// the response started, the stream is reset.
func (x *exchange) onHCMTimeout() {
	x.hcmAt = time.Time{}
	x.sim.stats.inc(statDownstreamTimeouts)
	now := time.Now()
	if d := x.cfg.requestTimeout; d > 0 && !x.sentUpstream && !x.committed && !now.Before(x.start.Add(d)) {
		x.envoyReply(http.StatusGatewayTimeout, []byte("request timeout"), "request_overall_timeout")
		return
	}
	x.envoyReply(http.StatusGatewayTimeout, []byte("stream timeout"), "stream_idle_timeout")
}

// lastReplyDone marks ext_proc's work for the request as complete because
// nothing more will be sent. Envoy 1.37+ closes the side stream at once;
// earlier releases keep it open until the HTTP stream ends.
func (x *exchange) lastReplyDone() {
	x.complete = true
	if x.cfg.version.closesAfterLastReply() {
		x.closeStream()
	}
}

// disconnect: the downstream client went away. Envoy closes the side stream
// (in the configured style) and the upstream request; nobody gets a reply.
func (x *exchange) disconnect(cause error) {
	if x.finished {
		return
	}
	if cause == nil {
		cause = context.Canceled
	}
	x.sim.stats.inc(statDownstreamDisconnects)
	x.complete = true
	x.finishCall()
	x.closeStream()
	x.stopUpstream()
	x.res.disconnected = cause
	x.finished = true
}

// setMetadata keeps the dynamic_metadata namespaces listed in
// receiving_namespaces and silently drops the others. Values merge into
// existing namespaces field by field.
func (x *exchange) setMetadata(m *extprocv3.ProcessingResponse) {
	for ns, v := range m.GetDynamicMetadata().GetFields() {
		if !slices.Contains(x.cfg.receiving, ns) {
			continue
		}
		if x.metadata == nil {
			x.metadata = map[string]*structpb.Struct{}
		}
		dst := x.metadata[ns]
		if dst == nil {
			dst = &structpb.Struct{Fields: map[string]*structpb.Value{}}
			x.metadata[ns] = dst
		}
		for k, fv := range v.GetStructValue().GetFields() {
			dst.Fields[k] = fv
		}
	}
}

// markDecision records the end of request processing once.
func (x *exchange) markDecision() {
	if x.res.timings.Decision == 0 {
		x.res.timings.Decision = time.Since(x.start)
	}
}

// commit sends the response headers (":status" plus the regular headers) to
// the client.
func (x *exchange) commit(h *headerMap) {
	if x.committed {
		return
	}
	code := http.StatusOK
	if v, ok := h.get(":status"); ok {
		if n, err := strconv.Atoi(v); err == nil {
			code = n
		}
	}
	x.committed = true
	x.lastActivity = time.Now()
	x.res.timings.ResponseHeaders = time.Since(x.start)
	x.out.writeHeader(code, h.httpHeader())
	x.hook(StageResponseCommitted)
}

// deliver sends a body chunk to the client and reports whether the exchange
// is still going (the client may disconnect at StageResponseBody).
func (x *exchange) deliver(p []byte) bool {
	if x.res.disconnected != nil {
		return false
	}
	if len(p) == 0 {
		return !x.finished
	}
	if x.res.timings.FirstByte == 0 {
		x.res.timings.FirstByte = time.Since(x.start)
	}
	x.lastActivity = time.Now()
	x.out.write(p)
	return !x.hook(StageResponseBody)
}

// response builds Do's result.
func (x *exchange) response(c *collector) *Response {
	return &Response{
		Status:     c.status,
		Header:     c.header,
		Body:       c.body.Bytes(),
		Trailer:    c.trailer,
		Reset:      x.res.reset,
		LocalReply: x.res.localReply,
		Details:    x.res.details,
		Endpoint:   x.endpoint,
		Upstream:   x.upstream,
		Metadata:   x.metadata,
		Timings:    x.res.timings,
	}
}

// servedKey is the endpoint picker protocol's served-endpoint key.
const servedKey = "x-gateway-destination-endpoint-served"

// isResponseMessage reports a response-direction message.
func isResponseMessage(m *extprocv3.ProcessingRequest) bool {
	switch m.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_ResponseHeaders, *extprocv3.ProcessingRequest_ResponseBody, *extprocv3.ProcessingRequest_ResponseTrailers:
		return true
	}
	return false
}
