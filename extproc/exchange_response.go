package extproc

import (
	"strconv"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// canHoldResponse reports whether Envoy sends response body chunks before
// the response headers reply, so that holding that reply cannot stall the
// response: FULL_DUPLEX_STREAMED, or STREAMED with
// send_body_without_waiting_for_header_response.
func (x *exchange) canHoldResponse() bool {
	switch x.respMode {
	case extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		return true
	case extprocfilterv3.ProcessingMode_STREAMED:
		return x.early
	}
	return false
}

// responseHeaders answers the response headers, or holds the answer while
// the request can still be preempted, so that a victim can still get the
// 503 preemption answer until its first token. Response headers before the
// route are Envoy's own answer to the request (envoyReply).
func (x *exchange) responseHeaders(now time.Time, h *extprocv3.HttpHeaders) step {
	switch x.stage {
	case stageRouted:
	case stageStart, stageBody, stageWaiting:
		return x.envoyReply(now, h)
	case stageEnvoyReply, stageOver:
		return x.protocolError("response headers in stage %s", x.stage)
	}
	if x.resp != responseNone {
		return x.protocolError("response headers twice")
	}
	x.resp = responseOther
	if successStatus(h) {
		x.resp = responseWorker
	}
	if h.GetEndOfStream() {
		x.finishResponse()
		return step{send: []*extprocv3.ProcessingResponse{passResponseHeaders}}
	}
	if x.resp == responseWorker && x.preemptible() && x.canHoldResponse() {
		x.heldResp = &heldResponse{}
		x.heldResp.timer.start(now, x.cfg.EnvoyMessageTimeout, x.respMode != extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED)
		return step{}
	}
	return step{send: []*extprocv3.ProcessingResponse{passResponseHeaders}}
}

// responseBody follows the response: the first non-empty chunk is the
// first token, end_of_stream is the end of the request.
func (x *exchange) responseBody(now time.Time, b *extprocv3.HttpBody) step {
	if x.stage == stageEnvoyReply {
		return x.envoyReplyBody(b)
	}
	if x.stage != stageRouted {
		return x.protocolError("response body in stage %s", x.stage)
	}
	body, eos := b.GetBody(), b.GetEndOfStream()
	if x.resp == responseWorker && x.plan != nil {
		x.usage.Feed(body)
		if len(body) > 0 {
			x.adm.reportFirstToken()
		}
	}
	if eos {
		x.finishResponse()
	}
	duplex := x.respMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	if h := x.heldResp; h != nil {
		c := respChunk{eos: eos}
		if duplex || x.restoresModel() {
			c.body = body
		}
		h.pending = append(h.pending, c)
		if x.adm.firstToken || eos {
			return step{send: x.releaseResponse()}
		}
		h.timer.start(now, x.cfg.EnvoyMessageTimeout, !duplex)
		return step{}
	}
	if duplex {
		return step{send: []*extprocv3.ProcessingResponse{duplexResponseChunk(x.restoreModel(body), eos)}}
	}
	if x.respMode == extprocfilterv3.ProcessingMode_BUFFERED && eos {
		return step{send: []*extprocv3.ProcessingResponse{x.bufferedResponseReply(body)}}
	}
	return step{send: []*extprocv3.ProcessingResponse{x.streamedResponseChunk(body)}}
}

// responseTrailers end the response.
func (x *exchange) responseTrailers(time.Time) step {
	if x.stage == stageEnvoyReply {
		return step{send: []*extprocv3.ProcessingResponse{passResponseTrailers}, end: true}
	}
	if x.stage != stageRouted {
		return x.protocolError("response trailers in stage %s", x.stage)
	}
	x.finishResponse()
	out := x.releaseResponse()
	return step{send: append(out, passResponseTrailers)}
}

// envoyReply handles response headers that arrive before the route: Envoy
// answered the request itself. Since Envoy 1.37 (PR #41769 removed
// skip_ext_proc_on_local_reply) encodeHeaders sends any response headers
// to the processor while processing is incomplete (ext_proc.cc:1351-1393),
// Envoy's own local replies included: the 413 for a body over the buffer
// limit (filter_manager.cc:569-576) and the 504 or 408 of an HCM stream
// idle or request timeout (conn_manager_impl.cc:1061-1077). The request is
// over from Envoy's side: it leaves the scheduler at once (a client
// departure: the slot and the queue place are free), the held request
// messages are never answered, and the reply passes through unchanged
// with CONTINUE until its end, where the stream ends cleanly.
func (x *exchange) envoyReply(now time.Time, h *extprocv3.HttpHeaders) step {
	code := responseStatus(h)
	x.adm.release()
	x.deps.metrics.envoyReplies.WithLabelValues(strconv.Itoa(code)).Inc()
	x.log.Debug("Envoy answered the request itself before the route", "request", x.id, "status", code, "stage", x.stage.String())
	x.stage = stageEnvoyReply
	x.held, x.body, x.reqTimer = nil, nil, envoyTimer{}
	return step{send: []*extprocv3.ProcessingResponse{passResponseHeaders}, end: h.GetEndOfStream()}
}

// envoyReplyBody passes a body chunk of Envoy's own reply through; its end
// ends the stream.
func (x *exchange) envoyReplyBody(b *extprocv3.HttpBody) step {
	r := passResponseBody
	if x.respMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		r = duplexResponseChunk(b.GetBody(), b.GetEndOfStream())
	}
	return step{send: []*extprocv3.ProcessingResponse{r}, end: b.GetEndOfStream()}
}

// responseStatus is the :status of response headers, 0 when absent or
// not a three-digit status.
func responseStatus(h *extprocv3.HttpHeaders) int {
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.GetKey() == ":status" {
			n, err := strconv.Atoi(headerValue(hv))
			if err != nil || n < 100 || n > 999 {
				return 0
			}
			return n
		}
	}
	return 0
}

// successStatus reports a 2xx response: a worker's answer. Envoy's
// router-made replies (no healthy upstream, connect failure) are 503s.
func successStatus(h *extprocv3.HttpHeaders) bool {
	c := responseStatus(h)
	return c >= 200 && c < 300
}

// releaseResponse answers the held response headers and the body chunks
// held behind them.
func (x *exchange) releaseResponse() []*extprocv3.ProcessingResponse {
	h := x.heldResp
	if h == nil {
		return nil
	}
	x.heldResp = nil
	out := make([]*extprocv3.ProcessingResponse, 0, 1+len(h.pending))
	out = append(out, passResponseHeaders)
	for _, c := range h.pending {
		if x.respMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
			out = append(out, duplexResponseChunk(x.restoreModel(c.body), c.eos))
		} else {
			out = append(out, x.streamedResponseChunk(c.body))
		}
	}
	return out
}

// finishResponse releases a completed request and compares the estimates
// with the worker's usage.
func (x *exchange) finishResponse() {
	x.compareUsage()
	x.adm.release()
}

// compareUsage compares the prompt and cached-token estimates with the
// usage the worker reported, once, and calibrates the tokenizer; with
// tenant budgets the usage settles the tenant's reservation. Call it
// before the release.
func (x *exchange) compareUsage() {
	if x.compared || x.plan == nil || x.resp != responseWorker {
		return
	}
	if u := x.usage.Usage(); u.Found {
		x.compared = true
		x.deps.planner.ObserveUsage(x.plan, x.adm.decision.action.Cached, u)
		if x.cfg.Sched.TenantBudgets != nil {
			x.adm.reportUsage(u.PromptTokens, u.CompletionTokens)
		}
	}
}
