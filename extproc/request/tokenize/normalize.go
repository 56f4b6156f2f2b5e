package tokenize

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites a text segment before pre-tokenization.
type normalizer func(string) string

// hfNormalizer is one tokenizer.json normalizer object.
type hfNormalizer struct {
	Type        string            `json:"type"`
	Prepend     string            `json:"prepend"`
	Pattern     *hfPattern        `json:"pattern"`
	Content     string            `json:"content"`
	StripLeft   bool              `json:"strip_left"`
	StripRight  bool              `json:"strip_right"`
	Normalizers []json.RawMessage `json:"normalizers"`
}

// newNormalizer builds the normalizer of raw; nil raw means none.
func newNormalizer(raw json.RawMessage) (normalizer, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c hfNormalizer
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch c.Type {
	case "NFC":
		return norm.NFC.String, nil
	case "NFD":
		return norm.NFD.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "NFKD":
		return norm.NFKD.String, nil
	case "Lowercase":
		return strings.ToLower, nil
	case "StripAccents":
		return func(s string) string {
			return strings.Map(func(r rune) rune {
				if unicode.Is(unicode.Mn, r) {
					return -1
				}
				return r
			}, s)
		}, nil
	case "Strip":
		return func(s string) string {
			if c.StripLeft {
				s = strings.TrimLeftFunc(s, unicode.IsSpace)
			}
			if c.StripRight {
				s = strings.TrimRightFunc(s, unicode.IsSpace)
			}
			return s
		}, nil
	case "Prepend":
		return func(s string) string {
			if s == "" {
				return s
			}
			return c.Prepend + s
		}, nil
	case "Replace":
		if c.Pattern != nil && c.Pattern.String != nil {
			old := *c.Pattern.String
			return func(s string) string { return replaceAll(s, old, c.Content) }, nil
		}
		p, err := c.Pattern.compile("normalizer Replace")
		if err != nil {
			return nil, err
		}
		re := p.re
		return func(s string) string {
			out, err := re.Replace(s, strings.ReplaceAll(c.Content, "$", "$$"), -1, -1)
			if err != nil {
				return s
			}
			return out
		}, nil
	case "Sequence":
		var seq []normalizer
		for _, sub := range c.Normalizers {
			n, err := newNormalizer(sub)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return func(s string) string {
			for _, n := range seq {
				s = n(s)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("normalizer type %q is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Strip, Prepend, Replace, Sequence)", c.Type)
}

// replaceAll is strings.ReplaceAll, with a byte loop where old is one byte
// (Gemma's and Llama 2's " " to "▁"), which replaces runs of short words
// faster than a search per occurrence.
func replaceAll(s, old, new string) string {
	if len(old) != 1 {
		return strings.ReplaceAll(s, old, new)
	}
	n := strings.Count(s, old)
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + n*(len(new)-1))
	c, start := old[0], 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			b.WriteString(s[start:i])
			b.WriteString(new)
			start = i + 1
		}
	}
	b.WriteString(s[start:])
	return b.String()
}
