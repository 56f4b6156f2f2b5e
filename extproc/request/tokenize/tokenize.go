package tokenize

import (
	"fmt"
	"os"
	"strings"
)

// Tokenizer counts, and where it can, produces, the tokens of prompt text.
type Tokenizer interface {
	// Encode tokenizes text for model. An exact tokenizer appends the ids
	// to dst and returns the extended slice and the number appended; the
	// estimator returns nil ids and an estimated count.
	Encode(model, text string, dst []uint32) (ids []uint32, n int)
	// Exact reports whether Encode returns real token ids.
	Exact() bool
	// Name identifies the tokenizer, as its --tokenizer spec.
	Name() string
	// Observe feeds back a worker's reported prompt_tokens for a prompt of
	// textBytes bytes, so an estimating tokenizer can calibrate; exact
	// tokenizers ignore it.
	Observe(model string, textBytes, promptTokens int)
}

// DefaultSpec is the --tokenizer default.
const DefaultSpec = "estimate"

// New returns the tokenizer a --tokenizer spec names: "estimate" (or
// empty), "tiktoken:<encoding>" or "hf:<path>", where path is a Hugging
// Face model directory (tokenizer.json, tokenizer_config.json, optionally
// chat_template.jinja) or a tokenizer.json file.
func New(spec string) (Tokenizer, error) {
	switch {
	case spec == "" || spec == "estimate":
		return NewEstimator(), nil
	case strings.HasPrefix(spec, "tiktoken:"):
		return NewTiktoken(strings.TrimPrefix(spec, "tiktoken:"))
	case strings.HasPrefix(spec, "hf:"):
		path := strings.TrimPrefix(spec, "hf:")
		if path == "" {
			return nil, fmt.Errorf("tokenizer %q: missing the path to a model directory or tokenizer.json (hf:<path>)", spec)
		}
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			return LoadHFDir(path)
		}
		return LoadHF(path)
	}
	return nil, fmt.Errorf("unknown tokenizer %q: want estimate, tiktoken:<encoding> or hf:<model directory or tokenizer.json>", spec)
}

// exact provides the Tokenizer methods shared by exact tokenizers.
type exact struct{ name string }

func (e exact) Exact() bool              { return true }
func (e exact) Name() string             { return e.name }
func (e exact) Observe(string, int, int) {}
