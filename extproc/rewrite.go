package extproc

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollgate/tollgate/extproc/answer"
	"github.com/tollgate/tollgate/extproc/request/openai"
)

// rewrite applies the model rewrite table in force (--model-rewrite and
// the pool's InferenceModelRewrite objects) to the request body's model
// field m, when the body mode lets tollgate replace the body: BUFFERED
// (and a complete BUFFERED_PARTIAL body), STREAMED with the chunks held,
// and FULL_DUPLEX_STREAMED. The rewritten body is what tollgate prices and
// routes; it goes to Envoy with the route. It returns the model the
// request now names.
func (x *exchange) rewrite(m openai.ModelField) string {
	if x.headersOnly {
		return m.Name
	}
	out, from, to, ok := x.deps.planner.Rewrites().Rewrite(x.body, m, rand.Uint64N)
	if !ok {
		return m.Name
	}
	x.rewrittenFrom, x.rewrittenTo = from, to
	x.log.Debug("model rewritten", "request", x.id, "from", from, "to", to)
	x.body, x.newBody = out, out
	return to
}

// rewriteParsed rewrites a parsed admission request before it is priced:
// its body, and the model it is scheduled and hashed under.
func (x *exchange) rewriteParsed(r *openai.Request) {
	r.Model = x.rewrite(r.ModelField)
}

// restoresModel reports whether response bodies get the client's model
// name back: the request was rewritten and the response body mode lets
// tollgate replace the body. STREAMED and FULL_DUPLEX_STREAMED replace
// chunks; Envoy drops the response's Content-Length in those modes, since
// chunks may change length, so the client reads the body to its end.
// BUFFERED replaces the whole body and sets a Content-Length to match
// (bufferedResponseReply).
func (x *exchange) restoresModel() bool {
	return x.rewrittenTo != "" && (x.respMode == extprocfilterv3.ProcessingMode_STREAMED ||
		x.respMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED ||
		x.respMode == extprocfilterv3.ProcessingMode_BUFFERED)
}

// restoreModel puts the client's model name back into one response chunk,
// as the peers do: "model":"TO" (with or without a blank after the colon)
// becomes "model":"FROM". A name split across two chunks is left as it is.
func (x *exchange) restoreModel(chunk []byte) []byte {
	if !x.restoresModel() {
		return chunk
	}
	out := chunk
	for _, sep := range []string{`":"`, `": "`} {
		out = bytes.ReplaceAll(out, []byte(`"model`+sep+x.rewrittenTo+`"`), []byte(`"model`+sep+x.rewrittenFrom+`"`))
	}
	return out
}

// streamedResponseChunk answers one STREAMED response chunk, replacing it
// when the model name was restored in it.
func (x *exchange) streamedResponseChunk(chunk []byte) *extprocv3.ProcessingResponse {
	if out := x.restoreModel(chunk); !bytes.Equal(out, chunk) {
		return responseBodyReply(&extprocv3.CommonResponse{BodyMutation: replaceBody(out)})
	}
	return passResponseBody
}

// bufferedResponseReply answers a BUFFERED response body, the whole body
// in one message. With the client's model name restored, the new body
// goes with a Content-Length of its length in the same reply: Envoy still
// holds the response headers in this mode, applies the header mutation
// and then rejects a body mutation whose length differs from the
// Content-Length (the upstream's, unless replaced).
func (x *exchange) bufferedResponseReply(body []byte) *extprocv3.ProcessingResponse {
	out := x.restoreModel(body)
	if bytes.Equal(out, body) {
		return passResponseBody
	}
	return responseBodyReply(&extprocv3.CommonResponse{
		HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{answer.SetHeader("content-length", strconv.Itoa(len(out)))},
		},
		BodyMutation: replaceBody(out),
	})
}

// bufferedBodyReply answers a BUFFERED body: with rt's route unless rt is
// nil, and the rewritten body with its Content-Length when there is one
// (Envoy checks that they agree).
func (x *exchange) bufferedBodyReply(rt *route) *extprocv3.ProcessingResponse {
	switch {
	case x.newBody == nil && rt == nil:
		return passRequestBody
	case x.newBody == nil:
		return rt.body
	}
	mut := &extprocv3.HeaderMutation{}
	if rt != nil { // rt's mutation is shared: extend a copy
		mut.SetHeaders, mut.RemoveHeaders = slices.Clone(rt.mut.SetHeaders), rt.mut.RemoveHeaders
	}
	mut.SetHeaders = append(mut.SetHeaders, answer.SetHeader("content-length", strconv.Itoa(len(x.newBody))))
	answer.SortHeaders(mut.SetHeaders)
	r := requestBodyReply(&extprocv3.CommonResponse{HeaderMutation: mut, BodyMutation: replaceBody(x.newBody)})
	if rt != nil {
		r.DynamicMetadata = rt.md
	}
	return r
}

// streamedChunkReply answers one held STREAMED chunk: with a rewritten
// body, the first chunk carries all of it and the others are cleared.
func (x *exchange) streamedChunkReply(first bool) *extprocv3.ProcessingResponse {
	switch {
	case x.newBody == nil:
		return passRequestBody
	case first:
		return requestBodyReply(&extprocv3.CommonResponse{BodyMutation: replaceBody(x.newBody)})
	}
	return requestBodyReply(&extprocv3.CommonResponse{
		BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}},
	})
}
