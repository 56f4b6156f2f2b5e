package tokenize

import (
	"context"
	"errors"
	"fmt"
)

// Prompt is what tokenizing needs from one request.
type Prompt struct {
	Model string
	// Text is the prompt text: a completion prompt, or tollgate's plain
	// rendering of a chat conversation, used when the model's tokenizer has
	// no chat template.
	Text string
	// Messages and Tools are the raw JSON of a chat request's messages and
	// tools members (Tools may be nil); nil Messages means not a chat.
	Messages, Tools []byte
}

// ChatEncoder is a Tokenizer that can render a model's chat template.
type ChatEncoder interface {
	// HasChatTemplateFor reports whether chat requests for model render
	// a template.
	HasChatTemplateFor(model string) bool
	// EncodeChat renders a chat request with the model's template and
	// appends the ids of the result, without adding special tokens again.
	// The error is a *BudgetError when the render exceeded its budget,
	// the context's error once ctx is done, and otherwise means the
	// template refused the conversation.
	EncodeChat(ctx context.Context, model string, messages, tools []byte, dst []uint32) (ids []uint32, n int, err error)
}

// ContextEncoder is a Tokenizer whose encoding stops, with the context's
// error, soon after its context is done.
type ContextEncoder interface {
	EncodeContext(ctx context.Context, model, text string, dst []uint32) (ids []uint32, n int, err error)
}

// HasChatTemplateFor reports whether the directory had a chat template.
func (m *HFModel) HasChatTemplateFor(string) bool { return m.chat != nil }

// EncodePrompt is EncodePromptContext without a context.
func EncodePrompt(t Tokenizer, p Prompt, dst []uint32) (ids []uint32, n int, err error) {
	return EncodePromptContext(context.Background(), t, p, dst)
}

// EncodePromptContext tokenizes a request as the engine does: a chat
// request for a model whose tokenizer has a chat template renders it and
// encodes the result without adding special tokens; any other prompt
// encodes Text with them. The error is one of:
//
//   - a *BudgetError (errors.Is ErrRenderBudget): the chat template did
//     more work than its budget allows (see RenderStepsPerByte);
//   - the context's error: ctx ended first;
//   - anything else: the template refused the conversation. That is the
//     client's error: the engine would refuse it too.
func EncodePromptContext(ctx context.Context, t Tokenizer, p Prompt, dst []uint32) (ids []uint32, n int, err error) {
	if p.Messages != nil {
		if c, ok := t.(ChatEncoder); ok && c.HasChatTemplateFor(p.Model) {
			ids, n, err = c.EncodeChat(ctx, p.Model, p.Messages, p.Tools, dst)
			switch {
			case err == nil:
				return ids, n, nil
			case errors.Is(err, ErrRenderBudget) || ctx.Err() != nil:
				return dst, 0, err
			}
			return dst, 0, fmt.Errorf("the model's chat template cannot render these messages: %w", err)
		}
	}
	if c, ok := t.(ContextEncoder); ok {
		return c.EncodeContext(ctx, p.Model, p.Text, dst)
	}
	ids, n = t.Encode(p.Model, p.Text, dst)
	return ids, n, nil
}
