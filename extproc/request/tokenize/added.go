package tokenize

import (
	"slices"
	"unicode"
	"unicode/utf8"
)

// hfAddedToken is one tokenizer.json added_tokens entry.
type hfAddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedVocab finds added tokens in text: at each position the longest
// token that starts there, leftmost first. Tokens are matched in the raw
// text, before normalization.
type addedVocab struct {
	// byFirst lists the tokens by first byte, longest first.
	byFirst [256][]addedToken
}

type addedToken struct {
	content        string
	id             uint32
	singleWord     bool
	lstrip, rstrip bool
}

func newAddedVocab(tokens []hfAddedToken) *addedVocab {
	if len(tokens) == 0 {
		return nil
	}
	a := &addedVocab{}
	for _, t := range tokens {
		if t.Content == "" || t.ID < 0 || t.ID > 1<<32-1 {
			continue
		}
		c := t.Content[0]
		a.byFirst[c] = append(a.byFirst[c], addedToken{t.Content, uint32(t.ID), t.SingleWord, t.LStrip, t.RStrip})
	}
	for i := range a.byFirst {
		slices.SortStableFunc(a.byFirst[i], func(x, y addedToken) int { return len(y.content) - len(x.content) })
	}
	return a
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

func isWordRuneBefore(s string, i int) bool {
	if i == 0 {
		return false
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return isWordRune(r)
}

func isWordRuneAt(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return isWordRune(r)
}
