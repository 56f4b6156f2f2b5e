package mockworker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Endpoint paths served by the worker.
const (
	PathCompletions     = "/v1/completions"
	PathChatCompletions = "/v1/chat/completions"
	PathModels          = "/v1/models"
	PathHealth          = "/health"
	PathMetrics         = "/metrics"
)

// apiError is an error answer in the OpenAI shape:
// {"error":{"message","type","param","code"}}. Where vLLM has a message for
// the same fault, the message repeats vLLM's wording, capitals included, so
// clients see what a real worker would say.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

// badRequest returns a 400 apiError about param (empty for none).
func badRequest(param, format string, args ...any) *apiError {
	e := &apiError{Message: fmt.Sprintf(format, args...), Type: "BadRequestError", Code: http.StatusBadRequest}
	if param != "" {
		e.Param = &param
	}
	return e
}

// generateBody is the part of a completions or chat request the worker
// reads. Other fields (temperature, stop, ...) are accepted and ignored.
type generateBody struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	KVTransferParams *kvTransferParams `json:"kv_transfer_params"`
}

// kvTransferParams is vLLM's kv_transfer_params as its NIXL connector
// reads and writes them: a request with DoRemoteDecode asks for the prefill
// half only, and its answer carries the parameters (DoRemotePrefill and
// where the KV lies) that make the decode half fetch the prompt's KV
// instead of computing it.
type kvTransferParams struct {
	DoRemoteDecode  bool   `json:"do_remote_decode"`
	DoRemotePrefill bool   `json:"do_remote_prefill"`
	RemoteEngineID  string `json:"remote_engine_id"`
	RemoteRequestID string `json:"remote_request_id"`
	// RemoteBlockIDs is a list of block ids, or a list of such lists (one
	// per KV-cache group) from newer vLLM; the worker does not read it.
	RemoteBlockIDs any    `json:"remote_block_ids"`
	RemoteHost     string `json:"remote_host"`
	RemotePort     int    `json:"remote_port"`
	TPSize         int    `json:"tp_size"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// generateRequest is a validated completions or chat request.
type generateRequest struct {
	chat         bool
	model        string
	tokens       []int
	maxTokens    int
	stream       bool
	includeUsage bool
	kv           kvTransferParams // Zero without kv_transfer_params.
}

// parseGenerate decodes and validates a request body for the completions
// (chat false) or chat completions endpoint against cfg.
func parseGenerate(body []byte, chat bool, cfg Config) (*generateRequest, *apiError) {
	var b generateBody
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, badRequest("", "invalid JSON body: %v", err)
	}
	req := &generateRequest{chat: chat, model: b.Model, stream: b.Stream}
	if req.model == "" {
		req.model = cfg.Model
	}
	if req.model != cfg.Model {
		return nil, &apiError{
			Message: fmt.Sprintf("The model `%s` does not exist.", req.model),
			Type:    "NotFoundError", Code: http.StatusNotFound,
		}
	}
	if b.N != nil && *b.N != 1 {
		return nil, badRequest("n", "n must be 1, got %d: the mock worker produces one choice", *b.N)
	}
	if b.StreamOptions != nil {
		if !b.Stream {
			return nil, badRequest("stream_options", "Stream options can only be defined when `stream=True`.")
		}
		req.includeUsage = b.StreamOptions.IncludeUsage
	}

	if b.KVTransferParams != nil {
		req.kv = *b.KVTransferParams
		if req.kv.DoRemoteDecode && req.kv.DoRemotePrefill {
			return nil, badRequest("kv_transfer_params", "do_remote_decode and do_remote_prefill are exclusive")
		}
	}

	var err *apiError
	if chat {
		req.tokens, err = chatTokens(b.Messages)
	} else {
		req.tokens, err = promptTokens(b.Prompt)
	}
	if err != nil {
		return nil, err
	}

	req.maxTokens = cfg.DefaultMaxTokens
	switch {
	case b.MaxCompletionTokens != nil:
		req.maxTokens = *b.MaxCompletionTokens
	case b.MaxTokens != nil:
		req.maxTokens = *b.MaxTokens
	}
	if req.maxTokens < 1 {
		return nil, badRequest("max_tokens", "max_tokens must be at least 1, got %d", req.maxTokens)
	}
	if total := len(req.tokens) + req.maxTokens; total > cfg.MaxModelLen {
		return nil, badRequest("max_tokens",
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d in the completion). Please reduce the length of the prompt or completion.",
			cfg.MaxModelLen, total, len(req.tokens), req.maxTokens)
	}
	return req, nil
}

// promptTokens returns the tokens of a completions prompt: a string, an
// array of token ids, or a one-element batch of either.
func promptTokens(raw json.RawMessage) ([]int, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, badRequest("prompt", "prompt is required")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		if text == "" {
			return nil, badRequest("prompt", "prompt must not be empty")
		}
		return Tokenize(text), nil
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		if len(ids) == 0 {
			return nil, badRequest("prompt", "prompt must not be empty")
		}
		for _, id := range ids {
			if id < 0 {
				return nil, badRequest("prompt", "token id %d is negative", id)
			}
		}
		return ids, nil
	}
	var batch []json.RawMessage
	if json.Unmarshal(raw, &batch) == nil && len(batch) > 0 {
		if len(batch) > 1 {
			return nil, badRequest("prompt", "batched prompts are not supported: got %d prompts, want 1", len(batch))
		}
		if first := bytes.TrimSpace(batch[0]); len(first) > 0 && (first[0] == '"' || first[0] == '[') {
			return promptTokens(first)
		}
	}
	return nil, badRequest("prompt", "prompt must be a string, an array of token ids, or a one-element array of either")
}

// chatTokens renders messages with RenderChat and tokenizes the result.
// Content is a string, null, or an array of text parts.
func chatTokens(msgs []chatMessage) ([]int, *apiError) {
	if len(msgs) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	rendered := make([]ChatMessage, len(msgs))
	for i, m := range msgs {
		if m.Role == "" {
			return nil, badRequest("messages", "messages[%d].role is required", i)
		}
		content, err := chatContent(m.Content)
		if err != nil {
			return nil, badRequest("messages", "messages[%d].content: %v", i, err)
		}
		rendered[i] = ChatMessage{Role: m.Role, Content: content}
	}
	return Tokenize(RenderChat(rendered)), nil
}

// chatContent returns a message's text. Text parts are joined with "\n".
func chatContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return text, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("must be a string or an array of content parts")
	}
	texts := make([]string, len(parts))
	for i, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", fmt.Errorf("part %d has type %q: only text parts are supported", i, p.Type)
		}
		texts[i] = *p.Text
	}
	return strings.Join(texts, "\n"), nil
}

// usage is the OpenAI usage object, with prompt_tokens_details.cached_tokens
// as vLLM reports it: every prompt token not computed here, from the prefix
// cache or from a remote prefill.
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func newUsage(r Record) *usage {
	u := &usage{
		PromptTokens:     r.PromptTokens,
		CompletionTokens: r.CompletionTokens,
		TotalTokens:      r.PromptTokens + r.CompletionTokens,
	}
	u.PromptTokensDetails.CachedTokens = r.CachedTokens + r.TransferredTokens
	return u
}

// response is a completion, chat completion, or one streamed chunk of
// either.
type response struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	// Usage is omitted when nil; a streamed chunk of an include_usage
	// stream carries jsonNull, as OpenAI specifies, and the last one the
	// totals.
	Usage any `json:"usage,omitempty"`
	// KVTransferParams is set in the non-streamed answer to a RemoteDecode
	// request: where the decode half finds the prompt's KV.
	KVTransferParams *kvTransferParams `json:"kv_transfer_params,omitempty"`
}

// jsonNull encodes as null even where the field has omitempty.
var jsonNull = json.RawMessage("null")

type choice struct {
	Index        int           `json:"index"`
	Text         *string       `json:"text,omitempty"`    // Completions.
	Message      *chatResponse `json:"message,omitempty"` // Chat, whole response.
	Delta        *chatResponse `json:"delta,omitempty"`   // Chat, streamed chunk.
	Logprobs     *struct{}     `json:"logprobs"`          // Always null.
	FinishReason *string       `json:"finish_reason"`
}

type chatResponse struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

// finishLength is the finish reason of every finished request: the worker
// always stops at max_tokens.
const finishLength = "length"
