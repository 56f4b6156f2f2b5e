package openai

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// message holds the raw members of one chat message or Responses input
// item that the rendering reads.
type message struct {
	Type, Role, Name, Content, ToolCalls, Arguments, Output []byte
}

func (m *message) decode(raw []byte, field string) *Error {
	return members(raw, field, []string{"type", "role", "name", "content", "tool_calls", "arguments", "output"},
		&m.Type, &m.Role, &m.Name, &m.Content, &m.ToolCalls, &m.Arguments, &m.Output)
}

// renderer builds Request.Text for chat and Responses requests.
type renderer struct {
	sb strings.Builder
}

// renderChat renders /v1/chat/completions messages and tools.
func (r *Request) renderChat(messages, tools []byte) *Error {
	switch valueKind(messages) {
	case kindAbsent, kindNull:
		return missing("messages")
	case kindArray:
	default:
		return wrongType("messages", "a non-empty array")
	}
	var w renderer
	// The text is shorter than the JSON it comes from.
	w.sb.Grow(len(messages) + len(tools))
	if err := w.tools(tools); err != nil {
		return err
	}
	n := 0
	err := forEach(messages, "messages", func(i int, elem []byte) *Error {
		n++
		return w.message(elem, "messages["+strconv.Itoa(i)+"]", true)
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return invalid("messages", "a non-empty array")
	}
	r.Text = w.sb.String()
	return nil
}

// renderResponses renders /v1/responses instructions, tools and input.
func (r *Request) renderResponses(input, instructions, tools []byte) *Error {
	var w renderer
	if err := w.tools(tools); err != nil {
		return err
	}
	sys, err := optString(instructions, "instructions")
	if err != nil {
		return err
	}
	if sys != "" {
		w.line("system", "", sys)
	}
	switch valueKind(input) {
	case kindAbsent, kindNull:
		return missing("input")
	case kindString:
		s, err := stringValue(input, "input")
		if err != nil {
			return err
		}
		w.line("user", "", s)
	case kindArray:
		n := 0
		err := forEach(input, "input", func(i int, elem []byte) *Error {
			n++
			return w.item(elem, "input["+strconv.Itoa(i)+"]")
		})
		if err != nil {
			return err
		}
		if n == 0 {
			return invalid("input", "a string or a non-empty array")
		}
	default:
		return wrongType("input", "a string or an array of input items")
	}
	r.Text = w.sb.String()
	return nil
}

func (w *renderer) tools(raw []byte) *Error {
	if !given(raw) {
		return nil
	}
	if valueKind(raw) != kindArray {
		return wrongType("tools", "an array")
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return wrongType("tools", "an array")
	}
	w.sb.WriteString("tools: ")
	w.sb.Write(buf.Bytes())
	w.sb.WriteByte('\n')
	return nil
}

// line writes "role[ name]: text\n".
func (w *renderer) line(role, name, text string) {
	w.head(role, name)
	w.sb.WriteString(text)
	w.sb.WriteByte('\n')
}

// head writes the "role[ name]: " that starts a line.
func (w *renderer) head(role, name string) {
	w.sb.WriteString(role)
	if name != "" {
		w.sb.WriteByte(' ')
		w.sb.WriteString(name)
	}
	w.sb.WriteString(": ")
}

// message renders one chat message (or a Responses message item).
func (w *renderer) message(raw []byte, field string, chat bool) *Error {
	var m message
	if err := m.decode(raw, field); err != nil {
		return err
	}
	role, err := stringValue(m.Role, field+".role")
	if err != nil {
		if !given(m.Role) {
			return missing(field + ".role")
		}
		return err
	}
	name, err := optString(m.Name, field+".name")
	if err != nil {
		return err
	}
	w.head(role, name)
	if err := w.content(m.Content, field+".content"); err != nil {
		return err
	}
	w.sb.WriteByte('\n')
	if !chat || !given(m.ToolCalls) {
		return nil
	}
	return forEach(m.ToolCalls, field+".tool_calls", func(i int, elem []byte) *Error {
		return w.toolCall(elem, field+".tool_calls["+strconv.Itoa(i)+"]")
	})
}

// toolCall renders one chat tool call: {"function":{"name","arguments"}}.
func (w *renderer) toolCall(raw []byte, field string) *Error {
	var function []byte
	if err := members(raw, field, []string{"function"}, &function); err != nil {
		return err
	}
	if !given(function) {
		return nil // a non-function tool call carries no text we count
	}
	var name, args []byte
	if err := members(function, field+".function", []string{"name", "arguments"}, &name, &args); err != nil {
		return err
	}
	return w.call(name, args, field+".function")
}

// call writes "tool_call name arguments\n"; arguments are a JSON-encoded
// string or, leniently, a JSON value rendered compactly.
func (w *renderer) call(nameRaw, argsRaw []byte, field string) *Error {
	name, err := optString(nameRaw, field+".name")
	if err != nil {
		return err
	}
	args := ""
	switch valueKind(argsRaw) {
	case kindAbsent, kindNull:
	case kindString:
		if args, err = stringValue(argsRaw, field+".arguments"); err != nil {
			return err
		}
	default:
		var buf bytes.Buffer
		if json.Compact(&buf, argsRaw) != nil {
			return wrongType(field+".arguments", "a string")
		}
		args = buf.String()
	}
	w.sb.WriteString("tool_call ")
	w.sb.WriteString(name)
	w.sb.WriteByte(' ')
	w.sb.WriteString(args)
	w.sb.WriteByte('\n')
	return nil
}

// item renders one Responses input item.
func (w *renderer) item(raw []byte, field string) *Error {
	var m message
	if err := m.decode(raw, field); err != nil {
		return err
	}
	typ, err := optString(m.Type, field+".type")
	if err != nil {
		return err
	}
	switch {
	case typ == "function_call":
		return w.call(m.Name, m.Arguments, field)
	case typ == "function_call_output":
		w.head("tool", "")
		if err := w.content(m.Output, field+".output"); err != nil {
			return err
		}
		w.sb.WriteByte('\n')
		return nil
	case typ == "message" || (typ == "" && given(m.Role)):
		return w.message(raw, field, false)
	case typ == "":
		return missing(field + ".type")
	}
	// Reasoning, item references, built-in tool calls: accepted, and
	// counted as nothing.
	return nil
}

// content writes the text of a content value: a string, or an array of
// parts whose text parts are joined by "\n". Non-text parts (images,
// audio, files) count as nothing. Absent or null content is empty.
func (w *renderer) content(raw []byte, field string) *Error {
	switch valueKind(raw) {
	case kindAbsent, kindNull:
		return nil
	case kindString:
		b, err := stringBytes(raw, field)
		w.sb.Write(b)
		return err
	case kindArray:
	default:
		return wrongType(field, "a string or an array of content parts")
	}
	texts := 0
	return forEach(raw, field, func(i int, elem []byte) *Error {
		pf := field + "[" + strconv.Itoa(i) + "]"
		var p struct{ Type, Text, Refusal []byte }
		if err := members(elem, pf, []string{"type", "text", "refusal"}, &p.Type, &p.Text, &p.Refusal); err != nil {
			return err
		}
		typ, err := stringValue(p.Type, pf+".type")
		if err != nil {
			if !given(p.Type) {
				return missing(pf + ".type")
			}
			return err
		}
		var text []byte
		switch typ {
		case "text", "input_text", "output_text":
			if text, err = stringBytes(p.Text, pf+".text"); err != nil {
				return err
			}
		case "refusal":
			if given(p.Refusal) {
				if text, err = stringBytes(p.Refusal, pf+".refusal"); err != nil {
					return err
				}
			}
		default:
			return nil
		}
		if texts > 0 {
			w.sb.WriteByte('\n')
		}
		texts++
		w.sb.Write(text)
		return nil
	})
}
