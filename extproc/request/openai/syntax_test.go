package openai

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// syntaxSeeds are bodies that exercise every branch of the syntax check.
var syntaxSeeds = []string{
	``, ` `, `{}`, ` { } `, `[]`, `[1,2]`, `"x"`, `0`, `-0.5e+3`, `true`, `false`, `null`, `nul`, `tru`,
	`{"a":1}`, `{"a":[1,{"b":null}],"c":"\u00e9\n"}`, `{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":}`, `{,}`,
	`{"a":1}x`, `{"a":1} {}`, `01`, `1.`, `1e`, `-`, `.5`, `+1`, `1E+9`, `"\x"`, `"\u12"`, `"\u12g4"`,
	"\"a\x01b\"", "\"\xff\"", `"unterminated`, `{"a":"b"`, `[[[`, `]`, `}`, `{"a":1]`, `[1}`,
	"{\"model\":\"m\"}\t\r\n", `NaN`, `{"a":NaN}`, `{"a":-Infinity}`, `{1:2}`,
}

// FuzzValidValue checks the one-pass syntax check against encoding/json:
// a body passes exactly when json.Valid accepts it, and the member walk
// accepts exactly the valid objects.
func FuzzValidValue(f *testing.F) {
	for _, s := range syntaxSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		end, err := validValue(b, 0)
		ok := err == nil && skipSpace(b, end) == len(b)
		if want := json.Valid(b); ok != want {
			t.Fatalf("validValue(%q) accepts %v (end %d, %v); json.Valid says %v", b, ok, end, err, want)
		}
		if err != nil && (err.off < 0 || err.off > len(b)) {
			t.Fatalf("validValue(%q): offset %d outside the body", b, err.off)
		}
		var v any
		isObject := json.Unmarshal(b, &v) == nil && func() bool { _, o := v.(map[string]any); return o }()
		ferr := topFields(b, func(_, val []byte, off int) *Error {
			if string(b[off:off+len(val)]) != string(val) || !json.Valid(val) {
				t.Fatalf("topFields(%q): member value %q at %d is not the body's valid JSON", b, val, off)
			}
			return nil
		})
		if (ferr == nil) != isObject {
			t.Fatalf("topFields(%q) = %v; the body is an object: %v", b, ferr, isObject)
		}
		blank := skipSpace(b, 0) == len(b)
		if ferr != nil && !blank && (ferr.Code != CodeInvalidJSON || strings.Contains(ferr.Message, "not valid JSON") == json.Valid(b)) {
			t.Fatalf("topFields(%q) = %+v; json.Valid says %v", b, ferr, json.Valid(b))
		}
	})
}

func TestValidValueSeeds(t *testing.T) {
	for _, s := range syntaxSeeds {
		end, err := validValue([]byte(s), 0)
		if ok := err == nil && skipSpace([]byte(s), end) == len(s); ok != json.Valid([]byte(s)) {
			t.Errorf("validValue(%q) accepts %v; json.Valid does not agree", s, ok)
		}
	}
}

func TestValidValueDepth(t *testing.T) {
	deep := strings.Repeat("[", MaxNestingDepth) + strings.Repeat("]", MaxNestingDepth)
	if _, err := validValue([]byte(deep), 0); err != nil {
		t.Errorf("%d levels: %v", MaxNestingDepth, err)
	}
	deeper := "[" + deep + "]"
	if _, err := validValue([]byte(deeper), 0); err == nil || !strings.Contains(err.detail, "nesting deeper than 10000 levels at byte 10000") {
		t.Errorf("%d levels: %v", MaxNestingDepth+1, err)
	}
}

