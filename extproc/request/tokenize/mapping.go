package tokenize

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Mapping is a Tokenizer that serves each model with its own tokenizer
// (--model-tokenizer MODEL=SPEC) and every other model with a default one
// (--tokenizer). It is immutable and safe for concurrent use.
type Mapping struct {
	def     Tokenizer
	byModel map[string]Tokenizer
}

// NewMapping returns a tokenizer dispatching on the request's model name.
func NewMapping(def Tokenizer, byModel map[string]Tokenizer) (*Mapping, error) {
	if def == nil {
		return nil, fmt.Errorf("tokenizer mapping: no default tokenizer")
	}
	m := &Mapping{def: def, byModel: make(map[string]Tokenizer, len(byModel))}
	for model, t := range byModel {
		if model == "" || t == nil {
			return nil, fmt.Errorf("tokenizer mapping: empty model name or tokenizer")
		}
		m.byModel[model] = t
	}
	return m, nil
}

// ParseModelSpec splits a --model-tokenizer value, MODEL=SPEC.
func ParseModelSpec(v string) (model, spec string, err error) {
	model, spec, ok := strings.Cut(v, "=")
	model, spec = strings.TrimSpace(model), strings.TrimSpace(spec)
	if !ok || model == "" || spec == "" {
		return "", "", fmt.Errorf("--model-tokenizer %q: want MODEL=SPEC, e.g. Qwen/Qwen3-8B=hf:/models/qwen3", v)
	}
	return model, spec, nil
}

// NewFromSpecs builds the tokenizer of a --tokenizer default and the
// --model-tokenizer MODEL=SPEC values; with no per-model values it is the
// default tokenizer itself. Every problem is reported, joined.
func NewFromSpecs(defSpec string, modelSpecs []string) (Tokenizer, error) {
	def, err := New(defSpec)
	if err != nil {
		err = fmt.Errorf("--tokenizer: %w", err)
	}
	if len(modelSpecs) == 0 {
		return def, err
	}
	errs := []error{}
	if err != nil {
		errs = append(errs, err)
	}
	byModel := map[string]Tokenizer{}
	loaded := map[string]Tokenizer{} // one load per distinct spec
	for _, v := range modelSpecs {
		model, spec, perr := ParseModelSpec(v)
		if perr != nil {
			errs = append(errs, perr)
			continue
		}
		if _, dup := byModel[model]; dup {
			errs = append(errs, fmt.Errorf("--model-tokenizer: model %q is mapped twice", model))
			continue
		}
		t, ok := loaded[spec]
		if !ok {
			if t, perr = New(spec); perr != nil {
				errs = append(errs, fmt.Errorf("--model-tokenizer %s: %w", model, perr))
				continue
			}
			loaded[spec] = t
		}
		byModel[model] = t
	}
	if len(errs) > 0 {
		return nil, joinErrors(errs)
	}
	return NewMapping(def, byModel)
}

// For returns the tokenizer that serves model.
func (m *Mapping) For(model string) Tokenizer {
	if t, ok := m.byModel[model]; ok {
		return t
	}
	return m.def
}

// Encode tokenizes text with the model's tokenizer.
func (m *Mapping) Encode(model, text string, dst []uint32) ([]uint32, int) {
	return m.For(model).Encode(model, text, dst)
}

// Exact reports whether every mapped tokenizer, and the default, return
// real ids. Callers that tokenize one model should ask ExactFor.
func (m *Mapping) Exact() bool {
	if !m.def.Exact() {
		return false
	}
	for _, t := range m.byModel {
		if !t.Exact() {
			return false
		}
	}
	return true
}

// ExactFor reports whether model's tokenizer returns real ids.
func (m *Mapping) ExactFor(model string) bool { return m.For(model).Exact() }

// Name lists the mapping: the default spec, then model=spec pairs sorted.
func (m *Mapping) Name() string {
	models := make([]string, 0, len(m.byModel))
	for model := range m.byModel {
		models = append(models, model)
	}
	sort.Strings(models)
	var sb strings.Builder
	sb.WriteString(m.def.Name())
	for _, model := range models {
		sb.WriteString(" " + model + "=" + m.byModel[model].Name())
	}
	return sb.String()
}

// Observe feeds the model's tokenizer.
func (m *Mapping) Observe(model string, textBytes, promptTokens int) {
	m.For(model).Observe(model, textBytes, promptTokens)
}

// HasChatTemplateFor reports whether model's tokenizer renders chat
// templates.
func (m *Mapping) HasChatTemplateFor(model string) bool {
	c, ok := m.For(model).(ChatEncoder)
	return ok && c.HasChatTemplateFor(model)
}

// EncodeChat renders and encodes a chat request with model's tokenizer.
func (m *Mapping) EncodeChat(ctx context.Context, model string, messages, tools []byte, dst []uint32) ([]uint32, int, error) {
	c, ok := m.For(model).(ChatEncoder)
	if !ok {
		return dst, 0, fmt.Errorf("model %q has no chat template", model)
	}
	return c.EncodeChat(ctx, model, messages, tools, dst)
}

// EncodeContext tokenizes text with the model's tokenizer, stopping soon
// after ctx is done when that tokenizer can.
func (m *Mapping) EncodeContext(ctx context.Context, model, text string, dst []uint32) ([]uint32, int, error) {
	t := m.For(model)
	if c, ok := t.(ContextEncoder); ok {
		return c.EncodeContext(ctx, model, text, dst)
	}
	ids, n := t.Encode(model, text, dst)
	return ids, n, nil
}

// ExactFor reports whether t returns real ids for model.
func ExactFor(t Tokenizer, model string) bool {
	if m, ok := t.(interface{ ExactFor(string) bool }); ok {
		return m.ExactFor(model)
	}
	return t.Exact()
}

func joinErrors(errs []error) error { return errors.Join(errs...) }

// Kind names the kind of tokenizer that serves model: "estimate",
// "tiktoken" or "hf" (the part of its spec before the colon).
func Kind(t Tokenizer, model string) string {
	if m, ok := t.(*Mapping); ok {
		t = m.For(model)
	}
	name, _, _ := strings.Cut(t.Name(), ":")
	return name
}
