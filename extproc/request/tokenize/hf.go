package tokenize

import (
	"encoding/json"
	"fmt"
	"os"
)

// hfFile is the part of tokenizer.json this package reads.
type hfFile struct {
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         *hfModel        `json:"model"`
}

// LoadHF reads a tokenizer.json file.
func LoadHF(path string) (*BPE, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hf tokenizer: %w", err)
	}
	t, err := ParseHF(data)
	if err != nil {
		return nil, fmt.Errorf("hf tokenizer %s: %w", path, err)
	}
	t.name = "hf:" + path
	return t, nil
}

// ParseHF builds a tokenizer from the contents of a tokenizer.json file.
func ParseHF(data []byte) (*BPE, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	if f.Model == nil {
		return nil, fmt.Errorf("tokenizer.json has no model")
	}
	model, err := newBPE(f.Model)
	if err != nil {
		return nil, err
	}
	norm, err := newNormalizer(f.Normalizer)
	if err != nil {
		return nil, err
	}
	pre, _, err := newPreTokenizer(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	prefix, suffix, err := newPostProcessor(f.PostProcessor)
	if err != nil {
		return nil, err
	}
	t := &BPE{
		exact:     exact{name: "hf"},
		added:     newAddedVocab(f.AddedTokens),
		normalize: norm,
		pre:       pre,
		model:     model,
		prefix:    prefix,
		suffix:    suffix,
	}
	t.initPools()
	return t, nil
}

// hfPostProcessor is one tokenizer.json post_processor object.
type hfPostProcessor struct {
	Type          string                       `json:"type"`
	Single        []map[string]hfTemplatePiece `json:"single"`
	SpecialTokens map[string]struct {
		IDs []uint32 `json:"ids"`
	} `json:"special_tokens"`
	Cls        []json.RawMessage `json:"cls"`
	Sep        []json.RawMessage `json:"sep"`
	Processors []json.RawMessage `json:"processors"`
}

type hfTemplatePiece struct {
	ID string `json:"id"`
}

// newPostProcessor returns the ids added before and after a single
// sequence.
func newPostProcessor(raw json.RawMessage) (prefix, suffix []uint32, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, nil
	}
	var c hfPostProcessor
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, nil, fmt.Errorf("post_processor: %w", err)
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil, nil
	case "TemplateProcessing":
		seen := false
		for _, item := range c.Single {
			if _, ok := item["Sequence"]; ok {
				seen = true
				continue
			}
			st, ok := item["SpecialToken"]
			if !ok {
				return nil, nil, fmt.Errorf("post_processor TemplateProcessing: unknown template piece %v", item)
			}
			tok, ok := c.SpecialTokens[st.ID]
			if !ok {
				return nil, nil, fmt.Errorf("post_processor TemplateProcessing: special token %q is not defined", st.ID)
			}
			if seen {
				suffix = append(suffix, tok.IDs...)
			} else {
				prefix = append(prefix, tok.IDs...)
			}
		}
		return prefix, suffix, nil
	case "RobertaProcessing", "BertProcessing":
		cls, err1 := tokenPairID(c.Cls)
		sep, err2 := tokenPairID(c.Sep)
		if err1 != nil || err2 != nil {
			return nil, nil, fmt.Errorf("post_processor %s: cls and sep must be [token, id] pairs", c.Type)
		}
		return []uint32{cls}, []uint32{sep}, nil
	case "Sequence":
		for _, sub := range c.Processors {
			p, s, err := newPostProcessor(sub)
			if err != nil {
				return nil, nil, err
			}
			prefix = append(p, prefix...)
			suffix = append(suffix, s...)
		}
		return prefix, suffix, nil
	}
	return nil, nil, fmt.Errorf("post_processor type %q is not supported (supported: ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing, Sequence)", c.Type)
}

// tokenPairID reads the id of a ["token", id] pair.
func tokenPairID(pair []json.RawMessage) (uint32, error) {
	if len(pair) != 2 {
		return 0, fmt.Errorf("want a [token, id] pair")
	}
	var id uint32
	err := json.Unmarshal(pair[1], &id)
	return id, err
}
