package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func mustParse(t *testing.T, kind Kind, body string) *Request {
	t.Helper()
	r, err := Parse(kind, []byte(body))
	if err != nil {
		t.Fatalf("Parse(%v, %s): %v", kind, body, err)
	}
	return r
}

func ptr[T any](v T) *T { return &v }

func TestParseShapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind Kind
		body string
		want Request
	}{
		{"completions string", KindCompletions,
			`{"model":"m","prompt":"Hello, world","max_tokens":16,"stream":true}`,
			Request{Model: "m", Stream: true, MaxTokens: 16, Text: "Hello, world"}},
		{"completions escapes", KindCompletions,
			`{"model":"m","prompt":"a\"b\\c\n\u00e9\ud83d\ude00"}`,
			Request{Model: "m", Text: "a\"b\\c\né😀"}},
		{"completions list of strings", KindCompletions,
			`{"model":"m","prompt":["one","two", "three"]}`,
			Request{Model: "m", Text: "one\ntwo\nthree"}},
		{"completions token ids", KindCompletions,
			`{"model":"m","prompt":[1, 2, 3, 4294967295, 0, 7.0, 1e2]}`,
			Request{Model: "m", TokenIDs: []uint32{1, 2, 3, 4294967295, 0, 7, 100}}},
		{"completions list of id lists", KindCompletions,
			`{"model":"m","prompt":[[1,2],[3],[],[4,5,6]]}`,
			Request{Model: "m", TokenIDs: []uint32{1, 2, 3, 4, 5, 6}}},
		{"completions empty string prompt", KindCompletions,
			`{"model":"m","prompt":""}`,
			Request{Model: "m"}},
		{"completions null max_tokens", KindCompletions,
			`{"model":"m","prompt":"x","max_tokens":null,"stream":null}`,
			Request{Model: "m", Text: "x"}},
		{"chat max_completion_tokens wins", KindChatCompletions,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"max_completion_tokens":9}`,
			Request{Model: "m", MaxTokens: 9, Text: "user: hi\n"}},
		{"chat max_tokens", KindChatCompletions,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`,
			Request{Model: "m", MaxTokens: 5, Text: "user: hi\n"}},
		{"chat full", KindChatCompletions, `{
			"model":"llama","stream":true,
			"tools":[ {"type":"function", "function":{"name":"get_weather","parameters":{"type":"object"}}} ],
			"messages":[
				{"role":"system","content":"You are terse."},
				{"role":"user","name":"ann","content":[
					{"type":"text","text":"What is in this image?"},
					{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},
					{"type":"text","text":"And the weather?"}]},
				{"role":"assistant","content":null,"tool_calls":[
					{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
				{"role":"tool","tool_call_id":"c1","content":"sunny"},
				{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]}
			]}`,
			Request{Model: "llama", Stream: true, Text: `tools: [{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]` + "\n" +
				"system: You are terse.\n" +
				"user ann: What is in this image?\nAnd the weather?\n" +
				"assistant: \n" +
				`tool_call get_weather {"city":"Paris"}` + "\n" +
				"tool: sunny\n" +
				"assistant: no\n"}},
		{"chat tool call with object arguments", KindChatCompletions,
			`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"a": 1}}},{"type":"custom"}]}]}`,
			Request{Model: "m", Text: "assistant: \ntool_call f {\"a\":1}\n"}},
		{"chat image only", KindChatCompletions,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x"}}]}]}`,
			Request{Model: "m", Text: "user: \n"}},
		{"embeddings string", KindEmbeddings,
			`{"model":"e","input":"embed me"}`,
			Request{Model: "e", Text: "embed me"}},
		{"embeddings strings", KindEmbeddings,
			`{"model":"e","input":["a","b"]}`,
			Request{Model: "e", Text: "a\nb"}},
		{"embeddings ids", KindEmbeddings,
			`{"model":"e","input":[5,6]}`,
			Request{Model: "e", TokenIDs: []uint32{5, 6}}},
		{"embeddings id lists", KindEmbeddings,
			`{"model":"e","input":[[5],[6,7]]}`,
			Request{Model: "e", TokenIDs: []uint32{5, 6, 7}}},
		{"responses string", KindResponses,
			`{"model":"r","input":"Tell me a story","instructions":"Be kind","max_output_tokens":100}`,
			Request{Model: "r", MaxTokens: 100, Text: "system: Be kind\nuser: Tell me a story\n"}},
		{"responses items", KindResponses, `{"model":"r","tools":[{"type":"function","name":"f"}],"input":[
				{"role":"user","content":"hello"},
				{"type":"message","role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"x"}]},
				{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},
				{"type":"function_call_output","call_id":"c","output":"42"},
				{"type":"reasoning","summary":[]},
				{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}]}`,
			Request{Model: "r", Text: `tools: [{"type":"function","name":"f"}]` + "\n" +
				"user: hello\nuser: look\ntool_call f {}\ntool: 42\nassistant: ok\n"}},
		{"generate text", KindGenerate,
			`{"text":"The capital of France is","sampling_params":{"max_new_tokens":32,"temperature":0},"stream":true}`,
			Request{Stream: true, MaxTokens: 32, Text: "The capital of France is"}},
		{"generate batch text with model", KindGenerate,
			`{"model":"g","text":["a","b"]}`,
			Request{Model: "g", Text: "a\nb"}},
		{"generate input_ids", KindGenerate,
			`{"input_ids":[1,2,3],"sampling_params":{}}`,
			Request{TokenIDs: []uint32{1, 2, 3}}},
		{"generate batch input_ids", KindGenerate,
			`{"input_ids":[[1,2],[3]]}`,
			Request{TokenIDs: []uint32{1, 2, 3}}},
		{"nvext hints", KindChatCompletions, `{"model":"m","messages":[{"role":"user","content":"x"}],
			"nvext":{"agent_hints":{"priority":-3,"strict_priority":7,"latency_sensitivity":0.5},
			"backend_instance_id":18446744073709551615,"dp_rank":2,
			"routing_constraints":{"required_taints":["gpu=h100","zone=a"],"preferred_taints":{"x":1}}}}`,
			Request{Model: "m", Text: "user: x\n", Hints: Hints{
				Priority: ptr[int32](-3), StrictPriority: ptr[uint32](7), LatencySensitivity: ptr(0.5),
				BackendInstanceID: "18446744073709551615", DPRank: ptr[uint32](2),
				RequiredTaints: []string{"gpu=h100", "zone=a"}}}},
		{"nvext string worker id", KindCompletions,
			`{"model":"m","prompt":"x","nvext":{"backend_instance_id":"worker-a","dp_rank":0}}`,
			Request{Model: "m", Text: "x", Hints: Hints{BackendInstanceID: "worker-a", DPRank: ptr[uint32](0)}}},
		{"nvext decode_worker_id wins", KindCompletions,
			`{"model":"m","prompt":"x","nvext":{"backend_instance_id":"a","decode_worker_id":"b"}}`,
			Request{Model: "m", Text: "x", Hints: Hints{BackendInstanceID: "b"}}},
		{"nvext nulls", KindCompletions,
			`{"model":"m","prompt":"x","nvext":{"agent_hints":null,"backend_instance_id":null,"dp_rank":null,"routing_constraints":{"required_taints":null}}}`,
			Request{Model: "m", Text: "x"}},
		{"unknown fields ignored", KindCompletions,
			`{"model":"m","prompt":"x","temperature":0.7,"logit_bias":{"1":2},"extra":[{"deep":[1,2,{"x":null}]}]}`,
			Request{Model: "m", Text: "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mustParse(t, tc.kind, tc.body)
			want := tc.want
			want.Kind = tc.kind
			want.TextBytes = len(want.Text)
			// Messages and Tools are the raw members (TestParseChatRaw).
			if diff := cmp.Diff(&want, got, cmpopts.IgnoreFields(Request{}, "Messages", "Tools", "ModelField")); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseChatRaw: a chat request keeps its messages and tools members
// as sent, for the model's chat template; other kinds keep none.
func TestParseChatRaw(t *testing.T) {
	got := mustParse(t, KindChatCompletions, `{"model":"m","messages":[{"role":"user","content":"x"}], "tools": [{"type":"function"}]}`)
	if string(got.Messages) != `[{"role":"user","content":"x"}]` || string(got.Tools) != `[{"type":"function"}]` {
		t.Errorf("messages %s tools %s", got.Messages, got.Tools)
	}
	got = mustParse(t, KindChatCompletions, `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":null}`)
	if got.Tools != nil {
		t.Errorf("null tools kept: %s", got.Tools)
	}
	got = mustParse(t, KindCompletions, `{"model":"m","prompt":"x","messages":[]}`)
	if got.Messages != nil {
		t.Errorf("completions kept messages: %s", got.Messages)
	}
}

func TestParseTokenIDsCountedExactly(t *testing.T) {
	ids := make([]uint32, 4096)
	for i := range ids {
		ids[i] = uint32(i * 37)
	}
	body, _ := json.Marshal(map[string]any{"model": "m", "prompt": ids})
	r := mustParse(t, KindCompletions, string(body))
	if diff := cmp.Diff(ids, r.TokenIDs); diff != "" {
		t.Errorf("TokenIDs (-want +got):\n%s", diff)
	}
	if r.Text != "" || r.TextBytes != 0 {
		t.Errorf("Text %q, TextBytes %d for an id prompt", r.Text, r.TextBytes)
	}
	r = mustParse(t, KindCompletions, `{"model":"m","prompt":[[]]}`)
	if r.TokenIDs == nil || len(r.TokenIDs) != 0 {
		t.Errorf("[[]]: TokenIDs = %#v, want empty non-nil", r.TokenIDs)
	}
}

func TestChatRenderingSharesPrefix(t *testing.T) {
	history := `{"role":"system","content":"sys"},{"role":"user","content":"q1"},{"role":"assistant","content":"a1"}`
	short := mustParse(t, KindChatCompletions, `{"model":"m","messages":[`+history+`]}`)
	long := mustParse(t, KindChatCompletions, `{"model":"m","messages":[`+history+`,{"role":"user","content":"q2"}]}`)
	if !strings.HasPrefix(long.Text, short.Text) {
		t.Errorf("continued conversation %q does not extend %q", long.Text, short.Text)
	}
	withTools := `"tools":[{"type":"function","function":{"name":"f"}}]`
	a := mustParse(t, KindChatCompletions, `{"model":"m",`+withTools+`,"messages":[`+history+`]}`)
	b := mustParse(t, KindChatCompletions, `{"messages":[`+history+`,{"role":"user","content":"q2"}],"model":"m",`+withTools+`}`)
	if !strings.HasPrefix(b.Text, a.Text) {
		t.Errorf("with tools: %q does not extend %q", b.Text, a.Text)
	}
}

func TestParseErrors(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"x"}]`
	for _, tc := range []struct {
		name, param, code, msg string
		kind                   Kind
		body                   string
	}{
		{"empty body", "", CodeInvalidJSON, "the request body is empty; it must be a JSON object", KindCompletions, ""},
		{"blank body", "", CodeInvalidJSON, "the request body is empty; it must be a JSON object", KindCompletions, " \n "},
		{"invalid json", "", CodeInvalidJSON, "the request body is not valid JSON", KindCompletions, `{"model":`},
		{"garbage", "", CodeInvalidJSON, "the request body is not valid JSON", KindCompletions, `model=m`},
		{"trailing data", "", CodeInvalidJSON, "the request body is not valid JSON", KindCompletions, `{"model":"m","prompt":"x"} {}`},
		{"array body", "", CodeInvalidJSON, "the request body must be a JSON object", KindCompletions, `[1,2]`},
		{"string body", "", CodeInvalidJSON, "the request body must be a JSON object", KindCompletions, `"x"`},
		{"NaN id", "", CodeInvalidJSON, "the request body is not valid JSON", KindCompletions, `{"model":"m","prompt":[NaN]}`},
		{"missing model", "model", CodeMissingRequired, "'model' is required", KindCompletions, `{"prompt":"x"}`},
		{"null model", "model", CodeMissingRequired, "'model' is required", KindChatCompletions, `{"model":null,` + msgs + `}`},
		{"empty model", "model", CodeInvalidValue, "'model' must be a non-empty string", KindEmbeddings, `{"model":"","input":"x"}`},
		{"model type", "model", CodeInvalidType, "'model' must be a string", KindCompletions, `{"model":5,"prompt":"x"}`},
		{"generate model type", "model", CodeInvalidType, "'model' must be a string", KindGenerate, `{"model":[],"text":"x"}`},
		{"stream type", "stream", CodeInvalidType, "'stream' must be a boolean", KindCompletions, `{"model":"m","prompt":"x","stream":"yes"}`},
		{"max_tokens negative", "max_tokens", CodeInvalidValue, "'max_tokens' must be a non-negative integer", KindCompletions, `{"model":"m","prompt":"x","max_tokens":-1}`},
		{"max_tokens fraction", "max_tokens", CodeInvalidValue, "'max_tokens' must be a non-negative integer", KindCompletions, `{"model":"m","prompt":"x","max_tokens":1.5}`},
		{"max_tokens type", "max_tokens", CodeInvalidType, "'max_tokens' must be a non-negative integer", KindCompletions, `{"model":"m","prompt":"x","max_tokens":"10"}`},
		{"max_completion_tokens huge", "max_completion_tokens", CodeInvalidValue, "'max_completion_tokens' must be a non-negative integer", KindChatCompletions, `{"model":"m",` + msgs + `,"max_completion_tokens":1e30}`},
		{"max_output_tokens type", "max_output_tokens", CodeInvalidType, "'max_output_tokens' must be a non-negative integer", KindResponses, `{"model":"m","input":"x","max_output_tokens":true}`},
		{"sampling_params type", "sampling_params", CodeInvalidType, "'sampling_params' must be an object", KindGenerate, `{"text":"x","sampling_params":[]}`},
		{"max_new_tokens", "sampling_params.max_new_tokens", CodeInvalidValue, "'sampling_params.max_new_tokens' must be a non-negative integer", KindGenerate, `{"text":"x","sampling_params":{"max_new_tokens":-5}}`},
		{"missing prompt", "prompt", CodeMissingRequired, "'prompt' is required", KindCompletions, `{"model":"m"}`},
		{"null prompt", "prompt", CodeMissingRequired, "'prompt' is required", KindCompletions, `{"model":"m","prompt":null}`},
		{"prompt type", "prompt", CodeInvalidType, "'prompt' must be a string, an array of strings, an array of token ids, or an array of token id arrays", KindCompletions, `{"model":"m","prompt":{}}`},
		{"prompt empty array", "prompt", CodeInvalidValue, "'prompt' must be a non-empty string or array", KindCompletions, `{"model":"m","prompt":[]}`},
		{"prompt mixed", "prompt", CodeInvalidType, "'prompt' must be a string, an array of strings, an array of token ids, or an array of token id arrays, not a mix", KindCompletions, `{"model":"m","prompt":["a",1]}`},
		{"prompt mixed ids and lists", "prompt", CodeInvalidType, "not a mix", KindCompletions, `{"model":"m","prompt":[1,[2]]}`},
		{"prompt list of objects", "prompt", CodeInvalidType, "'prompt' must be a string, an array of strings", KindCompletions, `{"model":"m","prompt":[{}]}`},
		{"negative id", "prompt[1]", CodeInvalidValue, "'prompt[1]' must be a token id: an integer in [0, 4294967295]", KindCompletions, `{"model":"m","prompt":[1,-2]}`},
		{"id too big", "prompt[0]", CodeInvalidValue, "'prompt[0]' must be a token id", KindCompletions, `{"model":"m","prompt":[4294967296]}`},
		{"id huge", "prompt[0]", CodeInvalidValue, "'prompt[0]' must be a token id", KindCompletions, `{"model":"m","prompt":[1e400]}`},
		{"id fraction", "prompt[0]", CodeInvalidValue, "'prompt[0]' must be a token id", KindCompletions, `{"model":"m","prompt":[1.5]}`},
		{"nested negative id", "prompt[1][0]", CodeInvalidValue, "'prompt[1][0]' must be a token id", KindCompletions, `{"model":"m","prompt":[[1],[-1]]}`},
		{"nested string", "prompt[0]", CodeInvalidType, "'prompt[0]' must be an array of token ids", KindCompletions, `{"model":"m","prompt":[["a"]]}`},
		{"missing input", "input", CodeMissingRequired, "'input' is required", KindEmbeddings, `{"model":"m"}`},
		{"input type", "input", CodeInvalidType, "'input' must be a string, an array of strings", KindEmbeddings, `{"model":"m","input":true}`},
		{"missing messages", "messages", CodeMissingRequired, "'messages' is required", KindChatCompletions, `{"model":"m"}`},
		{"messages type", "messages", CodeInvalidType, "'messages' must be a non-empty array", KindChatCompletions, `{"model":"m","messages":"hi"}`},
		{"messages empty", "messages", CodeInvalidValue, "'messages' must be a non-empty array", KindChatCompletions, `{"model":"m","messages":[]}`},
		{"message not object", "messages[0]", CodeInvalidType, "'messages[0]' must be an object", KindChatCompletions, `{"model":"m","messages":["hi"]}`},
		{"message no role", "messages[1].role", CodeMissingRequired, "'messages[1].role' is required", KindChatCompletions, `{"model":"m","messages":[{"role":"user","content":"a"},{"content":"b"}]}`},
		{"role type", "messages[0].role", CodeInvalidType, "'messages[0].role' must be a string", KindChatCompletions, `{"model":"m","messages":[{"role":1}]}`},
		{"name type", "messages[0].name", CodeInvalidType, "'messages[0].name' must be a string", KindChatCompletions, `{"model":"m","messages":[{"role":"user","name":2,"content":"x"}]}`},
		{"content type", "messages[0].content", CodeInvalidType, "'messages[0].content' must be a string or an array of content parts", KindChatCompletions, `{"model":"m","messages":[{"role":"user","content":42}]}`},
		{"part not object", "messages[0].content[1]", CodeInvalidType, "'messages[0].content[1]' must be an object", KindChatCompletions, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},"b"]}]}`},
		{"part no type", "messages[0].content[0].type", CodeMissingRequired, "'messages[0].content[0].type' is required", KindChatCompletions, `{"model":"m","messages":[{"role":"user","content":[{"text":"a"}]}]}`},
		{"part type type", "messages[0].content[0].type", CodeInvalidType, "'messages[0].content[0].type' must be a string", KindChatCompletions, `{"model":"m","messages":[{"role":"user","content":[{"type":7}]}]}`},
		{"text part text", "messages[0].content[0].text", CodeInvalidType, "'messages[0].content[0].text' must be a string", KindChatCompletions, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":null}]}]}`},
		{"tool_calls type", "messages[0].tool_calls", CodeInvalidType, "'messages[0].tool_calls' must be an array", KindChatCompletions, `{"model":"m","messages":[{"role":"assistant","tool_calls":{}}]}`},
		{"tool call not object", "messages[0].tool_calls[0]", CodeInvalidType, "'messages[0].tool_calls[0]' must be an object", KindChatCompletions, `{"model":"m","messages":[{"role":"assistant","tool_calls":[1]}]}`},
		{"tool call function", "messages[0].tool_calls[0].function", CodeInvalidType, "'messages[0].tool_calls[0].function' must be an object", KindChatCompletions, `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":"f"}]}]}`},
		{"tool call name", "messages[0].tool_calls[0].function.name", CodeInvalidType, "'messages[0].tool_calls[0].function.name' must be a string", KindChatCompletions, `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"name":1}}]}]}`},
		{"tools type", "tools", CodeInvalidType, "'tools' must be an array", KindChatCompletions, `{"model":"m",` + msgs + `,"tools":{"a":1}}`},
		{"missing responses input", "input", CodeMissingRequired, "'input' is required", KindResponses, `{"model":"m"}`},
		{"responses input type", "input", CodeInvalidType, "'input' must be a string or an array of input items", KindResponses, `{"model":"m","input":3}`},
		{"responses input empty", "input", CodeInvalidValue, "'input' must be a string or a non-empty array", KindResponses, `{"model":"m","input":[]}`},
		{"responses item not object", "input[0]", CodeInvalidType, "'input[0]' must be an object", KindResponses, `{"model":"m","input":["x"]}`},
		{"responses item no type", "input[0].type", CodeMissingRequired, "'input[0].type' is required", KindResponses, `{"model":"m","input":[{"content":"x"}]}`},
		{"responses instructions", "instructions", CodeInvalidType, "'instructions' must be a string", KindResponses, `{"model":"m","input":"x","instructions":[]}`},
		{"responses output type", "input[0].output", CodeInvalidType, "'input[0].output' must be a string or an array of content parts", KindResponses, `{"model":"m","input":[{"type":"function_call_output","output":5}]}`},
		{"generate nothing", "text", CodeMissingRequired, "'text' is required", KindGenerate, `{"sampling_params":{}}`},
		{"generate both", "input_ids", CodeInvalidValue, "give either 'text' or 'input_ids', not both", KindGenerate, `{"text":"a","input_ids":[1]}`},
		{"generate ids type", "input_ids", CodeInvalidType, "'input_ids' must be an array of token ids or an array of token id arrays", KindGenerate, `{"input_ids":"1 2 3"}`},
		{"generate ids strings", "input_ids", CodeInvalidType, "'input_ids' must be an array of token ids or an array of token id arrays", KindGenerate, `{"input_ids":["1"]}`},
		{"generate text ids", "text", CodeInvalidType, "'text' must be a string or an array of strings", KindGenerate, `{"text":[1,2]}`},
		{"generate text type", "text", CodeInvalidType, "'text' must be a string or an array of strings", KindGenerate, `{"text":{}}`},
		{"nvext type", "nvext", CodeInvalidType, "'nvext' must be an object", KindCompletions, `{"model":"m","prompt":"x","nvext":[]}`},
		{"agent_hints type", "nvext.agent_hints", CodeInvalidType, "'nvext.agent_hints' must be an object", KindCompletions, `{"model":"m","prompt":"x","nvext":{"agent_hints":1}}`},
		{"priority type", "nvext.agent_hints.priority", CodeInvalidType, "'nvext.agent_hints.priority' must be a 32-bit integer", KindCompletions, `{"model":"m","prompt":"x","nvext":{"agent_hints":{"priority":"high"}}}`},
		{"priority range", "nvext.agent_hints.priority", CodeInvalidValue, "'nvext.agent_hints.priority' must be a 32-bit integer", KindCompletions, `{"model":"m","prompt":"x","nvext":{"agent_hints":{"priority":2147483648}}}`},
		{"strict_priority negative", "nvext.agent_hints.strict_priority", CodeInvalidValue, "'nvext.agent_hints.strict_priority' must be an integer in [0, 4294967295]", KindCompletions, `{"model":"m","prompt":"x","nvext":{"agent_hints":{"strict_priority":-1}}}`},
		{"latency_sensitivity type", "nvext.agent_hints.latency_sensitivity", CodeInvalidType, "'nvext.agent_hints.latency_sensitivity' must be a number", KindCompletions, `{"model":"m","prompt":"x","nvext":{"agent_hints":{"latency_sensitivity":"low"}}}`},
		{"latency_sensitivity inf", "nvext.agent_hints.latency_sensitivity", CodeInvalidValue, "'nvext.agent_hints.latency_sensitivity' must be a finite number", KindCompletions, `{"model":"m","prompt":"x","nvext":{"agent_hints":{"latency_sensitivity":1e999}}}`},
		{"backend id negative", "nvext.backend_instance_id", CodeInvalidValue, "'nvext.backend_instance_id' must be an unsigned 64-bit integer or a string", KindCompletions, `{"model":"m","prompt":"x","nvext":{"backend_instance_id":-4}}`},
		{"backend id fraction", "nvext.backend_instance_id", CodeInvalidValue, "'nvext.backend_instance_id' must be an unsigned 64-bit integer or a string", KindCompletions, `{"model":"m","prompt":"x","nvext":{"backend_instance_id":1.5}}`},
		{"backend id empty", "nvext.backend_instance_id", CodeInvalidValue, "'nvext.backend_instance_id' must be a non-empty string or an unsigned integer", KindCompletions, `{"model":"m","prompt":"x","nvext":{"backend_instance_id":""}}`},
		{"backend id type", "nvext.backend_instance_id", CodeInvalidType, "'nvext.backend_instance_id' must be an unsigned integer or a string", KindCompletions, `{"model":"m","prompt":"x","nvext":{"backend_instance_id":true}}`},
		{"dp_rank negative", "nvext.dp_rank", CodeInvalidValue, "'nvext.dp_rank' must be an integer in [0, 4294967295]", KindCompletions, `{"model":"m","prompt":"x","nvext":{"dp_rank":-1}}`},
		{"dp_rank type", "nvext.dp_rank", CodeInvalidType, "'nvext.dp_rank' must be an integer in [0, 4294967295]", KindCompletions, `{"model":"m","prompt":"x","nvext":{"dp_rank":"0"}}`},
		{"routing_constraints type", "nvext.routing_constraints", CodeInvalidType, "'nvext.routing_constraints' must be an object", KindCompletions, `{"model":"m","prompt":"x","nvext":{"routing_constraints":"gpu"}}`},
		{"required_taints type", "nvext.routing_constraints.required_taints", CodeInvalidType, "'nvext.routing_constraints.required_taints' must be an array", KindCompletions, `{"model":"m","prompt":"x","nvext":{"routing_constraints":{"required_taints":"gpu"}}}`},
		{"too many required_taints", "nvext.routing_constraints.required_taints", CodeInvalidValue, "'nvext.routing_constraints.required_taints' must be an array of at most 16 strings", KindCompletions, `{"model":"m","prompt":"x","nvext":{"routing_constraints":{"required_taints":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}}}`},
		{"required_taints element", "nvext.routing_constraints.required_taints[1]", CodeInvalidType, "'nvext.routing_constraints.required_taints[1]' must be a string", KindCompletions, `{"model":"m","prompt":"x","nvext":{"routing_constraints":{"required_taints":["a",1]}}}`},
		{"unknown kind", "", CodeInvalidValue, "unknown route kind 99", Kind(99), `{"model":"m"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Parse(tc.kind, []byte(tc.body))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", r)
			}
			if r != nil {
				t.Errorf("Parse returned a request with its error: %+v", r)
			}
			e, ok := errors.AsType[*Error](err)
			if !ok {
				t.Fatalf("error %T is not *Error: %v", err, err)
			}
			if e.Status != http.StatusBadRequest || e.Param != tc.param || e.Code != tc.code || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("got status %d param %q code %q message %q;\nwant 400, %q, %q, containing %q",
					e.Status, e.Param, e.Code, e.Message, tc.param, tc.code, tc.msg)
			}
		})
	}
}

func TestErrorJSON(t *testing.T) {
	e := wrongType("messages", "a non-empty array")
	want := `{"error":{"message":"'messages' must be a non-empty array","type":"invalid_request_error","param":"messages","code":"invalid_type"}}`
	if got := string(e.JSON()); got != want {
		t.Errorf("JSON() =\n%s\nwant\n%s", got, want)
	}
	e = &Error{Status: 503, Message: `say "hi"`, Type: "server_error"}
	want = `{"error":{"message":"say \"hi\"","type":"server_error","param":null,"code":null}}`
	if got := string(e.JSON()); got != want {
		t.Errorf("JSON() =\n%s\nwant\n%s", got, want)
	}
	if e.Error() != `say "hi"` {
		t.Errorf("Error() = %q", e.Error())
	}
}

func TestIntegerBounds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"2147483647", math.MaxInt32, true}, {"2147483648", 0, false},
		{"-1", 0, false}, {"3.0", 3, true}, {"3e2", 300, true}, {"3.5", 0, false},
		{"1e400", 0, false}, {"99999999999999999999", 0, false},
	} {
		got, err := integer([]byte(tc.in), "f", 0, math.MaxInt32, "x")
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("integer(%s) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// FuzzParse checks that Parse never panics, that every error is a 400
// *Error with a message, and that a success is internally consistent.
func FuzzParse(f *testing.F) {
	seeds := []string{
		`{"model":"m","prompt":"hello"}`,
		`{"model":"m","prompt":["a","b"],"max_tokens":3}`,
		`{"model":"m","prompt":[1,2,3]}`,
		`{"model":"m","prompt":[[1],[2,3]]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url"}]}],"tools":[{}]}`,
		`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]}`,
		`{"model":"m","input":[{"type":"function_call","name":"f"},{"role":"user","content":"x"}]}`,
		`{"text":"x","sampling_params":{"max_new_tokens":1}}`,
		`{"input_ids":[[1,2]]}`,
		`{"model":"m","prompt":"x","nvext":{"agent_hints":{"priority":1,"strict_priority":2,"latency_sensitivity":3},"backend_instance_id":4,"dp_rank":5,"routing_constraints":{"required_taints":["t"]}}}`,
		`{"model":"m","prompt":[1,-1]}`, `[`, ``, `{"model":"\ud800"}`,
	}
	for _, s := range seeds {
		for _, k := range Kinds {
			f.Add(uint8(k), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, k uint8, body []byte) {
		kind := Kinds[int(k)%len(Kinds)]
		r, err := Parse(kind, body)
		if err != nil {
			e, ok := errors.AsType[*Error](err)
			if !ok || e.Status != http.StatusBadRequest || e.Message == "" || r != nil {
				t.Fatalf("bad error %T %v (request %v)", err, err, r)
			}
			if !json.Valid(e.JSON()) {
				t.Fatalf("invalid error JSON %s", e.JSON())
			}
			return
		}
		if r.Kind != kind || r.TextBytes != len(r.Text) || r.MaxTokens < 0 {
			t.Fatalf("inconsistent request %+v", r)
		}
		if kind != KindGenerate && r.Model == "" {
			t.Fatalf("accepted a request without a model: %s", body)
		}
		if r.Text != "" && len(r.TokenIDs) > 0 {
			t.Fatalf("both text and ids: %+v", r)
		}
	})
}

func ExampleParse() {
	r, err := Parse(KindChatCompletions, []byte(`{"model":"llama","messages":[
		{"role":"system","content":"Be brief."},
		{"role":"user","content":"Hi!"}],
		"max_tokens":64,"nvext":{"agent_hints":{"priority":5}}}`))
	if e, ok := errors.AsType[*Error](err); ok {
		fmt.Println(string(e.JSON()))
		return
	}
	fmt.Printf("%s %d %d %q\n", r.Model, r.MaxTokens, *r.Hints.Priority, r.Text)
	_, err = Parse(KindChatCompletions, []byte(`{"model":"llama","messages":[]}`))
	if e, ok := errors.AsType[*Error](err); ok {
		fmt.Println(string(e.JSON()))
	}
	// Output:
	// llama 64 5 "system: Be brief.\nuser: Hi!\n"
	// {"error":{"message":"'messages' must be a non-empty array","type":"invalid_request_error","param":"messages","code":"invalid_value"}}
}

func benchBody(b *testing.B, kind Kind) []byte {
	b.Helper()
	para := strings.Repeat("The quick brown fox jumps over the lazy dog, and \"quotes\" stay escaped. ", 14)
	var body []byte
	switch kind {
	case KindChatCompletions:
		msgs := make([]map[string]any, 0, 100)
		for i := range 100 {
			role := []string{"user", "assistant"}[i%2]
			msgs = append(msgs, map[string]any{"role": role, "content": para})
		}
		body, _ = json.Marshal(map[string]any{"model": "llama", "messages": msgs, "stream": true})
	case KindCompletions:
		ids := make([]uint32, 16384)
		for i := range ids {
			ids[i] = uint32(i * 31 % 128000)
		}
		body, _ = json.Marshal(map[string]any{"model": "llama", "prompt": ids})
	case KindEmbeddings, KindResponses, KindGenerate:
		b.Fatalf("no benchmark body for %v", kind)
	}
	return body
}

func BenchmarkParseChat100KiB(b *testing.B) {
	body := benchBody(b, KindChatCompletions)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(KindChatCompletions, body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseTokenIDs16k(b *testing.B) {
	body := benchBody(b, KindCompletions)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(KindCompletions, body); err != nil {
			b.Fatal(err)
		}
	}
}

func TestParseKeysExactAndLastWins(t *testing.T) {
	if _, err := Parse(KindCompletions, []byte(`{"MODEL":"m","prompt":"x"}`)); err == nil || err.Error() != "'model' is required" {
		t.Errorf("upper-case key accepted as model: %v", err)
	}
	r := mustParse(t, KindCompletions, `{"model":"a","prompt":"x","model":"b","\u006dax_tokens":3}`)
	if r.Model != "b" || r.MaxTokens != 3 {
		t.Errorf("got model %q max_tokens %d; want the last model and an escaped key to match", r.Model, r.MaxTokens)
	}
}

func TestStringValueMatchesEncodingJSON(t *testing.T) {
	for _, raw := range []string{
		`""`, `"plain"`, `"tab\there"`, `"\u00e9\u4e2d\ud83d\ude00"`, `"\ud83d"`, `"\ud83dx"`, `"\ude00\ud83d"`,
		`"\ud83d\u0041"`, `"a\/b\\c\"d\b\f\n\r"`, "\"caf\xc3\xa9\"", "\"bad \xff byte\"", "\"trunc \xe4\xb8\"",
		`"\u0000"`,
	} {
		var want string
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		got, err := stringValue([]byte(raw), "f")
		if err != nil || got != want {
			t.Errorf("stringValue(%s) = %q, %v; want %q", raw, got, err, want)
		}
	}
}

func FuzzStringValue(f *testing.F) {
	for _, s := range []string{`"a"`, `"\ud83d\ude00"`, `"\ud83d"`, "\"\xff\"", `"\n\u0041"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var want string
		err := json.Unmarshal(raw, &want)
		got, perr := stringValue(raw, "f")
		if err != nil {
			return // invalid JSON never reaches stringValue
		}
		if perr != nil || got != want {
			t.Fatalf("stringValue(%q) = %q, %v; encoding/json says %q", raw, got, perr, want)
		}
	})
}

// TestParse_ModelField: the parse records where the model's raw value is,
// the last one when repeated, so a rewrite can replace it in place
// without a second pass over the body.
func TestParse_ModelField(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":"llama","prompt":"hi"}`:                 `"llama"`,
		`{"prompt":"hi", "model" : "a\u0062"}`:            `"a\u0062"`,
		`{"model":"x","prompt":"hi","model":"llama-3.1"}`: `"llama-3.1"`,
	} {
		r, err := Parse(KindCompletions, []byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		m := r.ModelField
		if got := body[m.Start:m.End]; got != want || m.Name != r.Model {
			t.Errorf("%s: range holds %s, name %q; want %s and %q", body, got, m.Name, want, r.Model)
		}
	}
}
