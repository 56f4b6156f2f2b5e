package tokenize

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"

	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/test/jsonwords"
	"github.com/tollgate/tollgate/test/tokref"
)

// The oracle: template input as the package decoded it before jsonvalue.go,
// with encoding/json's Decoder and UseNumber, token by token. The decoder
// must give the same values, render the same text, and accept and reject
// the same inputs, except for nesting deeper than maxNestingDepth, which
// the oracle decodes (without a bound) and the decoder rejects.

func oracleConversation(c *ChatTemplate, messages []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(messages))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return jinja.Undefined(), errors.New("messages: not an array")
	}
	var conv []jinja.Value
	for dec.More() {
		m, err := oracleDecodeMessage(dec)
		if err != nil {
			return jinja.Undefined(), err
		}
		conv = append(conv, c.message(m, oracleDecodeValue))
	}
	if _, err := dec.Token(); err != nil {
		return jinja.Undefined(), fmt.Errorf("messages: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("messages: trailing data after the JSON value")
	}
	return jinja.NewList(conv), nil
}

func oracleDecodeMessage(dec *json.Decoder) (wireMessage, error) {
	var m wireMessage
	if tok, err := dec.Token(); err != nil {
		return m, fmt.Errorf("messages: %w", err)
	} else if tok != json.Delim('{') {
		return m, errors.New("messages: an element is not an object")
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return m, fmt.Errorf("messages: %w", err)
		}
		var dst *jinja.Value
		switch k {
		case "role":
			dst = &m.role
		case "content":
			dst = &m.content
		case "tool_calls":
			dst = &m.toolCalls
		case "tool_call_id":
			dst = &m.toolCallID
		case "name":
			dst = &m.name
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return m, fmt.Errorf("messages: %w", err)
			}
			continue
		}
		if *dst, err = oracleDecodeNext(dec); err != nil {
			return m, fmt.Errorf("messages: %w", err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return m, fmt.Errorf("messages: %w", err)
	}
	return m, nil
}

func oracleDecodeValue(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := oracleDecodeNext(dec)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func oracleDecodeNext(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := oracleDecodeNext(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		case '{':
			out := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				v, err := oracleDecodeNext(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				out.AsDict().Set(k.(string), v)
			}
			_, err := dec.Token()
			return out, err
		}
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return jinja.NewInt(i), nil
		}
		f, err := t.Float64()
		if err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewFloat(f), nil
	case bool:
		return jinja.NewBool(t), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}

// sameValue compares template values structurally: kinds, floats bit for
// bit (-0 is not 0), dict keys in order.
func sameValue(a, b jinja.Value) bool {
	switch {
	case a.IsUndefined() || b.IsUndefined():
		return a.IsUndefined() && b.IsUndefined()
	case a.IsNone() || b.IsNone():
		return a.IsNone() && b.IsNone()
	case a.IsBool() || b.IsBool():
		return a.IsBool() && b.IsBool() && a.AsBool() == b.AsBool()
	case a.IsInt() || b.IsInt():
		return a.IsInt() && b.IsInt() && a.AsInt() == b.AsInt()
	case a.IsFloat() || b.IsFloat():
		return a.IsFloat() && b.IsFloat() && math.Float64bits(a.AsFloat()) == math.Float64bits(b.AsFloat())
	case a.IsString() || b.IsString():
		return a.IsString() && b.IsString() && a.AsString() == b.AsString()
	case a.IsList() || b.IsList():
		if !a.IsList() || !b.IsList() || len(a.AsList().Items) != len(b.AsList().Items) {
			return false
		}
		for i, x := range a.AsList().Items {
			if !sameValue(x, b.AsList().Items[i]) {
				return false
			}
		}
		return true
	case a.IsDict() || b.IsDict():
		if !a.IsDict() || !b.IsDict() {
			return false
		}
		da, db := a.AsDict(), b.AsDict()
		if len(da.Keys) != len(db.Keys) || len(da.Data) != len(db.Data) || len(da.Keys) != len(da.Data) {
			return false
		}
		for i, k := range da.Keys {
			if db.Keys[i] != k || !sameValue(da.Data[k], db.Data[k]) {
				return false
			}
		}
		return true
	}
	return false
}

