package extproc

import (
	"errors"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollgate/tollgate/extproc/answer"
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/extproc/request/openai"
)

// attributesKey is the key of the request attributes Envoy's ext_proc
// filter sends.
const attributesKey = "envoy.filters.http.ext_proc"

// attrSourceAddress is the request attribute carrying the client address.
// Envoy sends it only when the filter's request_attributes lists it
// (ext_proc.cc:1607-1621).
const attrSourceAddress = "source.address"

// clientIP returns the client address per the configured source; never
// Envoy's own peer address. A missing source.address attribute is counted
// and logged once: without it every unauthenticated client would fall into
// one tenant.
func (x *exchange) clientIP(m *extprocv3.ProcessingRequest) string {
	if x.cfg.ClientIP == ClientIPForwardedFor {
		return forwardedClient(x.hdr.forwardedFor, x.cfg.ForwardedForTrustedHops)
	}
	v, ok := m.GetAttributes()[attributesKey].GetFields()[attrSourceAddress]
	if !ok {
		x.deps.metrics.sourceAddressMissing.Inc()
		if x.deps.warnedSourceAddress.CompareAndSwap(false, true) {
			x.log.Error("Envoy sent no source.address request attribute: ip: tenants cannot resolve and unauthenticated clients share the anonymous tenant; "+
				"add request_attributes: [source.address] to the ext_proc filter, or run with --client-ip-source x-forwarded-for "+
				"(logged once; tollgate_client_address_missing_total counts every such request)", "request", x.id)
		}
		return ""
	}
	return v.GetStringValue()
}

// duplex reports FULL_DUPLEX_STREAMED request bodies.
func (x *exchange) duplex() bool {
	return x.reqMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
}

// requestHeaders reads the headers and decides how to wait for the body:
//
//   - end_of_stream (GET and other body-less requests): decide now.
//   - NONE, and STREAMED without send_body_without_waiting_for_header_response:
//     Envoy sends no body before the headers reply, so decide now on the
//     headers alone and answer later chunks with CONTINUE.
//   - BUFFERED and BUFFERED_PARTIAL: answer CONTINUE now; decide on the
//     body message and put the route in its reply.
//   - STREAMED with send_body_without_waiting_for_header_response, and
//     FULL_DUPLEX_STREAMED: hold the headers reply, read the body to its end,
//     then answer the headers with the route.
func (x *exchange) requestHeaders(now time.Time, m *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) step {
	x.start = now
	hdr, rej := parseHeaders(h.GetHeaders(), x.deps.keep, x.cfg.MaxHeaderBytes, x.cfg.MaxHeaderCount)
	if rej != nil {
		return x.reject(now, rej)
	}
	x.hdr = hdr
	x.kind, x.scheduled = openai.RouteKind(hdr.method, hdr.path)
	var irej *intake.Rejection
	if x.who, irej = x.deps.planner.Identify(hdr.lookup, x.clientIP(m), x.scheduled); irej != nil {
		return x.reject(now, answer.FromIntake(irej))
	}
	if x.subset, rej = subsetOf(m.GetMetadataContext()); rej != nil {
		return x.reject(now, rej)
	}
	if x.subset, rej = x.withTestSelection(x.subset); rej != nil {
		return x.reject(now, rej)
	}
	x.reqTimer.start(now, x.cfg.EnvoyMessageTimeout, !x.duplex())
	if h.GetEndOfStream() {
		x.held = append(x.held, heldHeaders)
		return x.complete(now)
	}
	switch x.reqMode {
	case extprocfilterv3.ProcessingMode_BUFFERED, extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL:
		x.stage = stageBody
		return step{send: []*extprocv3.ProcessingResponse{passRequestHeaders}}
	case extprocfilterv3.ProcessingMode_STREAMED:
		x.held = append(x.held, heldHeaders)
		if x.early {
			x.stage = stageBody
			return step{}
		}
		x.headersOnly = true
		return x.complete(now)
	case extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		x.held = append(x.held, heldHeaders)
		x.stage = stageBody
		return step{}
	default: // NONE: no body will be sent.
		x.held = append(x.held, heldHeaders)
		x.headersOnly = true
		return x.complete(now)
	}
}

// requestBody accumulates the body, or answers chunks that arrive after
// the decision (STREAMED without early body sending).
func (x *exchange) requestBody(now time.Time, b *extprocv3.HttpBody) step {
	if x.stage == stageEnvoyReply {
		return step{} // Envoy's own reply stopped the request: nothing to answer
	}
	if x.stage == stageRouted && x.headersOnly { // never FULL_DUPLEX_STREAMED
		return step{send: []*extprocv3.ProcessingResponse{passRequestBody}}
	}
	if x.stage != stageBody {
		return x.protocolError("request body in stage %s", x.stage)
	}
	x.reqTimer.start(now, x.cfg.EnvoyMessageTimeout, !x.duplex())
	if len(x.body)+len(b.GetBody()) > x.cfg.MaxBodyBytes {
		x.body = nil
		return x.reject(now, answer.BodyTooLarge(x.cfg.MaxBodyBytes))
	}
	if x.body == nil && b.GetEndOfStream() {
		x.body = b.GetBody() // the whole body in one message: no copy
	} else {
		x.body = append(x.body, b.GetBody()...)
	}
	switch x.reqMode {
	case extprocfilterv3.ProcessingMode_STREAMED:
		x.held = append(x.held, heldChunk)
		if !b.GetEndOfStream() {
			return step{}
		}
	case extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		if !b.GetEndOfStream() {
			return step{}
		}
		x.held = append(x.held, heldDuplexBody)
	default:
		// BUFFERED sends the whole body in one message (end_of_stream is
		// false only when trailers follow); BUFFERED_PARTIAL sends what
		// fit in Envoy's buffer, which a truncated JSON body shows.
		x.held = append(x.held, heldBufferedBody)
	}
	return x.complete(now)
}

