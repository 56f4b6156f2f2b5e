package extproc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollgate/tollgate/extproc/openai"
)

// MaxModelRewrites bounds the static rewrite table.
const MaxModelRewrites = 1024

// ParseModelRewrite parses one --model-rewrite value, FROM=TO.
func ParseModelRewrite(s string) (from, to string, err error) {
	from, to, ok := strings.Cut(s, "=")
	from, to = strings.TrimSpace(from), strings.TrimSpace(to)
	if !ok || from == "" || to == "" || len(from) > openai.MaxModelNameBytes || len(to) > openai.MaxModelNameBytes {
		return "", "", fmt.Errorf("invalid model rewrite %q: want FROM=TO, each 1 to %d bytes", s, openai.MaxModelNameBytes)
	}
	return from, to, nil
}

// rewriteModel returns body with its top-level "model" replaced by the
// table's target, and whether it changed. Other fields are kept as they
// were sent (their order may change). A body that is not a JSON object,
// or names a model outside the table, is left alone.
func rewriteModel(body []byte, table map[string]string) ([]byte, bool) {
	if len(table) == 0 || len(body) == 0 {
		return nil, false
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return nil, false
	}
	var model string
	if json.Unmarshal(fields["model"], &model) != nil {
		return nil, false
	}
	to, ok := table[model]
	if !ok || to == model {
		return nil, false
	}
	v, err := json.Marshal(to)
	if err != nil {
		return nil, false
	}
	fields["model"] = v
	out, err := json.Marshal(fields)
	if err != nil {
		return nil, false
	}
	return out, true
}

// rewrite applies the static model rewrite table to the request body when
// the body mode lets tollgate replace it: BUFFERED (and a complete
// BUFFERED_PARTIAL body), STREAMED with the chunks held, and
// FULL_DUPLEX_STREAMED. The rewritten body is what tollgate prices and
// routes; it goes to Envoy with the route.
func (x *exchange) rewrite() {
	if x.headersOnly || len(x.cfg.ModelRewrites) == 0 {
		return
	}
	if out, ok := rewriteModel(x.body, x.cfg.ModelRewrites); ok {
		x.rewrittenFrom, x.rewrittenTo = modelOf(x.body), modelOf(out)
		x.log.Debug("model rewritten", "request", x.id, "from", x.rewrittenFrom, "to", x.rewrittenTo)
		x.body, x.newBody = out, out
	}
}

// restoresModel reports whether response bodies get the client's model
// name back: the request was rewritten and the response body mode lets
// tollgate replace chunks (STREAMED or FULL_DUPLEX_STREAMED). Envoy drops
// the response's Content-Length in those modes, since chunks may change
// length, so the client reads the body to its end.
func (x *exchange) restoresModel() bool {
	return x.rewrittenTo != "" && (x.respMode == extprocfilterv3.ProcessingMode_STREAMED ||
		x.respMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED)
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
	r := responseBodyReply()
	if out := x.restoreModel(chunk); !bytes.Equal(out, chunk) {
		r.GetResponseBody().Response.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: out}}
	}
	return r
}

// bufferedBodyReply answers a BUFFERED body: the route, and the rewritten
// body with its Content-Length when there is one (Envoy checks that they
// agree).
func (x *exchange) bufferedBodyReply(mut *extprocv3.HeaderMutation) *extprocv3.ProcessingResponse {
	r := requestBodyReply(mut)
	if x.newBody == nil {
		return r
	}
	if mut == nil {
		mut = &extprocv3.HeaderMutation{}
		r.GetRequestBody().Response.HeaderMutation = mut
	}
	mut.SetHeaders = append(mut.SetHeaders, setHeader("content-length", fmt.Sprint(len(x.newBody))))
	sortHeaders(mut.SetHeaders)
	r.GetRequestBody().Response.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: x.newBody}}
	return r
}

// streamedChunkReply answers one held STREAMED chunk: with a rewritten
// body, the first chunk carries all of it and the others are cleared.
func (x *exchange) streamedChunkReply(first bool) *extprocv3.ProcessingResponse {
	r := requestBodyReply(nil)
	switch {
	case x.newBody == nil:
	case first:
		r.GetRequestBody().Response.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: x.newBody}}
	default:
		r.GetRequestBody().Response.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}
	}
	return r
}