func errText(err error) string {
	if err == nil {
		return "accepted"
	}
	return "rejected: " + err.Error()
}

// checkSameInput holds the decoder to the oracle on one request's messages
// and tools: the same accept or reject, the same values, the same render.
// It reports whether the decoder accepted the input.
func checkSameInput(t testing.TB, c *ChatTemplate, messages, tools []byte) bool {
	t.Helper()
	conv, err := c.conversation(messages)
	want, wantErr := oracleConversation(c, messages)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("messages %.300q: decoder %s, oracle %s", messages, errText(err), errText(wantErr))
	}
	if err == nil && !sameValue(conv, want) {
		t.Fatalf("messages %.300q: decoded values differ:\n%v\n%v", messages, conv, want)
	}
	// Any JSON document, as the tools member or arguments are decoded.
	for _, doc := range [][]byte{messages, tools} {
		v, err := decodeValue(doc)
		w, wErr := oracleDecodeValue(doc)
		if (err == nil) != (wErr == nil) {
			t.Fatalf("document %.300q: decoder %s, oracle %s", doc, errText(err), errText(wErr))
		}
		if err == nil && !sameValue(v, w) {
			t.Fatalf("document %.300q: decoded values differ:\n%v\n%v", doc, v, w)
		}
	}
	if err != nil {
		return false
	}
	toolsVal, wantTools := jinja.None(), jinja.None()
	if len(tools) > 0 && string(tools) != "null" {
		var terr, wterr error
		toolsVal, terr = decodeValue(tools)
		wantTools, wterr = oracleDecodeValue(tools)
		if terr != nil || wterr != nil {
			return true // the render rejects them alike (checked above)
		}
	}
	size := len(messages) + len(tools)
	out, _, err := c.render(newMeter(context.Background(), size), conv, toolsVal)
	wantOut, _, wantErr := c.render(newMeter(context.Background(), size), want, wantTools)
	if out != wantOut || errText(err) != errText(wantErr) {
		t.Fatalf("messages %.300q: render differs:\n%q (%s)\n%q (%s)", messages, out, errText(err), wantOut, errText(wantErr))
	}
	// And RenderContext, the production path, renders what the oracle does.
	if got, _, err := c.RenderContext(context.Background(), messages, tools); got != wantOut || errText(err) != errText(wantErr) {
		t.Fatalf("messages %.300q: RenderContext differs:\n%q (%s)\n%q (%s)", messages, got, errText(err), wantOut, errText(wantErr))
	}
	return true
}

// dumpTemplates print every value of the template input, as string
// content and as parts.
var dumpTemplates = []string{
	`{% for m in messages %}{{ m | tojson }}|{{ m.content }}|{{ m.name }}{{ m.tool_call_id }}
{% endfor %}{{ tools | tojson }}`,
	`{% for m in messages %}{% for p in m.content %}[{{ p.text }}]{% endfor %}{{ m | tojson }}
{% endfor %}{{ tools | tojson }}`,
}

// oracleTemplates are the dump templates, the package's DeepSeek V3
// template and, when test/tokref's npm packages are installed, the real
// models' templates.
func oracleTemplates(t *testing.T) map[string]*ChatTemplate {
	t.Helper()
	out := map[string]*ChatTemplate{}
	for i, src := range dumpTemplates {
		c, err := NewChatTemplate(src, nil)
		if err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("dump%d", i)] = c
	}
	if c, err := NewChatTemplate(`{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}`, map[string]string{"bos_token": "<s>", "eos_token": "</s>"}); err == nil {
		out["simple"] = c
	} else {
		t.Fatal(err)
	}
	data, err := os.ReadFile("testdata/deepseek-v3.jinja")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewChatTemplate(string(data), map[string]string{"bos_token": "<｜begin▁of▁sentence｜>"})
	if err != nil {
		t.Fatal(err)
	}
	out["testdata/deepseek-v3"] = c
	for _, m := range benchModels {
		if _, ok := tokref.ModelDir(m.pkg); !ok {
			continue
		}
		hf, err := LoadHFDir(tokref.Model(t, m.pkg, m.template))
		if err != nil {
			t.Fatal(err)
		}
		if hf.chat != nil {
			out[m.name] = hf.chat
		}
		if hf.toolChat != nil {
			out[m.name+"/tools"] = hf.toolChat
		}
	}
	return out
}

