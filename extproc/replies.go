package extproc

import (
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate/tollgate/extproc/answer"
	"github.com/tollgate/tollgate/extproc/fleet"
)

// maxDuplexChunk bounds one re-streamed body chunk in FULL_DUPLEX_STREAMED
// mode, under Envoy's recommended 64 KiB per message.
const maxDuplexChunk = 62_000

// routing is the header mutation and dynamic metadata that send a request
// to t: x-gateway-destination-endpoint (overwriting any client value), the
// DP-rank header for a multi-rank worker (removed otherwise, so a client
// value never reaches a worker that did not get a rank), and
// envoy.lb/x-gateway-destination-endpoint, both naming t's fallbacks after
// it when it has any, and x-prefiller-host-port for a split request
// (removed otherwise: a client must not aim a decode worker's sidecar at an
// address of its choice). Set headers are sorted by name.
func routing(t *fleet.Target) (*extprocv3.HeaderMutation, *structpb.Struct) {
	endpoints := t.Endpoints()
	m := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{answer.SetHeader(headerDestination, endpoints)}}
	if t.MultiRank {
		m.SetHeaders = append(m.SetHeaders, answer.SetHeader(headerUpstreamRank, strconv.FormatUint(uint64(t.Rank), 10)))
	} else {
		m.RemoveHeaders = []string{headerUpstreamRank}
	}
	if t.Prefiller != "" {
		m.SetHeaders = append(m.SetHeaders, answer.SetHeader(headerPrefiller, t.Prefiller))
	} else {
		m.RemoveHeaders = append(m.RemoveHeaders, headerPrefiller)
	}
	answer.SortHeaders(m.SetHeaders)
	md := &structpb.Struct{Fields: map[string]*structpb.Value{
		lbNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			headerDestination: structpb.NewStringValue(endpoints),
		}}),
	}}
	return m, md
}

// common wraps a header mutation (nil for none) as a CONTINUE response.
func common(m *extprocv3.HeaderMutation) *extprocv3.CommonResponse {
	return &extprocv3.CommonResponse{HeaderMutation: m}
}

func requestHeadersReply(c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: c}}}
}

func requestBodyReply(c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: c}}}
}

func responseBodyReply(c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: c}}}
}

// The replies that change nothing (CONTINUE) are built once and shared by
// every stream: they are only ever marshalled, never modified.
var (
	passRequestHeaders  = requestHeadersReply(common(nil))
	passRequestBody     = requestBodyReply(common(nil))
	passRequestTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{}}}
	passResponseHeaders = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: common(nil)}}}
	passResponseBody     = responseBodyReply(common(nil))
	passResponseTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{}}}
)

// replaceBody is a body mutation that replaces the whole body with b.
func replaceBody(b []byte) *extprocv3.BodyMutation {
	return &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: b}}
}

// streamed is a FULL_DUPLEX_STREAMED body chunk going back to Envoy.
func streamed(b []byte, eos bool) *extprocv3.BodyResponse {
	return &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
		BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos}}}}}
}

// duplexRequestBody re-streams a request body in chunks of at most
// maxDuplexChunk bytes; eos marks the last one (false when trailers follow).
// An empty body with eos is one empty chunk.
func duplexRequestBody(body []byte, eos bool) []*extprocv3.ProcessingResponse {
	var out []*extprocv3.ProcessingResponse
	for len(body) > 0 || (len(out) == 0 && eos) {
		n := min(len(body), maxDuplexChunk)
		last := n == len(body)
		out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: streamed(body[:n], last && eos)}})
		body = body[n:]
	}
	return out
}

// duplexResponseChunk echoes one response body chunk unchanged.
func duplexResponseChunk(b []byte, eos bool) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: streamed(b, eos)}}
}

// overrideTimeout is the one bare message that extends Envoy's timer for
// the outstanding message.
func overrideTimeout(d time.Duration) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(d)}
}

// immediateReply ends the HTTP request with the rejection's answer.
func immediateReply(r *answer.Rejection) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: r.Immediate()}}
}
