package openai

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MaxModelNameBytes bounds a request's model name. Model names become
// queue keys, metric labels and parts of error bodies, so a longer one is
// answered 400 rather than carried.
const MaxModelNameBytes = 256

// Request is what admission needs from one inference request body.
type Request struct {
	Kind Kind
	// Model is the requested model, at most MaxModelNameBytes long; empty
	// only for KindGenerate, where it is optional.
	Model string
	// ModelField is the model with the byte range of its raw value in the
	// body, for a rewrite that replaces it in place.
	ModelField ModelField
	// Stream is the request's stream flag.
	Stream bool
	// MaxTokens is the output budget: max_completion_tokens, else
	// max_tokens (chat); max_tokens (completions); max_output_tokens
	// (responses); sampling_params.max_new_tokens (generate). 0 when absent.
	MaxTokens int
	// Text is the prompt text to tokenize, empty when the prompt is given
	// as token ids. A batch of prompts (a list of strings) is joined with
	// "\n". Chat messages and Responses input render, in order, as
	//
	//	tools: <the tools array as compact JSON>\n        (when tools are given)
	//	system: <instructions>\n                          (responses, when given)
	//	<role>[ <name>]: <text parts joined by "\n">\n    (each message)
	//	tool_call <name> <arguments>\n                   (each tool call)
	//	tool: <output>\n                                  (each function_call_output)
	//
	// so a conversation's rendering is a prefix of the rendering of any
	// conversation that continues it.
	Text string
	// TokenIDs is the prompt as token ids, flattened across a batch, when
	// the prompt is given as ids; its length is the exact prompt length.
	TokenIDs []uint32
	// Messages and Tools are the raw JSON of a chat request's messages and
	// tools members, for rendering the model's chat template; nil for
	// other kinds (and Tools when absent).
	Messages, Tools []byte
	// TextBytes is len(Text).
	TextBytes int
	// Hints are the routing and priority hints of the nvext extension.
	Hints Hints
}

// Hints are the nvext routing and priority hints. Nil pointers and empty
// values mean "not given"; headers, when present, take precedence (the
// caller applies that rule).
type Hints struct {
	// Priority is nvext.agent_hints.priority (Dynamo priority_jump input).
	Priority *int32
	// StrictPriority is nvext.agent_hints.strict_priority.
	StrictPriority *uint32
	// LatencySensitivity is the deprecated nvext.agent_hints.latency_sensitivity.
	LatencySensitivity *float64
	// BackendInstanceID pins a worker: nvext.decode_worker_id, else
	// nvext.backend_instance_id, given as an unsigned integer or a string.
	BackendInstanceID string
	// DPRank is nvext.dp_rank.
	DPRank *uint32
	// RequiredTaints is nvext.routing_constraints.required_taints, at most
	// MaxRequiredTaints of them (eligibility costs taints × workers).
	RequiredTaints []string
}

// body holds the raw top-level fields of every route.
type body struct {
	Model, Stream, MaxTokens, MaxCompletionTokens, MaxOutputTokens []byte
	Prompt, Messages, Tools, Input, Instructions, Text, InputIDs   []byte
	SamplingParams, Nvext                                          []byte
}

// field returns where a top-level member is kept, or nil to skip it.
func (b *body) field(key []byte) *[]byte {
	switch string(key) {
	case "model":
		return &b.Model
	case "stream":
		return &b.Stream
	case "max_tokens":
		return &b.MaxTokens
	case "max_completion_tokens":
		return &b.MaxCompletionTokens
	case "max_output_tokens":
		return &b.MaxOutputTokens
	case "prompt":
		return &b.Prompt
	case "messages":
		return &b.Messages
	case "tools":
		return &b.Tools
	case "input":
		return &b.Input
	case "instructions":
		return &b.Instructions
	case "text":
		return &b.Text
	case "input_ids":
		return &b.InputIDs
	case "sampling_params":
		return &b.SamplingParams
	case "nvext":
		return &b.Nvext
	}
	return nil
}