// fixtureWords are the reference corpus's words (test/tokref/generate.mjs)
// and text that needs escapes.
var fixtureWords = []string{
	"the", "quick", "brown", "fox", "tokenizer", "don't", "GPU", "KV-cache", "naïve", "café", "Straße", "ﬁle",
	"日本語", "こんにちは", "你好世界", "한국어", "Привет", "العربية", "हिन्दी", "🙂", "👩‍💻", "🇯🇵", "∑", "→",
	"1234567", "3.14159", "$42.00", "100%", "https://example.com/a?b=c", "  ", "\t", "\n", "\n\n", "«", "“quoted”",
	"<b> </b>", "x >  </y", "&amp;", "\"quoted\"", `C:\path\to`, "\u2028\u2029", "\x01\x1f", "\u007f", "\ufeff", "\ufffd",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n", "```json\n{\"a\": [1, 2, 3], \"b\": null}\n```",
	"<|im_end|>", "<|eot_id|>", "<end_of_turn>", "</s>", "<think>", "</think>",
}

func fixtureText(r *rand.Rand, lo, hi int) string {
	var sb strings.Builder
	for n := lo + r.IntN(hi-lo+1); n > 0; n-- {
		sb.WriteString(fixtureWords[r.IntN(len(fixtureWords))])
		sb.WriteString([]string{" ", " ", " ", "", ", ", ". "}[r.IntN(6)])
	}
	return sb.String()
}

// fixtureConversation is a chat request's messages and tools in the shapes
// of the reference corpus: system prompts, text parts, tools, tool calls
// with JSON arguments, tool results, and members template input drops.
func fixtureConversation(r *rand.Rand, i int) (messages, tools []byte) {
	var msgs []map[string]any
	content := func() any {
		s := fixtureText(r, 1, 60)
		if r.IntN(4) > 0 {
			return s
		}
		parts := []any{map[string]any{"type": "text", "text": s}}
		for range r.IntN(3) {
			parts = append(parts, map[string]any{"type": "text", "text": fixtureText(r, 1, 20)})
		}
		if r.IntN(3) == 0 {
			parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:x"}})
		}
		return parts
	}
	if r.IntN(2) == 0 {
		msgs = append(msgs, map[string]any{"role": "system", "content": fixtureText(r, 3, 40)})
	}
	var toolList []any
	if r.IntN(3) == 0 {
		toolList = []any{map[string]any{"type": "function", "function": map[string]any{
			"name": "get_weather", "description": "Températures en °C <b>&</b>",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{
				"city": map[string]any{"type": "string"}, "limit": map[string]any{"type": "integer", "minimum": 1, "maximum": 1e21, "scale": 0.5},
			}, "required": []any{"city"}},
		}}}
	}
	for turn := range 1 + r.IntN(4) {
		msgs = append(msgs, map[string]any{"role": "user", "content": content()})
		if toolList != nil && r.IntN(2) == 0 {
			var calls []any
			for c := range 1 + r.IntN(2) {
				args, _ := json.Marshal(map[string]any{"city": fixtureText(r, 1, 3), "limit": r.IntN(9), "ratio": r.Float64(), "ok": true, "none": nil, "list": []any{1, "2", 3.5}})
				argText := string(args)
				switch r.IntN(6) {
				case 0:
					argText = "not json"
				case 1:
					argText = "[1, 2]"
				case 2:
					argText = `{"a": 1e400}`
				}
				calls = append(calls, map[string]any{"id": fmt.Sprintf("call_%d_%d_%d", i, turn, c), "type": "function",
					"function": map[string]any{"name": "get_weather", "arguments": argText}})
			}
			said := any(nil)
			if r.IntN(2) == 0 {
				said = fixtureText(r, 1, 15)
			}
			msgs = append(msgs, map[string]any{"role": "assistant", "content": said, "tool_calls": calls, "refusal": nil})
			for _, c := range calls {
				msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": c.(map[string]any)["id"], "content": fixtureText(r, 1, 25), "name": "get_weather"})
			}
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": content(), "reasoning_content": fixtureText(r, 0, 5), "audio": map[string]any{"id": 1.5e300}})
	}
	msgs = append(msgs, map[string]any{"role": "user", "content": content(), "name": "n"})
	messages, _ = json.Marshal(msgs)
	if toolList != nil {
		tools, _ = json.Marshal(toolList)
	}
	return messages, tools
}

