package tokenize

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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
	return c.render(m, conv, toolsVal)
}

// render renders decoded template input.
func (c *ChatTemplate) render(m *meter, conv, toolsVal jinja.Value) (string, RenderCost, error) {
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
	d := jsonDecoder{b: messages}
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != '[' {
		return jinja.Undefined(), errors.New("messages: not an array")
	}
	d.depth, d.i = 1, d.i+1
	var conv []jinja.Value
	d.space()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
	} else {
		for more := true; more; {
			if len(conv)%yieldSteps == yieldSteps-1 {
				runtime.Gosched() // let the small requests' goroutines run
			}
			m, err := d.message()
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("messages: %w", err)
			}
			conv = append(conv, c.message(m, decodeValue))
			if more, err = d.next(']'); err != nil {
				return jinja.Undefined(), fmt.Errorf("messages: %w", err)
			}
		}
	}
	if err := d.end(); err != nil {
		return jinja.Undefined(), fmt.Errorf("messages: %w", err)
	}
	return jinja.NewList(conv), nil
}

// wireMessage holds the members of a request message that template input
// keeps; absent members are undefined.
type wireMessage struct {
	role, content, toolCalls, toolCallID, name jinja.Value
}

// message reads one element of the messages array, decoding the members a
// message keeps (the last of repeated keys) and checking the syntax of the
// rest.
func (d *jsonDecoder) message() (wireMessage, error) {
	var m wireMessage
	d.space()
	if d.i >= len(d.b) {
		return m, d.syntaxError("a value")
	}
	if d.b[d.i] != '{' {
		return m, errors.New("an element is not an object")
	}
	if err := d.open(); err != nil {
		return m, err
	}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		d.depth--
		return m, nil
	}
	for more := true; more; {
		k, err := d.key()
		if err != nil {
			return m, err
		}
		var dst *jinja.Value
		switch string(k) {
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
		}
		if dst == nil {
			err = d.skip()
		} else {
			*dst, err = d.value()
		}
		if err != nil {
			return m, err
		}
		if more, err = d.next('}'); err != nil {
			return m, err
		}
	}
	return m, nil
}

// message rebuilds one message as template input; decode reads a tool
// call's JSON arguments (decodeValue; the tests pass their oracle).
func (c *ChatTemplate) message(m wireMessage, decode func([]byte) (jinja.Value, error)) jinja.Value {
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
				if v, err := decode([]byte(args.AsString())); err == nil && v.IsDict() {
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
	d := jsonDecoder{b: data}
	v, err := d.value()
	if err != nil {
		return jinja.Undefined(), err
	}
	if err := d.end(); err != nil {
		return jinja.Undefined(), err
	}
	return v, nil
}
