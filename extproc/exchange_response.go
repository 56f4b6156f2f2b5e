package extproc

import (
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

// accounted reports whether the response path feeds the scheduler: the
// request was admitted and not yet reported.
func (x *exchange) accounted() bool { return x.admitted && !x.reported }

// responseHeaders answers the response headers, or holds the answer while
// the request can still be preempted, so that a victim can still get the
// 503 preemption answer until its first token.
func (x *exchange) responseHeaders(now time.Time, h *extprocv3.HttpHeaders) step {
	if x.stage != stageRouted {
		return x.protocolError("response headers in stage %s", x.stage)
	}
	x.respStarted = true
	if h.GetEndOfStream() {
		x.finishResponse()
		return step{send: []*extprocv3.ProcessingResponse{responseHeadersReply()}}
	}
	if x.accounted() && !x.firstToken && x.p.preemptible[x.who.priority] && x.canHoldResponse() {
		x.respHeld = true
		x.respTimer.start(now, x.cfg.EnvoyMessageTimeout, x.respMode != extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED)
		return step{}
	}
	return step{send: []*extprocv3.ProcessingResponse{responseHeadersReply()}}
}

// responseBody follows the response: the first non-empty chunk is the
// first token, end_of_stream is the end of the request.
func (x *exchange) responseBody(now time.Time, b *extprocv3.HttpBody) step {
	if x.stage != stageRouted {
		return x.protocolError("response body in stage %s", x.stage)
	}
	body, eos := b.GetBody(), b.GetEndOfStream()
	if x.admitted {
		x.usage.Feed(body)
	}
	if len(body) > 0 && !x.firstToken {
		x.firstToken = true
		if x.accounted() {
			x.env.notify(evFirstToken, x.id)
		}
	}
	if eos {
		x.finishResponse()
	}
	duplex := x.respMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	if x.respHeld {
		c := respChunk{eos: eos}
		if duplex {
			c.body = body
		}
		x.respPending = append(x.respPending, c)
		if x.firstToken || eos {
			return step{send: x.releaseResponse()}
		}
		x.respTimer.start(now, x.cfg.EnvoyMessageTimeout, !duplex)
		return step{}
	}
	if duplex {
		return step{send: []*extprocv3.ProcessingResponse{duplexResponseChunk(body, eos)}}
	}
	return step{send: []*extprocv3.ProcessingResponse{responseBodyReply()}}
}

// responseTrailers end the response.
func (x *exchange) responseTrailers(time.Time) step {
	if x.stage != stageRouted {
		return x.protocolError("response trailers in stage %s", x.stage)
	}
	x.finishResponse()
	out := x.releaseResponse()
	return step{send: append(out, responseTrailersReply())}
}

// releaseResponse answers the held response headers and the body chunks
// held behind them.
func (x *exchange) releaseResponse() []*extprocv3.ProcessingResponse {
	if !x.respHeld {
		return nil
	}
	x.respHeld = false
	x.respTimer = envoyTimer{}
	out := make([]*extprocv3.ProcessingResponse, 0, 1+len(x.respPending))
	out = append(out, responseHeadersReply())
	for _, c := range x.respPending {
		if x.respMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
			out = append(out, duplexResponseChunk(c.body, c.eos))
		} else {
			out = append(out, responseBodyReply())
		}
	}
	x.respPending = nil
	return out
}

// finishResponse reports Done for a completed response and compares the
// estimates with the worker's usage.
func (x *exchange) finishResponse() {
	if x.accounted() {
		x.report(evDone)
	}
	x.compareUsage()
}

// compareUsage compares the prompt and cached-token estimates with the
// usage the worker reported, once, and calibrates the tokenizer.
func (x *exchange) compareUsage() {
	if x.compared || x.plan == nil || !x.admitted {
		return
	}
	u := x.usage.Usage()
	if !u.Found || u.PromptTokens <= 0 {
		return
	}
	x.compared = true
	actual := float64(u.PromptTokens)
	x.p.observeCostError(x.plan.req.Model, (float64(x.plan.estimate)-actual)/actual)
	x.p.metrics.cachedError.Observe((float64(x.plan.cachedOn(x.target.worker)) - float64(u.CachedTokens)) / actual)
	if !x.plan.exact && x.plan.textBytes > 0 {
		x.p.tok.Observe(x.plan.req.Model, x.plan.textBytes, u.PromptTokens)
	}
}
