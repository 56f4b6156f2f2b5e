package mockworker

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseGenerate_PromptForms(t *testing.T) {
	cfg := Config{Model: "m"}.withDefaults()
	tests := []struct {
		name string
		give string
		want []int
	}{
		{name: "string", give: `{"prompt":"abcdefgh"}`, want: Tokenize("abcdefgh")},
		{name: "token ids", give: `{"prompt":[5,6,7]}`, want: []int{5, 6, 7}},
		{name: "one-string batch", give: `{"prompt":["abcdefgh"]}`, want: Tokenize("abcdefgh")},
		{name: "one-ids batch", give: `{"prompt":[[5,6]]}`, want: []int{5, 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := parseGenerate([]byte(tt.give), false, cfg)
			if err != nil {
				t.Fatalf("parseGenerate: %v", err)
			}
			if diff := cmp.Diff(tt.want, req.tokens); diff != "" {
				t.Errorf("tokens (-want +got):\n%s", diff)
			}
			if req.model != "m" || req.maxTokens != DefaultMaxTokens || req.stream {
				t.Errorf("model %q max tokens %d stream %v, want the defaults", req.model, req.maxTokens, req.stream)
			}
		})
	}
}

func TestParseGenerate_ChatRendersMessages(t *testing.T) {
	cfg := Config{Model: "m"}.withDefaults()
	body := `{"model":"m","messages":[{"role":"system","content":"be brief"},` +
		`{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},` +
		`{"role":"assistant","content":null}],"max_completion_tokens":3,"max_tokens":9,` +
		`"stream":true,"stream_options":{"include_usage":true},"temperature":0.7}`
	req, err := parseGenerate([]byte(body), true, cfg)
	if err != nil {
		t.Fatalf("parseGenerate: %v", err)
	}
	want := Tokenize(RenderChat([]ChatMessage{
		{Role: "system", Content: "be brief"}, {Role: "user", Content: "a\nb"}, {Role: "assistant"},
	}))
	if diff := cmp.Diff(want, req.tokens); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
	if req.maxTokens != 3 || !req.stream || !req.includeUsage {
		t.Errorf("max tokens %d stream %v include usage %v, want 3 (max_completion_tokens wins), true, true",
			req.maxTokens, req.stream, req.includeUsage)
	}
}

func TestParseGenerate_Rejects(t *testing.T) {
	cfg := Config{Model: "m", MaxModelLen: 64}.withDefaults()
	tests := []struct {
		name       string
		chat       bool
		give       string
		wantStatus int
		wantParam  string
		wantMsg    string
	}{
		{name: "invalid JSON", give: `{"prompt":`, wantStatus: 400, wantMsg: "invalid JSON body"},
		{name: "unknown model", give: `{"model":"x","prompt":"a"}`, wantStatus: 404, wantMsg: "The model `x` does not exist."},
		{name: "n above 1", give: `{"prompt":"a","n":2}`, wantStatus: 400, wantParam: "n", wantMsg: "n must be 1, got 2"},
		{name: "stream options without stream", give: `{"prompt":"a","stream_options":{"include_usage":true}}`, wantStatus: 400, wantParam: "stream_options", wantMsg: "Stream options can only be defined when `stream=True`."},
		{name: "zero max tokens", give: `{"prompt":"a","max_tokens":0}`, wantStatus: 400, wantParam: "max_tokens", wantMsg: "max_tokens must be at least 1, got 0"},
		{name: "missing prompt", give: `{}`, wantStatus: 400, wantParam: "prompt", wantMsg: "prompt is required"},
		{name: "empty prompt", give: `{"prompt":""}`, wantStatus: 400, wantParam: "prompt", wantMsg: "prompt must not be empty"},
		{name: "empty ids", give: `{"prompt":[]}`, wantStatus: 400, wantParam: "prompt", wantMsg: "prompt must not be empty"},
		{name: "negative id", give: `{"prompt":[1,-2]}`, wantStatus: 400, wantParam: "prompt", wantMsg: "token id -2 is negative"},
		{name: "batch of two", give: `{"prompt":["a","b"]}`, wantStatus: 400, wantParam: "prompt", wantMsg: "batched prompts are not supported: got 2 prompts, want 1"},
		{name: "wrong prompt type", give: `{"prompt":{"a":1}}`, wantStatus: 400, wantParam: "prompt", wantMsg: "prompt must be a string, an array of token ids"},
		{name: "over model length", give: `{"prompt":[` + strings.Repeat("1,", 59) + `1],"max_tokens":10}`, wantStatus: 400, wantParam: "max_tokens", wantMsg: "maximum context length is 64 tokens. However, you requested 70 tokens (60 in the prompt, 10 in the completion)"},
		{name: "no messages", chat: true, give: `{"messages":[]}`, wantStatus: 400, wantParam: "messages", wantMsg: "messages must not be empty"},
		{name: "message without role", chat: true, give: `{"messages":[{"content":"a"}]}`, wantStatus: 400, wantParam: "messages", wantMsg: "messages[0].role is required"},
		{name: "image part", chat: true, give: `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, wantStatus: 400, wantParam: "messages", wantMsg: `messages[0].content: part 0 has type "image_url": only text parts are supported`},
		{name: "numeric content", chat: true, give: `{"messages":[{"role":"user","content":5}]}`, wantStatus: 400, wantParam: "messages", wantMsg: "must be a string or an array of content parts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseGenerate([]byte(tt.give), tt.chat, cfg)
			if err == nil {
				t.Fatal("parseGenerate accepted the body")
			}
			if err.Code != tt.wantStatus || !strings.Contains(err.Message, tt.wantMsg) {
				t.Errorf("error %d %q, want %d containing %q", err.Code, err.Message, tt.wantStatus, tt.wantMsg)
			}
			param := ""
			if err.Param != nil {
				param = *err.Param
			}
			if param != tt.wantParam {
				t.Errorf("param %q, want %q", param, tt.wantParam)
			}
			wantType := "BadRequestError"
			if tt.wantStatus == http.StatusNotFound {
				wantType = "NotFoundError"
			}
			if err.Type != wantType {
				t.Errorf("type %q, want %q", err.Type, wantType)
			}
		})
	}
}
