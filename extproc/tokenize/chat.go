package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/ardanlabs/jinja"
)

// ChatTemplate is a model's compiled Jinja chat template with the template
// variables the engines pass besides the conversation. It is immutable and
// safe for concurrent use.
type ChatTemplate struct {
	tmpl *jinja.Template
	// parts is true when the template loops over a message's content: it
	// then gets the content as a list of {type, text} parts, otherwise as
	// one string (vLLM's "openai" and "string" content formats).
	parts bool
	// vars are bos_token, eos_token and the other special tokens.
	vars map[string]jinja.Value
}

// contentLoop finds a loop over a message's content, the sign vLLM reads as
// the "openai" content format.
var contentLoop = regexp.MustCompile(`for\s+\w+\s+in\s+\w+(\[\s*['"]content['"]\s*\]|\.content)`)

// NewChatTemplate compiles a chat template. special holds the special
// token variables (bos_token, eos_token, ...) the template may read. The
// template must render a short conversation: one it cannot render is an
// error now rather than a wrong count on every request.
func NewChatTemplate(source string, special map[string]string) (*ChatTemplate, error) {
	tmpl, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	c := &ChatTemplate{tmpl: tmpl, parts: contentLoop.MatchString(source), vars: map[string]jinja.Value{}}
	for k, v := range special {
		c.vars[k] = jinja.NewString(v)
	}
	// Templates may reject a system message (Gemma 1 and 2) or require one;
	// either probe passing is enough.
	var probeErr error
	for _, probe := range []string{
		`[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"a"},{"role":"user","content":"u"}]`,
		`[{"role":"user","content":"u"},{"role":"assistant","content":"a"},{"role":"user","content":"u"}]`,
	} {
		if _, err := c.Render([]byte(probe), nil); err == nil {
			return c, nil
		} else if probeErr == nil {
			probeErr = err
		}
	}
	return nil, fmt.Errorf("chat template cannot render a plain conversation: %w", probeErr)
}

// Render renders a chat request's messages and tools (the raw JSON of the
// request members; tools may be nil) with add_generation_prompt true.
// Messages become template input the way vLLM builds it: each message is
// rebuilt as {role, content, tool_calls, tool_call_id, name}; content is a
// string with its text parts joined by "\n", or, for a template that loops
// over content, a list of {"type": "text", "text"} parts; tool call
// arguments given as a JSON object string are parsed to an object.
func (c *ChatTemplate) Render(messages, tools []byte) (string, error) {
	msgs, err := decodeValue(messages)
	if err != nil {
		return "", fmt.Errorf("messages: %w", err)
	}
	if !msgs.IsList() {
		return "", errors.New("messages: not an array")
	}
	conv := make([]jinja.Value, 0, msgs.AsList().Len())
	for _, m := range msgs.AsList().Items {
		if !m.IsDict() {
			return "", errors.New("messages: an element is not an object")
		}
		conv = append(conv, c.message(m.AsDict()))
	}
	toolsVal := jinja.None()
	if len(tools) > 0 && string(tools) != "null" {
		if toolsVal, err = decodeValue(tools); err != nil {
			return "", fmt.Errorf("tools: %w", err)
		}
	}
	data := make(map[string]jinja.Value, len(c.vars)+3)
	for k, v := range c.vars {
		data[k] = v
	}
	data["messages"] = jinja.NewList(conv)
	data["tools"] = toolsVal
	data["add_generation_prompt"] = jinja.NewBool(true)
	out, err := c.tmpl.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

// message rebuilds one message as template input.
func (c *ChatTemplate) message(m *jinja.Dict) jinja.Value {
	out := jinja.NewDict()
	d := out.AsDict()
	role, _ := m.Get("role")
	d.Set("role", role)
	content, _ := m.Get("content")
	var texts []string
	switch {
	case content.IsString():
		texts = []string{content.AsString()}
	case content.IsList():
		for _, p := range content.AsList().Items {
			if !p.IsDict() {
				continue
			}
			typ, _ := p.AsDict().Get("type")
			text, _ := p.AsDict().Get("text")
			if typ.IsString() && typ.AsString() == "text" && text.IsString() {
				texts = append(texts, text.AsString())
			}
		}
	}
	if c.parts {
		parts := make([]jinja.Value, len(texts))
		for i, t := range texts {
			p := jinja.NewDict()
			p.AsDict().Set("type", jinja.NewString("text"))
			p.AsDict().Set("text", jinja.NewString(t))
			parts[i] = p
		}
		d.Set("content", jinja.NewList(parts))
	} else {
		d.Set("content", jinja.NewString(strings.Join(texts, "\n")))
	}
	isRole := func(r string) bool { return role.IsString() && role.AsString() == r }
	if calls, ok := m.Get("tool_calls"); ok && isRole("assistant") && calls.IsList() {
		for _, call := range calls.AsList().Items {
			if !call.IsDict() {
				continue
			}
			fn, ok := call.AsDict().Get("function")
			if !ok || !fn.IsDict() {
				continue
			}
			if args, ok := fn.AsDict().Get("arguments"); ok && args.IsString() {
				if v, err := decodeValue([]byte(args.AsString())); err == nil && v.IsDict() {
					fn.AsDict().Set("arguments", v)
				}
			}
		}
		d.Set("tool_calls", calls)
	}
	if id, ok := m.Get("tool_call_id"); ok && isRole("tool") && id.IsString() {
		d.Set("tool_call_id", id)
	}
	if name, ok := m.Get("name"); ok && name.IsString() {
		d.Set("name", name)
	}
	return out
}

// decodeValue decodes JSON into template values, keeping object member
// order (tojson prints members in the order the client sent them).
func decodeValue(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeNext(dec)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func decodeNext(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeNext(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		case '{':
			out := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				v, err := decodeNext(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				out.AsDict().Set(k.(string), v)
			}
			_, err := dec.Token()
			return out, err
		}
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return jinja.NewInt(i), nil
		}
		f, err := t.Float64()
		if err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewFloat(f), nil
	case bool:
		return jinja.NewBool(t), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}