// adversarialMessages are messages arrays of every JSON corner: escapes,
// surrogates, invalid UTF-8, numbers, duplicate keys, space, nesting,
// empties and syntax errors.
var adversarialMessages = []string{
	`[]`, ` [ ] `, "[\v]", "[\f{}]", "[{}\v]", "\u00a0[]", "[{\"x\"\v:1}]", "[{\"x\":[1,\v2]}]", "[{\"role\":\"user\",\"content\":[1\f]}]", "\t\n\r [\n]\r\n\t", `[{}]`, `[{},{}]`, `[ {} , { } ]`,
	`[{"role":"user","content":"hi"}]`,
	" [ { \"role\" : \"user\" , \"content\" :\n\"hi\" \t} ] \n",
	`[{"role":"user","content":"\"\\\/\b\f\n\r\t\u0000\u001f\u0020\u00e9\u20AC\uFFFF\uffFe"}]`,
	`[{"role":"user","content":"\ud83d\ude00 \uD83D\uDE00 \ud83d \ude00 \ud83d\u0041 \ude00\ud83d \ud83d\ud83d\ude00 \udbff\udfff \ud800\udc00"}]`,
	`[{"role":"user","content":"\ud83d"}]`, `[{"role":"user","content":"a\ud83d\"}]`, `[{"role":"user","content":"\ud83d\u"}]`,
	`[{"role":"user","content":"\ud83d\uZZZZ"}]`, `[{"role":"user","content":"\ud83d\\ude00"}]`,
	"[{\"role\":\"user\",\"content\":\"\xff\xfe\xc3\x28\xe2\x82\xed\xa0\x80\xf0\x9f\x98\xc0\xaf\xf8\x88\x80\x80\x80 ok\"}]",
	"[{\"role\":\"user\",\"content\":\"\xe2\x82\"}]", "[{\"role\":\"user\",\"content\":\"\xef\xbf\xbd\xf4\x90\x80\x80\"}]",
	"[{\"role\":\"user\",\"content\":\"\xff\\n\xff\"}]",
	"[{\"role\":\"user\",\"content\":\"a\x00b\"}]", "[{\"role\":\"user\",\"content\":\"a\nb\"}]", "[{\"role\":\"user\",\"content\":\"a\x7fb\"}]",
	"[{\"x\":\"a\x1fb\"}]", "[{\"x\":\"\xff\"}]",
	`[{"role":"user","content":"\x"}]`, `[{"role":"user","content":"\'"}]`, `[{"role":"user","content":"\u12"}]`,
	`[{"role":"user","content":"\u12G4"}]`, `[{"role":"user","content":"\`, `[{"role":"user","content":"abc`,
	`[{"role":"user","content":"\U0041"}]`, `[{"x":"\x"}]`, `[{"x":"\u00"}]`, `[{"x":"\uD800\uDC00\ud800"}]`,
	`[{"role":"user","content":[1,-0,0,-1,1.0,-0.0,0.5e1,1e3,1E+3,1e-3,1e400,9223372036854775807]}]`,
	`[{"role":"user","content":[1e400]}]`, `[{"role":"user","content":[-1e400]}]`, `[{"role":"user","content":[1e-400, 4.9e-324, 2.5e-324, 2.4e-324]}]`,
	`[{"role":"user","content":[9223372036854775807,9223372036854775808,-9223372036854775808,-9223372036854775809,99999999999999999999999999]}]`,
	`[{"role":"user","content":[999999999999999999,1000000000000000000,-999999999999999999,123456789012345678901234567890e-10]}]`,
	`[{"role":"user","content":[0.1,0.30000000000000004,1.7976931348623157e308,1.7976931348623159e308,2.2250738585072011e-308]}]`,
	`[{"role":"user","content":[01]}]`, `[{"role":"user","content":[-]}]`, `[{"role":"user","content":[1.]}]`, `[{"role":"user","content":[.5]}]`,
	`[{"role":"user","content":[+1]}]`, `[{"role":"user","content":[1e]}]`, `[{"role":"user","content":[1e+]}]`, `[{"role":"user","content":[-01]}]`,
	`[{"role":"user","content":[0x1]}]`, `[{"role":"user","content":[1_000]}]`, `[{"role":"user","content":[NaN]}]`, `[{"role":"user","content":[Infinity]}]`,
	`[{"role":"user","content":[1-2]}]`, `[{"role":"user","content":[1true]}]`, `[{"x":[1e400, 01x]}]`, `[{"x":1e400}]`, `[{"x":-0}]`, `[{"x":-}]`,
	`[{"role":"user","content":[true,false,null,{},[],{"a":{}},[[]]]}]`,
	`[{"role":"user","content":[tru]}]`, `[{"role":"user","content":[nul]}]`, `[{"role":"user","content":[nullx]}]`, `[{"role":"user","content":[True]}]`,
	`[{"x":tru}]`, `[{"x":falsy}]`, `[{"x":nil}]`,
	`[{"role":"user","role":"assistant","content":"a","content":"b","name":"x","name":7}]`,
	`[{"role":"user","content":[{"type":"text","text":"a","text":"b","type":"x","type":"text"}]}]`,
	`[{"role":"user","content":"a","content":[1,2],"content":{"b":1}}]`,
	`[{"role":"assistant","content":null,"tool_calls":[{"id":"1","function":{"name":"f","arguments":"{\"z\": 1, \"a\": \"\\u00fc\", \"z\": [1e3, -0, 1e400]}"}}]}]`,
	`[{"role":"assistant","content":null,"tool_calls":[{"id":"1","function":{"name":"f","arguments":"{\"z\": 1, \"a\": {\"b\": [true, null, \"\\ud83d\"]}}"}}]}]`,
	`[{"role":"assistant","tool_calls":[{"function":{"arguments":"  {\"a\":1}  "}},{"function":{"arguments":"{\"a\":1} x"}},{"function":{"arguments":"{\"a\":1}{}"}},{"function":{"arguments":""}},{"function":{"arguments":"null"}},{"function":{"arguments":{"already":"object"}}},{"function":"f"},7,{"function":{"arguments":"{\"a\":\"\u0000\"}"}}]}]`,
	`[{"role":"assistant","tool_calls":[{"function":{"arguments":"{\"a\":\"\\x\"}"}},{"function":{"arguments":"{\"a\":1e400}"}},{"function":{"arguments":"{\"a\":01}"}},{"function":{"arguments":"{\"a\":\"\\ud800\\udc00\"}"}}]}]`,
	`[{"role":"tool","tool_call_id":"c","content":"r"},{"role":"user","tool_call_id":"c","content":"r"},{"role":"tool","tool_call_id":5}]`,
	`[{"role":5,"content":5},{"role":null,"content":null},{"role":["user"],"content":{"text":"x"}},{"role":"user","content":[1,"a",{"type":"text"},{"type":"text","text":5},{"type":"text","text":"ok"}]}]`,
	`[{"a":{"b":{"c":[1,2,{"d":"e"}]}},"role":"user","content":"x","z":[[[[[]]]]]}]`,
	`[{"\u0072ole":"user","cont\u0065nt":"escaped keys"}]`, `[{"role\u0000":"user"}]`, `[{"":"empty key"}]`,
	`[{"ro\"le":"user"}]`, "[{\"r\xffole\":\"user\"}]",
	`[{"role":"user","content":"x"},]`, `[{"role":"user","content":"x"},,{}]`, `[,{}]`, `[{"role":"user",}]`, `[{,"role":"user"}]`,
	`[{"role" "user"}]`, `[{"role"::"user"}]`, `[{role:"user"}]`, `[{'role':'user'}]`, `[{"role":"user"]`, `[{"role":"user"}}`,
	`[{"role":"user"} {"role":"user"}]`, `[{"x":[1 2]}]`, `[{"x":{"a":1 "b":2}}]`, `[{"x":{"a":1,}}]`, `[{"x":[1,]}]`, `[{"x":{1:2}}]`,
	`[{"x":[}]}]`, `[{"x":{]}]`, `[{"x":{"a"}}]`, `[{"x":{"a":}}]`, `[{"x":]}]`, `[{"role":}]`, `[{"role"}]`, `[{"x":[1}]}]`,
	`[{}]]`, `[{}] x`, `[{}] []`, `[{}] {}`, `[{}] 1`, `[{}]"`, `[{}] null`, "[{}]\x00", "\xef\xbb\xbf[{}]", `[{}`, `[`, `]`, ``, ` `,
	`{}`, `"x"`, `null`, `1`, `[1]`, `["a"]`, `[[]]`, `[null]`, `[true]`, `[{}, 1]`, `[{}, []]`, `[x]`, `[{}, x]`, `[{"a":1}, "b"]`,
	`[{"x":"` + strings.Repeat(`\"`, 1000) + `"}]`, `[{"content":"` + strings.Repeat("é", 1000) + strings.Repeat("\\u00e9", 1000) + `"}]`,
	`[{"role":"user","content":"` + strings.Repeat("a", 70000) + `\n"}]`,
	`[` + strings.Repeat(`{"role":"user","content":"m"},`, 200) + `{}]`,
	`[{"x":` + strings.Repeat("[", 500) + strings.Repeat("]", 500) + `,"content":` + strings.Repeat(`{"a":`, 500) + "1" + strings.Repeat("}", 500) + `}]`,
	`[{"content":` + strings.Repeat("[", 500) + strings.Repeat("]", 499) + `}]`,
}

var adversarialTools = []string{
	``, `null`, ` null `, `[]`, `{}`, `[{"type":"function","function":{"name":"f","b":2,"a":1.5,"b":3}}]`, `"tools"`, `1e400`, `[1e400]`, `-0`, `1e3`,
	`[{"name":"\ud83d\ude00\ud83d","x":"\xff"}]`, `[1,]`, `[1] [2]`, `[1] x`, ` [ { "a" : [ ] } ] `, `tru`, `[`, `01`, `1 2`, `"a""b"`, `[{"a":1}{"b":2}]`,
}

func TestTemplateInputOracle(t *testing.T) {
	t.Parallel() // the long tests run beside the reference test's Node process
	templates := oracleTemplates(t)
	r := rand.New(rand.NewPCG(7, 0x71))
	type input struct{ messages, tools []byte }
	var inputs []input
	for i := range 120 {
		m, tl := fixtureConversation(r, i)
		inputs = append(inputs, input{m, tl})
	}
	inputs = append(inputs, input{chatMessages(10 << 10), nil}, input{systemFlood(50), nil})
	for _, m := range adversarialMessages {
		inputs = append(inputs, input{[]byte(m), nil})
	}
	msgs := []byte(`[{"role":"user","content":"q"}]`)
	for _, tl := range adversarialTools {
		inputs = append(inputs, input{msgs, []byte(tl)})
	}
	for name, c := range templates {
		t.Run(name, func(t *testing.T) {
			accepted := 0
			for _, in := range inputs {
				if checkSameInput(t, c, in.messages, in.tools) {
					accepted++
				}
			}
			if accepted < len(inputs)/2 {
				t.Errorf("only %d of %d inputs decoded", accepted, len(inputs))
			}
		})
	}
}

// TestTemplateInputStrings checks the unescaping of every single escape
// and of every byte inside a string, alone and next to others, with the
// oracle.
func TestTemplateInputStrings(t *testing.T) {
	var docs []string
	for c := range 256 {
		docs = append(docs, `"`+string(rune(c))+`"`, "\""+string([]byte{byte(c)})+"\"", "\"a"+string([]byte{byte(c)})+"b\\n\"")
		docs = append(docs, `"\`+string([]byte{byte(c)})+`"`, `"x\`+string([]byte{byte(c)})+`y"`)
	}
	for _, h := range []string{"0000", "001f", "0022", "005c", "007f", "0080", "07ff", "0800", "d7ff", "d800", "dbff", "dc00", "dfff", "e000", "fffd", "fffe", "ffff", "D83D", "DE00"} {
		for _, l := range []string{"", "dc00", "DFFF", "d800", "0041", "ffff", "dbff"} {
			docs = append(docs, `"\u`+h+`"`, `"\u`+h+`\u`+l+`"`, `"\u`+h+`\u`+l+`x"`, `"\u`+h+`\\u`+l+`"`, `"\u`+h+` \u`+l+`"`)
		}
	}
	for _, s := range []string{"\xc0\x80", "\xed\xa0\x80", "\xed\xbf\xbf", "\xf4\x8f\xbf\xbf", "\xf4\x90\x80\x80", "\xf5", "\xe0\xa0", "\xe0\x80\x80", "\xf0\x90\x80", "\xc2", "\xc2\xa9"} {
		docs = append(docs, `"`+s+`"`, `"a`+s+`b"`, `"`+s+`\n"`, `"\n`+s+`"`, `"`+s+`\ud800"`)
	}
	c, err := NewChatTemplate(dumpTemplates[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		checkSameInput(t, c, []byte(`[{"role":"user","content":`+doc+`,"x":`+doc+`}]`), []byte(`[`+doc+`]`))
		checkSameInput(t, c, []byte(`[{"x":`+doc+`,"y":[`+doc+`,{`+doc+`:`+doc+`}]}]`), nil) // skipped members
		checkSameInput(t, c, []byte(`[{`+doc+`:1}]`), []byte(`{`+doc+`:`+doc+`}`))
	}
}

// TestPlainRunInput feeds the template input strings with every kind of
// byte at every offset of the eight-byte words jsonscan.PlainRun reads.
func TestPlainRunInput(t *testing.T) {
	tmpl, err := NewChatTemplate(dumpTemplates[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	for b := range jsonwords.All() {
		doc := `"` + string(b) + `"`
		checkSameInput(t, tmpl, []byte(`[{"role":"user","content":`+doc+`,"x":`+doc+`}]`), []byte(`[`+doc+`]`))
	}
}

// TestTemplateInputDepth: nesting up to maxNestingDepth decodes as the
// oracle decodes it, deeper nesting is an error (the oracle has no bound),
// and every body the request parser accepts decodes.
func TestTemplateInputDepth(t *testing.T) {
	if maxNestingDepth != openai.MaxNestingDepth {
		t.Fatalf("maxNestingDepth %d, the request parser's %d", maxNestingDepth, openai.MaxNestingDepth)
	}
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	c, err := NewChatTemplate(dumpTemplates[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	// The messages array and a message are two levels.
	for _, member := range []string{"content", "extra"} {
		at := []byte(`[{"role":"user","` + member + `":` + nest(maxNestingDepth-2) + `}]`)
		if !checkSameInput(t, c, at, []byte(nest(maxNestingDepth))) {
			t.Fatalf("%s nested %d levels deep rejected", member, maxNestingDepth)
		}
		if _, err := c.conversation([]byte(`[{"role":"user","` + member + `":` + nest(maxNestingDepth-1) + `}]`)); err == nil {
			t.Errorf("%s nested deeper than %d levels accepted", member, maxNestingDepth)
		}
	}
	if _, err := decodeValue([]byte(nest(maxNestingDepth + 1))); err == nil {
		t.Errorf("a document nested deeper than %d levels accepted", maxNestingDepth)
	}
	deepObject := strings.Repeat(`{"a":`, maxNestingDepth) + "1" + strings.Repeat("}", maxNestingDepth)
	if _, err := decodeValue([]byte(deepObject)); err != nil {
		t.Errorf("objects nested %d levels: %v", maxNestingDepth, err)
	}
	if _, err := decodeValue([]byte(`{"a":` + deepObject + `}`)); err == nil {
		t.Errorf("objects nested deeper than %d levels accepted", maxNestingDepth)
	}
	// The body object, messages and a message are three levels.
	for _, k := range []int{openai.MaxNestingDepth - 3, openai.MaxNestingDepth - 2} {
		body := []byte(`{"model":"m","messages":[{"role":"user","content":"x","extra":` + nest(k) + `}],"tools":[{"type":"function","function":{"name":"f","parameters":` + nest(k-2) + `}}]}`)
		req, err := openai.Parse(openai.KindChatCompletions, body)
		if err != nil {
			if k == openai.MaxNestingDepth-3 {
				t.Fatalf("parse at the nesting bound: %v", err)
			}
			continue
		}
		if _, err := c.Render(req.Messages, req.Tools); err != nil {
			t.Errorf("a body the parser accepts (nesting %d) does not render: %v", k+3, err)
		}
	}
}

// FuzzTemplateInput holds the decoder to the oracle on any messages array
// (and on the same bytes as a tools document): the same accept or reject,
// equal values and renders whenever both accept.
func FuzzTemplateInput(f *testing.F) {
	for _, m := range adversarialMessages {
		if len(m) < 4096 {
			f.Add([]byte(m))
		}
	}
	for _, tl := range adversarialTools {
		f.Add([]byte(tl))
	}
	r := rand.New(rand.NewPCG(3, 3))
	for i := range 8 {
		m, _ := fixtureConversation(r, i)
		f.Add(m)
	}
	c, err := NewChatTemplate(dumpTemplates[0], nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, messages []byte) {
		if bytes.Count(messages, []byte("["))+bytes.Count(messages, []byte("{")) >= maxNestingDepth-2 {
			t.Skip("may nest beyond the bound, where the oracle has none")
		}
		checkSameInput(t, c, messages, messages)
	})
}

// BenchmarkTemplateInput measures decoding template input, against the
// oracle: English text, code (many escapes), and CJK text.
func BenchmarkTemplateInput(b *testing.B) {
	c, err := NewChatTemplate(dumpTemplates[0], nil)
	if err != nil {
		b.Fatal(err)
	}
	code := strings.Repeat("func main() {\n\tfmt.Println(\"hello, world\")\n\tx := map[string]int{\"a\": 1}\n}\n", 2000)
	cjk := strings.Repeat("日本語のテキスト、東京。你好世界 ", 3000)
	bodies := map[string][]byte{"english": chatMessages(256 << 10)}
	for name, text := range map[string]string{"code": code, "cjk": cjk} {
		bodies[name], _ = json.Marshal([]map[string]string{{"role": "system", "content": text}, {"role": "user", "content": text[:len(text)/2]}})
	}
	for _, name := range []string{"english", "code", "cjk"} {
		body := bodies[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := c.conversation(body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/oracle", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := oracleConversation(c, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