// Parse reads the body of a request to the route of kind. Keys match
// exactly (case-sensitively); of duplicate keys the last wins. Every error
// is an *Error with status 400.
func Parse(kind Kind, data []byte) (*Request, error) {
	r, err := parse(kind, data)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func parse(kind Kind, data []byte) (*Request, *Error) {
	var b body
	var model ModelField
	if err := topFields(data, func(key, val []byte, off int) *Error {
		if p := b.field(key); p != nil {
			*p = val
		}
		if string(key) == "model" {
			model.Start, model.End = off, off+len(val)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	r := &Request{Kind: kind, ModelField: model}
	var err *Error
	if r.Model, err = optString(b.Model, "model"); err != nil {
		return nil, err
	}
	r.ModelField.Name = r.Model
	if len(r.Model) > MaxModelNameBytes {
		return nil, invalid("model", fmt.Sprintf("at most %d bytes long (got %d)", MaxModelNameBytes, len(r.Model)))
	}
	if r.Model == "" && kind != KindGenerate {
		if given(b.Model) {
			return nil, invalid("model", "a non-empty string")
		}
		return nil, missing("model")
	}
	if r.Stream, err = optBool(b.Stream, "stream"); err != nil {
		return nil, err
	}
	if err = r.parsePrompt(kind, &b); err != nil {
		return nil, err
	}
	if err = r.parseMaxTokens(kind, &b); err != nil {
		return nil, err
	}
	if err = r.Hints.parse(b.Nvext); err != nil {
		return nil, err
	}
	r.TextBytes = len(r.Text)
	return r, nil
}

func (r *Request) parsePrompt(kind Kind, b *body) *Error {
	switch kind {
	case KindCompletions:
		return r.promptOrIDs(b.Prompt, "prompt", anyPrompt)
	case KindEmbeddings:
		return r.promptOrIDs(b.Input, "input", anyPrompt)
	case KindChatCompletions:
		r.Messages = b.Messages
		if given(b.Tools) {
			r.Tools = b.Tools
		}
		return r.renderChat(b.Messages, b.Tools)
	case KindResponses:
		return r.renderResponses(b.Input, b.Instructions, b.Tools)
	case KindGenerate:
		switch hasText, hasIDs := given(b.Text), given(b.InputIDs); {
		case hasText && hasIDs:
			return badRequest(CodeInvalidValue, "input_ids", "give either 'text' or 'input_ids', not both")
		case hasIDs:
			return r.promptOrIDs(b.InputIDs, "input_ids", idsPrompt)
		default:
			return r.promptOrIDs(b.Text, "text", textPrompt)
		}
	}
	return badRequest(CodeInvalidValue, "", "unknown route kind %d", kind)
}

func (r *Request) parseMaxTokens(kind Kind, b *body) *Error {
	var err *Error
	switch kind {
	case KindChatCompletions:
		if given(b.MaxCompletionTokens) {
			r.MaxTokens, err = optCount(b.MaxCompletionTokens, "max_completion_tokens")
			return err
		}
		r.MaxTokens, err = optCount(b.MaxTokens, "max_tokens")
	case KindCompletions:
		r.MaxTokens, err = optCount(b.MaxTokens, "max_tokens")
	case KindResponses:
		r.MaxTokens, err = optCount(b.MaxOutputTokens, "max_output_tokens")
	case KindGenerate:
		if !given(b.SamplingParams) {
			return nil
		}
		var maxNew []byte
		if err := forFields(b.SamplingParams, "sampling_params", "an object", func(key, val []byte) *Error {
			if string(key) == "max_new_tokens" {
				maxNew = val
			}
			return nil
		}); err != nil {
			return err
		}
		r.MaxTokens, err = optCount(maxNew, "sampling_params.max_new_tokens")
	case KindEmbeddings: // no output tokens
	}
	return err
}

// promptShape says which prompt forms a field accepts.
type promptShape struct {
	text, ids bool
	want      string
}

var (
	anyPrompt  = promptShape{true, true, "a string, an array of strings, an array of token ids, or an array of token id arrays"}
	textPrompt = promptShape{text: true, want: "a string or an array of strings"}
	idsPrompt  = promptShape{ids: true, want: "an array of token ids or an array of token id arrays"}
)

// promptOrIDs reads a prompt given, as shape allows, as a string, a list of
// strings, a list of token ids or a list of token id lists.
func (r *Request) promptOrIDs(raw []byte, field string, shape promptShape) *Error {
	switch k := valueKind(raw); {
	case k == kindAbsent || k == kindNull:
		return missing(field)
	case k == kindString && shape.text:
		s, err := stringValue(raw, field)
		r.Text = s
		return err
	case k != kindArray:
		return wrongType(field, shape.want)
	}
	var first byte
	n := 0
	var sb strings.Builder
	err := forEach(raw, field, func(i int, elem []byte) *Error {
		n++
		k := valueKind(elem)
		if i == 0 {
			first = k
		}
		if k != first {
			return wrongType(field, shape.want+", not a mix")
		}
		var err *Error
		switch {
		case k == kindString && shape.text:
			s, err := stringValue(elem, field+"["+strconv.Itoa(i)+"]")
			if err != nil {
				return err
			}
			if i > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(s)
		case k == kindNumber && shape.ids:
			id, ok := tokenID(trimSpace(elem))
			if !ok {
				return invalid(field+"["+strconv.Itoa(i)+"]", "a token id: an integer in [0, 4294967295]")
			}
			r.TokenIDs = append(r.TokenIDs, id)
		case k == kindArray && shape.ids:
			r.TokenIDs, err = appendIDs(r.TokenIDs, elem, field+"["+strconv.Itoa(i)+"]")
		default:
			return wrongType(field, shape.want)
		}
		return err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return invalid(field, "a non-empty string or array")
	}
	if first == kindString {
		r.Text = sb.String()
	} else if r.TokenIDs == nil {
		r.TokenIDs = []uint32{}
	}
	return nil
}

func (h *Hints) parse(raw []byte) *Error {
	if !given(raw) {
		return nil
	}
	var nv struct {
		AgentHints, BackendInstanceID, DecodeWorkerID, DPRank, RoutingConstraints []byte
	}
	if err := members(raw, "nvext", []string{"agent_hints", "backend_instance_id", "decode_worker_id", "dp_rank", "routing_constraints"},
		&nv.AgentHints, &nv.BackendInstanceID, &nv.DecodeWorkerID, &nv.DPRank, &nv.RoutingConstraints); err != nil {
		return err
	}
	if err := h.parseAgentHints(nv.AgentHints); err != nil {
		return err
	}
	var err *Error
	if h.BackendInstanceID, err = workerID(nv.BackendInstanceID, "nvext.backend_instance_id"); err != nil {
		return err
	}
	if id, err := workerID(nv.DecodeWorkerID, "nvext.decode_worker_id"); err != nil {
		return err
	} else if id != "" {
		h.BackendInstanceID = id
	}
	if given(nv.DPRank) {
		v, err := integer(nv.DPRank, "nvext.dp_rank", 0, math.MaxUint32, "an integer in [0, 4294967295]")
		if err != nil {
			return err
		}
		rank := uint32(v)
		h.DPRank = &rank
	}
	return h.parseConstraints(nv.RoutingConstraints)
}

func (h *Hints) parseAgentHints(raw []byte) *Error {
	if !given(raw) {
		return nil
	}
	var ah struct {
		Priority, StrictPriority, LatencySensitivity []byte
	}
	if err := members(raw, "nvext.agent_hints", []string{"priority", "strict_priority", "latency_sensitivity"},
		&ah.Priority, &ah.StrictPriority, &ah.LatencySensitivity); err != nil {
		return err
	}
	if given(ah.Priority) {
		v, err := integer(ah.Priority, "nvext.agent_hints.priority", math.MinInt32, math.MaxInt32, "a 32-bit integer")
		if err != nil {
			return err
		}
		p := int32(v)
		h.Priority = &p
	}
	if given(ah.StrictPriority) {
		v, err := integer(ah.StrictPriority, "nvext.agent_hints.strict_priority", 0, math.MaxUint32, "an integer in [0, 4294967295]")
		if err != nil {
			return err
		}
		p := uint32(v)
		h.StrictPriority = &p
	}
	if given(ah.LatencySensitivity) {
		const field = "nvext.agent_hints.latency_sensitivity"
		if valueKind(ah.LatencySensitivity) != kindNumber {
			return wrongType(field, "a number")
		}
		f, err := strconv.ParseFloat(string(trimSpace(ah.LatencySensitivity)), 64)
		if err != nil || math.IsInf(f, 0) {
			return invalid(field, "a finite number")
		}
		h.LatencySensitivity = &f
	}
	return nil
}

// workerID reads a worker id given as an unsigned integer or a string.
func workerID(raw []byte, field string) (string, *Error) {
	switch valueKind(raw) {
	case kindAbsent, kindNull:
		return "", nil
	case kindString:
		s, err := stringValue(raw, field)
		if err == nil && s == "" {
			err = invalid(field, "a non-empty string or an unsigned integer")
		}
		return s, err
	case kindNumber:
		s := string(trimSpace(raw))
		if _, err := strconv.ParseUint(s, 10, 64); err != nil {
			return "", invalid(field, "an unsigned 64-bit integer or a string")
		}
		return s, nil
	}
	return "", wrongType(field, "an unsigned integer or a string")
}

// MaxRequiredTaints bounds nvext.routing_constraints.required_taints.
const MaxRequiredTaints = 16

func (h *Hints) parseConstraints(raw []byte) *Error {
	if !given(raw) {
		return nil
	}
	var taints []byte
	if err := members(raw, "nvext.routing_constraints", []string{"required_taints"}, &taints); err != nil {
		return err
	}
	if !given(taints) {
		return nil
	}
	const field = "nvext.routing_constraints.required_taints"
	return forEach(taints, field, func(i int, elem []byte) *Error {
		if i >= MaxRequiredTaints {
			return invalid(field, "an array of at most "+strconv.Itoa(MaxRequiredTaints)+" strings")
		}
		s, err := stringValue(elem, field+"["+strconv.Itoa(i)+"]")
		if err != nil {
			return err
		}
		h.RequiredTaints = append(h.RequiredTaints, s)
		return nil
	})
}
