package tokenize

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"runtime"
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
// error now rather than a wrong count on every request. It is compiled
// metered (meterTemplate), and the metered template must render the probe
// conversations as the template itself does.
func NewChatTemplate(source string, special map[string]string) (*ChatTemplate, error) {
	plain, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	metered, err := jinja.Compile(meterTemplate(source))
	if err != nil {
		return nil, fmt.Errorf("chat template: a tollgate bug: the metered template does not compile (please report it): %w", err)
	}
	c := &ChatTemplate{tmpl: metered, parts: contentLoop.MatchString(source), vars: map[string]jinja.Value{}}
	for k, v := range special {
		c.vars[k] = jinja.NewString(v)
	}
	unmetered := *c
	unmetered.tmpl = plain
	// Templates may reject a system message (Gemma 1 and 2) or require one;
	// either probe passing is enough.
	var probeErr error
	for _, probe := range []string{
		`[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"a"},{"role":"user","content":"u"}]`,
		`[{"role":"user","content":"u"},{"role":"assistant","content":"a"},{"role":"user","content":"u"}]`,
	} {
		want, err := unmetered.Render([]byte(probe), nil)
		if err != nil {
			probeErr = cmp.Or(probeErr, err)
			continue
		}
		got, err := c.Render([]byte(probe), nil)
		if err != nil {
			return nil, fmt.Errorf("chat template: a tollgate bug: the metered template fails where the template renders (please report it): %w", err)
		}
		if got != want {
			return nil, fmt.Errorf("chat template: a tollgate bug: metering changed its output to %q from %q (please report it)", got, want)
		}
		return c, nil
	}
	return nil, fmt.Errorf("chat template cannot render a plain conversation: %w", probeErr)
}

// Render is RenderContext without a context.
func (c *ChatTemplate) Render(messages, tools []byte) (string, error) {
	out, _, err := c.RenderContext(context.Background(), messages, tools)
	return out, err
}

// RenderContext renders a chat request's messages and tools (the raw JSON
// of the request members; tools may be nil) with add_generation_prompt
// true, and says what the render cost. Messages become template input the
// way vLLM builds it: each message is rebuilt as {role, content,
// tool_calls, tool_call_id, name}; content is a string with its text
// parts joined by "\n", or, for a template that loops over content, a list
// of {"type": "text", "text"} parts; tool call arguments given as a JSON
// object string are parsed to an object.
//
// The render stops with a *BudgetError once it exceeds the render budget
// of its input's size, and with the context's error once ctx is done.
func (c *ChatTemplate) RenderContext(ctx context.Context, messages, tools []byte) (string, RenderCost, error) {
	m := newMeter(ctx, len(messages)+len(tools))
	conv, err := c.conversation(messages)
	if err != nil {
		return "", m.cost, err
	}
	toolsVal := jinja.None()
	if len(tools) > 0 && string(tools) != "null" {
		if toolsVal, err = decodeValue(tools); err != nil {
			return "", m.cost, fmt.Errorf("tools: %w", err)
		}
	}
	if err := m.charge(0, 0); err != nil {
		return "", m.cost, err
	}
	meters := m.callables()
	data := make(map[string]jinja.Value, len(c.vars)+len(meters)+3)
	for k, v := range c.vars {
		data[k] = v
	}
	for k, v := range meters {
		data[k] = v
	}
	data["messages"] = conv
	data["tools"] = toolsVal
	data["add_generation_prompt"] = jinja.NewBool(true)
	out, err := c.tmpl.RenderValues(data)
	if err != nil {
		return "", m.cost, fmt.Errorf("chat template: %w", err)
	}
	return out, m.cost, nil
}

// conversation decodes the messages array into template input, one
// message at a time, keeping only what the input holds.
func (c *ChatTemplate) conversation(messages []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(messages))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return jinja.Undefined(), errors.New("messages: not an array")
	}
	var conv []jinja.Value
	for dec.More() {
		if len(conv)%yieldSteps == yieldSteps-1 {
			runtime.Gosched() // let the small requests' goroutines run
		}
		m, err := decodeMessage(dec)
		if err != nil {
			return jinja.Undefined(), err
		}
		conv = append(conv, c.message(m))
	}
	if _, err := dec.Token(); err != nil {
		return jinja.Undefined(), fmt.Errorf("messages: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("messages: trailing data after the JSON value")
	}
	return jinja.NewList(conv), nil
}

// wireMessage holds the members of a request message that template input
// keeps; absent members are undefined.
type wireMessage struct {
	role, content, toolCalls, toolCallID, name jinja.Value
}

// decodeMessage reads one element of the messages array, decoding the
// members a message keeps (the last of repeated keys) and skipping the
// rest.
func decodeMessage(dec *json.Decoder) (wireMessage, error) {
	var m wireMessage
	if tok, err := dec.Token(); err != nil {
		return m, fmt.Errorf("messages: %w", err)
	} else if tok != json.Delim('{') {
		return m, errors.New("messages: an element is not an object")
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return m, fmt.Errorf("messages: %w", err)
		}
		var dst *jinja.Value
		switch k {
		case "role":
			dst = &m.role
		case "content":
			dst = &m.content
		case "tool_calls":
			dst = &m.toolCalls
		case "tool_call_id":
			dst = &m.toolCallID
		case "name":
			dst = &m.name
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return m, fmt.Errorf("messages: %w", err)
			}
			continue
		}
		if *dst, err = decodeNext(dec); err != nil {
			return m, fmt.Errorf("messages: %w", err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return m, fmt.Errorf("messages: %w", err)
	}
	return m, nil
}

// message rebuilds one message as template input.
func (c *ChatTemplate) message(m wireMessage) jinja.Value {
	out := jinja.NewDict()
	d := out.AsDict()
	role, content := m.role, m.content
	d.Set("role", role)
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
	} else if content.IsString() {
		d.Set("content", content)
	} else {
		d.Set("content", jinja.NewString(strings.Join(texts, "\n")))
	}
	isRole := func(r string) bool { return role.IsString() && role.AsString() == r }
	if calls := m.toolCalls; isRole("assistant") && calls.IsList() {
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
	if id := m.toolCallID; isRole("tool") && id.IsString() {
		d.Set("tool_call_id", id)
	}
	if name := m.name; name.IsString() {
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
