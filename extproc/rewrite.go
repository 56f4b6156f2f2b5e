package extproc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollgate/tollgate/extproc/request/openai"
)

// MaxModelRewrites bounds the static rewrite table.
const MaxModelRewrites = 1024

// MaxRewriteWeight bounds the weight of one rewrite target; it is the
// InferenceModelRewrite API's own bound.
const MaxRewriteWeight = 1000000

// MaxRewriteTargets bounds the targets of one rewrite.
const MaxRewriteTargets = 64

// RewriteTarget is one model a rewrite sends requests to, with its share
// of the rewrite's requests (weight over the sum of the targets' weights).
type RewriteTarget struct {
	Model  string
	Weight uint32
}

// ParseModelRewrite parses one --model-rewrite value: FROM=TO, or weighted
// targets FROM=TO*WEIGHT,TO*WEIGHT,... (a missing weight is 1), as an
// InferenceModelRewrite rule splits traffic.
func ParseModelRewrite(s string) (from string, targets []RewriteTarget, err error) {
	bad := fmt.Errorf("invalid model rewrite %q: want FROM=TO or FROM=TO*WEIGHT,TO*WEIGHT,..., names of 1 to %d bytes, weights 1 to %d",
		s, openai.MaxModelNameBytes, MaxRewriteWeight)
	from, list, ok := strings.Cut(s, "=")
	from = strings.TrimSpace(from)
	if !ok || from == "" || len(from) > openai.MaxModelNameBytes {
		return "", nil, bad
	}
	for t := range strings.SplitSeq(list, ",") {
		name, w, weighted := strings.Cut(t, "*")
		name = strings.TrimSpace(name)
		weight := uint64(1)
		if weighted {
			if weight, err = strconv.ParseUint(strings.TrimSpace(w), 10, 32); err != nil {
				return "", nil, bad
			}
		}
		if name == "" || len(name) > openai.MaxModelNameBytes || weight < 1 || weight > MaxRewriteWeight {
			return "", nil, bad
		}
		targets = append(targets, RewriteTarget{Model: name, Weight: uint32(weight)})
	}
	if len(targets) > MaxRewriteTargets {
		return "", nil, fmt.Errorf("invalid model rewrite %q: %d targets exceed %d", s, len(targets), MaxRewriteTargets)
	}
	return from, targets, nil
}

// validRewrites reports the first invalid entry of a rewrite table.
func validRewrites(table map[string][]RewriteTarget) error {
	if len(table) > MaxModelRewrites {
		return fmt.Errorf("%d model rewrites exceed %d", len(table), MaxModelRewrites)
	}
	for from, ts := range table {
		if from == "" || len(from) > openai.MaxModelNameBytes {
			return fmt.Errorf("model rewrite of %q: want a name of 1 to %d bytes", from, openai.MaxModelNameBytes)
		}
		if err := validTargets(strconv.Quote(from), ts); err != nil {
			return err
		}
	}
	return nil
}

// validTargets reports the first invalid target of the rewrite of what.
func validTargets(what string, ts []RewriteTarget) error {
	if len(ts) == 0 || len(ts) > MaxRewriteTargets {
		return fmt.Errorf("model rewrite of %s has %d targets, want 1 to %d", what, len(ts), MaxRewriteTargets)
	}
	for _, t := range ts {
		if t.Model == "" || len(t.Model) > openai.MaxModelNameBytes || t.Weight < 1 || t.Weight > MaxRewriteWeight {
			return fmt.Errorf("model rewrite of %s: target %q weight %d: want a name of 1 to %d bytes and a weight from 1 to %d",
				what, t.Model, t.Weight, openai.MaxModelNameBytes, MaxRewriteWeight)
		}
	}
	return nil
}

// pickTarget chooses a target with probability weight/total; draw(n)
// returns a uniform number in [0, n).
func pickTarget(ts []RewriteTarget, draw func(uint64) uint64) string {
	if len(ts) == 1 {
		return ts[0].Model
	}
	var total uint64
	for _, t := range ts {
		total += uint64(t.Weight)
	}
	r := draw(total)
	for _, t := range ts {
		if r < uint64(t.Weight) {
			return t.Model
		}
		r -= uint64(t.Weight)
	}
	return ts[len(ts)-1].Model
}

// rewriteField returns body with its top-level "model" field m replaced
// by one of the table's targets for it (chosen by weight with draw), the
// model it replaced and the one it wrote, and whether it changed. The new
// value is spliced in place of the old: every other byte is kept as it was
// sent. A body without the field, or naming a model outside the table, is
// left alone.
func rewriteField(body []byte, m openai.ModelField, table *rewriteTable, draw func(uint64) uint64) (out []byte, from, to string, ok bool) {
	if m.End == 0 || table.empty() {
		return nil, "", "", false
	}
	ts := table.targets(m.Name)
	if len(ts) == 0 {
		return nil, "", "", false
	}
	to = pickTarget(ts, draw)
	if to == m.Name {
		return nil, "", "", false
	}
	v, err := json.Marshal(to)
	if err != nil {
		return nil, "", "", false
	}
	out = make([]byte, 0, len(body)-(m.End-m.Start)+len(v))
	out = append(append(append(out, body[:m.Start]...), v...), body[m.End:]...)
	return out, m.Name, to, true
}

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
	out, from, to, ok := rewriteField(x.body, m, x.p.rewrites.Load(), rand.Uint64N)
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
	r := responseBodyReply()
	if out := x.restoreModel(chunk); !bytes.Equal(out, chunk) {
		r.GetResponseBody().Response.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: out}}
	}
	return r
}

// bufferedResponseReply answers a BUFFERED response body, the whole body
// in one message. With the client's model name restored, the new body
// goes with a Content-Length of its length in the same reply: Envoy still
// holds the response headers in this mode, applies the header mutation
// and then rejects a body mutation whose length differs from the
// Content-Length (the upstream's, unless replaced).
func (x *exchange) bufferedResponseReply(body []byte) *extprocv3.ProcessingResponse {
	r := responseBodyReply()
	out := x.restoreModel(body)
	if bytes.Equal(out, body) {
		return r
	}
	r.GetResponseBody().Response.HeaderMutation = &extprocv3.HeaderMutation{
		SetHeaders: []*corev3.HeaderValueOption{setHeader("content-length", strconv.Itoa(len(out)))},
	}
	r.GetResponseBody().Response.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: out}}
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