// The syntax errors name the first wrong byte and what was expected.
func TestSyntaxErrorText(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":`:                       "the request body is not valid JSON: unexpected end of input at byte 9, looking for a value",
		`model=m`:                         "the request body is not valid JSON: invalid character 'm' at byte 0, looking for a value",
		`{"model":"m"} {}`:                "the request body is not valid JSON: invalid character '{' at byte 14, looking for the end of the body",
		`{"model":"m","prompt":[NaN]}`:    "the request body is not valid JSON: invalid character 'N' at byte 23, looking for a value",
		`{"model":"m" "prompt":"x"}`:      "the request body is not valid JSON: invalid character '\"' at byte 13, looking for ',' or '}' after an object member",
		`{"model" "m"}`:                   "the request body is not valid JSON: invalid character '\"' at byte 9, looking for ':' after an object key",
		`{model:"m"}`:                     "the request body is not valid JSON: invalid character 'm' at byte 1, looking for an object key string",
		`{"p":[1 2]}`:                     "the request body is not valid JSON: invalid character '2' at byte 8, looking for ',' or ']' after an array element",
		`{"p":01}`:                        "the request body is not valid JSON: invalid character '1' at byte 6, looking for ',' or '}' after an object member",
		`{"p":1.}`:                        "the request body is not valid JSON: invalid character '}' at byte 7, looking for a digit after a decimal point",
		`{"p":1e}`:                        "the request body is not valid JSON: invalid character '}' at byte 7, looking for a digit in an exponent",
		`{"p":-x}`:                        "the request body is not valid JSON: invalid character 'x' at byte 6, looking for a digit in a number",
		`{"p":tru}`:                       "the request body is not valid JSON: invalid character '}' at byte 8, looking for the literal true",
		`{"p":"\q"}`:                      "the request body is not valid JSON: invalid character 'q' at byte 7, looking for an escape code in a string",
		`{"p":"\u12x4"}`:                  "the request body is not valid JSON: invalid character 'x' at byte 10, looking for a hexadecimal digit of a \\u escape",
		"{\"p\":\"a\x01\"}":               "the request body is not valid JSON: invalid character '\\x01' at byte 7, looking for the rest of a string (control characters must be escaped)",
		"{\"p\":\xff}":                    "the request body is not valid JSON: invalid byte 0xff at byte 5, looking for a value",
		`{"p":"open`:                      "the request body is not valid JSON: unexpected end of input at byte 10, looking for the end of a string",
		`[1,2`:                            "the request body is not valid JSON: unexpected end of input at byte 4, looking for ',' or ']' after an array element",
		`[1,2]`:                           "the request body must be a JSON object",
		"  \n":                            "the request body is empty; it must be a JSON object",
		`{"model":"m","prompt":"x"}  x  `: "the request body is not valid JSON: invalid character 'x' at byte 28, looking for the end of the body",
	} {
		_, err := Parse(KindCompletions, []byte(body))
		e, ok := errors.AsType[*Error](err)
		if !ok || e.Message != want || e.Code != CodeInvalidJSON || e.Status != 400 {
			t.Errorf("Parse(%q) = %v;\nwant %q", body, err, want)
		}
	}
}

func TestFindModel(t *testing.T) {
	for body, want := range map[string]ModelField{
		`{"model":"llama","prompt":"x"}`:            {Name: "llama", Start: 9, End: 16},
		`{"prompt":"x", "model" : "a\u0062" }`:      {Name: "ab", Start: 25, End: 34},
		`{"model":"a","model":"b"}`:                 {Name: "b", Start: 21, End: 24},
		`{"model":null}`:                            {Start: 9, End: 13},
		`{"prompt":"x"}`:                            {},
		`{"MODEL":"x"}`:                             {},
		`{"nvext":{"model":"inner"},"model":"top"}`: {Name: "top", Start: 35, End: 40},
	} {
		got, err := FindModel([]byte(body))
		if err != nil || got != want {
			t.Errorf("FindModel(%s) = %+v, %v; want %+v", body, got, err, want)
		}
	}
	for body, want := range map[string]string{
		`{"model":7}`:         "'model' must be a string",
		`["model"]`:           "the request body must be a JSON object",
		`{"model":"m","x":`:   "the request body is not valid JSON",
		``:                    "the request body is empty",
		`{"model":"m"} trail`: "the request body is not valid JSON",
	} {
		if _, err := FindModel([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("FindModel(%s) = %v, want an error containing %q", body, err, want)
		}
	}
}