// requestTrailers ends a streamed body, or is answered in order.
func (x *exchange) requestTrailers(now time.Time) step {
	switch x.stage {
	case stageBody:
		if x.duplex() {
			x.held = append(x.held, heldDuplexBody)
		}
		x.held = append(x.held, heldTrailers)
		return x.complete(now)
	case stageWaiting:
		x.held = append(x.held, heldTrailers)
		return step{}
	case stageRouted:
		return step{send: []*extprocv3.ProcessingResponse{passRequestTrailers}}
	case stageEnvoyReply:
		return step{} // Envoy's own reply stopped the request: nothing to answer
	case stageStart, stageOver:
	}
	return x.protocolError("request trailers in stage %s", x.stage)
}

// complete decides a request whose headers and body are read: route it at
// once when it is outside admission, otherwise plan it and submit it.
func (x *exchange) complete(now time.Time) step {
	if !x.scheduled {
		if !x.canCarryRoute() {
			// BUFFERED with trailers and no body: only the trailers reply
			// is left, and it cannot set a header, so a CONTINUE would
			// forward the request with whatever destination header the
			// client sent.
			return x.reject(now, &answer.Rejection{Reason: answer.ReasonBadRequest,
				Message: "a request with trailers and no body cannot be routed: send the request without trailers or with a body"})
		}
		model := x.rewrite(intake.ModelField(x.body))
		t, ok, err := x.env.route(model, x.subset)
		switch {
		case errors.Is(err, errStopped):
			return x.reject(now, &answer.Rejection{Reason: answer.ReasonShutdown})
		case err != nil:
			return x.departed()
		case !ok && x.subset != nil:
			return x.reject(now, &answer.Rejection{Reason: answer.ReasonNoEndpoints, Model: model, Message: subsetUnmatched})
		case !ok:
			return x.reject(now, &answer.Rejection{Reason: answer.ReasonNoEndpoints, Model: model})
		}
		x.deps.metrics.admission.WithLabelValues("routed").Observe(now.Sub(x.start).Seconds())
		return step{send: x.routeReplies(&t)}
	}
	pl, rej := x.deps.planner.Build(x.env.context(), now, x.id, x.kind, x.hdr.lookup, x.who, x.body, x.headersOnly, x.rewriteParsed)
	if rej != nil {
		return x.reject(now, answer.FromIntake(rej))
	}
	x.plan = pl
	pl.Req.Arrival = x.start // a flat policy class's deadline counts from here
	if !x.duplex() {
		x.body = nil // only FULL_DUPLEX_STREAMED sends the body back
	}
	x.stage = stageWaiting
	x.adm.submitted()
	switch err := x.env.submit(&pl.Req, x.subset); {
	case err == nil:
		return step{}
	case errors.Is(err, errStopped):
		return x.onShutdown(now)
	default:
		x.adm.abandon()
		return x.departed()
	}
}

// departed ends an exchange whose stream's context ended before the
// dispatcher took its request: the client left, and nobody waits for an
// answer.
func (x *exchange) departed() step {
	x.stage = stageOver
	return step{end: true, err: errClientGone}
}

// canCarryRoute reports whether a held request message can carry the
// route's header mutation.
func (x *exchange) canCarryRoute() bool {
	for _, h := range x.held {
		if h == heldHeaders || h == heldBufferedBody {
			return true
		}
	}
	return false
}

// routeReplies answers every held request message in order; the first one
// that can carry a header mutation carries the route and the envoy.lb
// metadata.
func (x *exchange) routeReplies(t *fleet.Target) []*extprocv3.ProcessingResponse {
	x.stage = stageRouted
	rt := x.deps.routes.get(t)
	out := make([]*extprocv3.ProcessingResponse, 0, len(x.held)+1)
	firstChunk := true
	for _, h := range x.held {
		switch h {
		case heldHeaders:
			if rt == nil {
				out = append(out, passRequestHeaders)
			} else {
				out = append(out, rt.headers)
			}
			rt = nil
		case heldBufferedBody:
			out = append(out, x.bufferedBodyReply(rt))
			rt = nil
		case heldChunk:
			out = append(out, x.streamedChunkReply(firstChunk))
			firstChunk = false
		case heldDuplexBody:
			trailers := len(x.held) > 0 && x.held[len(x.held)-1] == heldTrailers
			out = append(out, duplexRequestBody(x.body, !trailers)...)
		case heldTrailers:
			out = append(out, passRequestTrailers)
		}
	}
	x.held = x.held[:0]
	x.body, x.newBody = nil, nil
	return out
}
