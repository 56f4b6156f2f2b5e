package intake

import (
	"context"
	"errors"

	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/extproc/request/tokenize"
)

// counted is what promptTokens counted for a prompt.
type counted struct {
	ids []uint32
	n   int
	// exact is false when n is an estimate and ids is nil.
	exact bool
	// fallback is why the count is the estimate although the model's
	// tokenizer is exact: the chat template exceeded its render budget,
	// or the context ended first. Nil when it is not.
	fallback error
}

// promptTokens tokenizes a parsed request's text prompt with the model's
// tokenizer (its chat template for a chat request, when it has one). A
// conversation the chat template refuses is the client's error, as on the
// engine. A chat template that exceeds its render budget, or a ctx that
// ends first, leaves the estimate of the request's text.
func promptTokens(ctx context.Context, tok Tokenizer, r *openai.Request) (counted, *Rejection) {
	ids, n, err := tokenize.EncodePromptContext(ctx, tok, tokenize.Prompt{Model: r.Model, Text: r.Text, Messages: r.Messages, Tools: r.Tools}, nil)
	switch {
	case err == nil:
	case errors.Is(err, tokenize.ErrRenderBudget) || ctx.Err() != nil:
		return counted{n: estimateTokens(r), fallback: err}, nil
	default:
		return counted{}, &Rejection{Reason: ReasonBadRequest, Message: err.Error(), Param: "messages", Code: openai.CodeInvalidValue}
	}
	if !tokenize.ExactFor(tok, r.Model) {
		return counted{n: n}, nil
	}
	return counted{ids: ids, n: n, exact: true}, nil
}

// fallbackEstimator prices prompts an exact tokenizer could not count. It
// is never calibrated: the ratio is tokenize.DefaultBytesPerToken.
var fallbackEstimator = tokenize.NewEstimator()

// estimateTokens is the estimate of r's text, as --tokenizer estimate
// counts it before any calibration.
func estimateTokens(r *openai.Request) int {
	return fallbackEstimator.Estimate(r.Model, len(r.Text))
}

// PromptCount is what tollgate counts for one request body.
type PromptCount struct {
	Model string `json:"model"`
	// Tokens are the prompt token ids used for pricing and prefix
	// matching; null when the model's tokenizer only estimates.
	Tokens []uint32 `json:"tokens"`
	Count  int      `json:"count"`
	// Exact is false when Count is an estimate.
	Exact bool `json:"exact"`
	// Tokenizer names the tokenizer that served the model.
	Tokenizer string `json:"tokenizer"`
	// Estimated says why a model with an exact tokenizer was priced by
	// the estimate (its chat template exceeded the render budget); empty
	// when it was not.
	Estimated string `json:"estimated,omitempty"`
}

// CountPrompt parses one request body of kind and tokenizes it as serve
// does (tollgate tokenize). A request serve would reject returns the
// *Rejection serve would answer with; once ctx is done, tokenizing stops
// and the context's error is returned. maxBodyBytes must be positive.
func CountPrompt(ctx context.Context, tok Tokenizer, kind openai.Kind, body []byte, maxBodyBytes int) (*PromptCount, error) {
	if len(body) > maxBodyBytes {
		return nil, BodyTooLarge(maxBodyBytes)
	}
	r, err := openai.Parse(kind, body)
	if err != nil {
		return nil, badRequest(err)
	}
	out := &PromptCount{Model: r.Model, Tokenizer: tok.Name()}
	if m, ok := tok.(*tokenize.Mapping); ok {
		out.Tokenizer = m.For(r.Model).Name()
	}
	switch {
	case len(r.TokenIDs) > 0:
		out.Tokens, out.Count, out.Exact = r.TokenIDs, len(r.TokenIDs), true
	case r.Text != "":
		c, rej := promptTokens(ctx, tok, r)
		switch {
		case rej != nil:
			return nil, rej
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case c.fallback != nil:
			out.Estimated = c.fallback.Error()
		}
		out.Tokens, out.Count, out.Exact = c.ids, c.n, c.exact
	}
	return out, nil
}
