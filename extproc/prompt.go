package extproc

import (
	"github.com/tollgate/tollgate/extproc/openai"
	"github.com/tollgate/tollgate/extproc/tokenize"
)

// promptTokens tokenizes a parsed request's text prompt with the model's
// tokenizer (its chat template for a chat request, when it has one). exact
// is false when the count is an estimate and ids is nil. A conversation
// the chat template refuses is the client's error, as on the engine.
func promptTokens(tok Tokenizer, r *openai.Request) (ids []uint32, n int, exact bool, rej *rejection) {
	ids, n, err := tokenize.EncodePrompt(tok, tokenize.Prompt{Model: r.Model, Text: r.Text, Messages: r.Messages, Tools: r.Tools}, nil)
	if err != nil {
		return nil, 0, false, &rejection{reason: reasonBadRequest, message: err.Error(), param: "messages", errCode: openai.CodeInvalidValue}
	}
	exact = tokenize.ExactFor(tok, r.Model)
	if !exact {
		ids = nil
	}
	return ids, n, exact, nil
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
}

// RejectedRequest is the answer serve sends for a request it rejects.
type RejectedRequest struct {
	Status int
	Body   []byte
}

func (r *RejectedRequest) Error() string { return string(r.Body) }

// CountPrompt parses one request body of kind and tokenizes it as serve
// does (tollgate tokenize). A request serve would reject returns a
// *RejectedRequest with the status and body serve would send.
// maxBodyBytes <= 0 means DefaultMaxBodyBytes.
func CountPrompt(tok Tokenizer, kind openai.Kind, body []byte, maxBodyBytes int) (*PromptCount, error) {
	if maxBodyBytes <= 0 {
		maxBodyBytes = DefaultMaxBodyBytes
	}
	reject := func(r *rejection) error {
		return &RejectedRequest{Status: answerTable[r.reason].status, Body: r.body()}
	}
	if len(body) > maxBodyBytes {
		return nil, reject(bodyTooLarge(maxBodyBytes))
	}
	r, err := openai.Parse(kind, body)
	if err != nil {
		return nil, reject(badRequest(err))
	}
	out := &PromptCount{Model: r.Model, Tokenizer: tok.Name()}
	if m, ok := tok.(*tokenize.Mapping); ok {
		out.Tokenizer = m.For(r.Model).Name()
	}
	switch {
	case len(r.TokenIDs) > 0:
		out.Tokens, out.Count, out.Exact = r.TokenIDs, len(r.TokenIDs), true
	case r.Text != "":
		ids, n, exact, rej := promptTokens(tok, r)
		if rej != nil {
			return nil, reject(rej)
		}
		out.Tokens, out.Count, out.Exact = ids, n, exact
	}
	return out, nil
}
