package tokenize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// HFModel is the tokenizer of a Hugging Face model directory: tokenizer.json
// with tokenizer_config.json's special tokens, add_bos_token/add_eos_token
// and chat template. Completions encode with special tokens, chat requests
// render the chat template and encode the result without adding them again,
// as the engines do.
type HFModel struct {
	*BPE
	chat     *ChatTemplate // nil: the directory has no chat template
	toolChat *ChatTemplate // the "tool_use" named template, if any
}

// hfConfig is the part of tokenizer_config.json this package reads.
type hfConfig struct {
	ChatTemplate   json.RawMessage `json:"chat_template"`
	TokenizerClass string          `json:"tokenizer_class"`
	AddBOSToken    *bool           `json:"add_bos_token"`
	AddEOSToken    *bool           `json:"add_eos_token"`
}

// specialTokenKeys are the tokenizer_config.json special tokens a chat
// template sees as variables.
var specialTokenKeys = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// LoadHFDir reads a model directory: tokenizer.json, tokenizer_config.json
// and, when present, chat_template.jinja (which takes precedence over the
// config's chat_template, as in transformers).
func LoadHFDir(dir string) (*HFModel, error) {
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("hf model directory %s: %w", dir, err)
	}
	cfgData, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, fmt.Errorf("hf model directory %s: %w", dir, err)
	}
	jinjaFile, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("hf model directory %s: %w", dir, err)
	}
	m, err := ParseHFModel(data, cfgData, string(jinjaFile))
	if err != nil {
		return nil, fmt.Errorf("hf model directory %s: %w", dir, err)
	}
	m.name = "hf:" + dir
	return m, nil
}

// ParseHFModel builds a model tokenizer from the contents of tokenizer.json,
// tokenizer_config.json and an optional chat_template.jinja ("" for none).
func ParseHFModel(tokenizerJSON, configJSON []byte, templateFile string) (*HFModel, error) {
	t, err := ParseHF(tokenizerJSON)
	if err != nil {
		return nil, err
	}
	var cfg hfConfig
	if err := json.Unmarshal(configJSON, &cfg); err != nil {
		return nil, fmt.Errorf("parse tokenizer_config.json: %w", err)
	}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(configJSON, &raw) // valid: it decoded above
	special := map[string]string{}
	for _, k := range specialTokenKeys {
		if s, ok := tokenContent(raw[k]); ok {
			special[k] = s
		}
	}
	if err := t.applyAddSpecial(&cfg, special); err != nil {
		return nil, err
	}
	m := &HFModel{BPE: t}
	def, tool, err := chatTemplateSources(cfg.ChatTemplate)
	if err != nil {
		return nil, err
	}
	if templateFile != "" {
		def = templateFile
	}
	if def != "" {
		if m.chat, err = NewChatTemplate(def, special); err != nil {
			return nil, err
		}
	}
	if tool != "" {
		if m.toolChat, err = NewChatTemplate(tool, special); err != nil {
			return nil, fmt.Errorf("tool_use %w", err)
		}
	}
	return m, nil
}

// applyAddSpecial follows transformers' Llama and Gemma tokenizers, which
// rebuild the post-processor from add_bos_token and add_eos_token: a
// DeepSeek V3 tokenizer.json has no BOS in its post-processor, but its
// config asks for one, and the engines add it.
func (t *BPE) applyAddSpecial(cfg *hfConfig, special map[string]string) error {
	switch cfg.TokenizerClass {
	case "LlamaTokenizerFast", "LlamaTokenizer", "GemmaTokenizerFast", "GemmaTokenizer", "CodeLlamaTokenizerFast", "CodeLlamaTokenizer":
	default:
		return nil
	}
	if cfg.AddBOSToken == nil && cfg.AddEOSToken == nil {
		return nil
	}
	addBOS := cfg.AddBOSToken == nil || *cfg.AddBOSToken // the classes default to true
	addEOS := cfg.AddEOSToken != nil && *cfg.AddEOSToken
	id := func(key string) ([]uint32, error) {
		tok, ok := special[key]
		if !ok {
			return nil, fmt.Errorf("tokenizer_config.json asks to add the %s but defines none", key)
		}
		ids, _, _ := t.encode(context.Background(), tok, nil, false)
		if len(ids) != 1 {
			return nil, fmt.Errorf("tokenizer_config.json %s %q is not one token", key, tok)
		}
		return ids, nil
	}
	t.prefix, t.suffix = nil, nil
	var err error
	if addBOS {
		if t.prefix, err = id("bos_token"); err != nil {
			return err
		}
	}
	if addEOS {
		if t.suffix, err = id("eos_token"); err != nil {
			return err
		}
	}
	return nil
}

// tokenContent reads a special token given as a string or as an AddedToken
// object with a content member.
func tokenContent(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return s, true
	}
	var obj struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Content != "" {
		return obj.Content, true
	}
	return "", false
}

// chatTemplateSources reads chat_template: one string, or a list of
// {"name", "template"} of which "default" serves chat and "tool_use"
// requests with tools.
func chatTemplateSources(raw json.RawMessage) (def, tool string, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", "", nil
	}
	if json.Unmarshal(raw, &def) == nil {
		return def, "", nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", "", errors.New("tokenizer_config.json chat_template is neither a string nor a list of {name, template}")
	}
	for _, n := range named {
		switch n.Name {
		case "default":
			def = n.Template
		case "tool_use":
			tool = n.Template
		}
	}
	if def == "" && tool == "" {
		return "", "", errors.New(`tokenizer_config.json chat_template list has no "default" or "tool_use" template`)
	}
	if def == "" {
		def = tool
	}
	return def, tool, nil
}

// HasChatTemplate reports whether chat requests render a template.
func (m *HFModel) HasChatTemplate() bool { return m.chat != nil }

// EncodeChat renders a chat request's messages and tools (raw JSON) with
// the model's template and appends the ids of the result, without adding
// special tokens: the template writes them. It stops with a *BudgetError
// when the render exceeds its budget and with the context's error soon
// after ctx is done.
func (m *HFModel) EncodeChat(ctx context.Context, _ string, messages, tools []byte, dst []uint32) ([]uint32, int, error) {
	tmpl := m.chat
	if m.toolChat != nil && len(tools) > 0 && string(tools) != "null" {
		tmpl = m.toolChat
	}
	if tmpl == nil {
		return dst, 0, errors.New("the model has no chat template")
	}
	text, _, err := tmpl.RenderContext(ctx, messages, tools)
	if err != nil {
		return dst, 0, err
	}
	return m.encode(ctx, text, dst, false)
}
