package extproc

import "github.com/tollgate/tollgate/extproc/tokenize"

// Tokenizer counts prompt tokens (--tokenizer); see extproc/tokenize. It
// must be safe for concurrent use.
type Tokenizer = tokenize.Tokenizer

// defaultTokenizer is the tokenizer used when Config.Tokenizer is nil.
func defaultTokenizer() (Tokenizer, error) { return tokenize.New(tokenize.DefaultSpec) }
