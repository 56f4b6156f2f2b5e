package openai

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A vLLM chat stream with stream_options.include_usage: every chunk says
// "usage":null except the last, whose choices are empty.
const chatStream = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":null}

data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hello \"usage\": {}"}}],"usage":null}

data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"stop"}],"usage":null}

data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1234,"total_tokens":1240,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":1024}}}

data: [DONE]

`

var chatUsage = Usage{PromptTokens: 1234, CachedTokens: 1024, CompletionTokens: 6, Found: true}

func scan(chunks ...string) Usage {
	var s UsageScanner
	for _, c := range chunks {
		s.Feed([]byte(c))
	}
	return s.Usage()
}

func TestUsageStreamSplitAtEveryByte(t *testing.T) {
	for i := 0; i <= len(chatStream); i++ {
		if got := scan(chatStream[:i], chatStream[i:]); got != chatUsage {
			t.Fatalf("split at %d: got %+v, want %+v", i, got, chatUsage)
		}
	}
	// One byte at a time.
	chunks := strings.Split(chatStream, "")
	if got := scan(chunks...); got != chatUsage {
		t.Errorf("byte by byte: got %+v", got)
	}
}

func TestUsageRandomSplits(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	body := jsonResponse
	for range 200 {
		var chunks []string
		for rest := body; len(rest) > 0; {
			n := 1 + r.IntN(min(len(rest), 40))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		if got := scan(chunks...); got != jsonUsage {
			t.Fatalf("chunks %q: got %+v", chunks, got)
		}
	}
}

// A non-streamed, pretty-printed completion: the usage object spans lines.
const jsonResponse = `{
  "id": "cmpl-1",
  "object": "text_completion",
  "choices": [
    {"index": 0, "text": "} { \"usage\": {\"prompt_tokens\": 1} [", "usage": {"prompt_tokens": 999}, "finish_reason": "length"}
  ],
  "usage": {
    "prompt_tokens": 42,
    "total_tokens": 58,
    "completion_tokens": 16,
    "prompt_tokens_details": null
  }
}`

var jsonUsage = Usage{PromptTokens: 42, CompletionTokens: 16, Found: true}

func TestUsageJSONSplitAtEveryByte(t *testing.T) {
	for i := 0; i <= len(jsonResponse); i++ {
		for j := i; j <= len(jsonResponse); j += 7 {
			if got := scan(jsonResponse[:i], jsonResponse[i:j], jsonResponse[j:]); got != jsonUsage {
				t.Fatalf("split at %d, %d: got %+v, want %+v", i, j, got, jsonUsage)
			}
		}
	}
}

func TestUsageShapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want Usage
	}{
		{"no usage in stream", "data: {\"choices\":[],\"usage\":null}\n\ndata: [DONE]\n\n", Usage{}},
		{"empty body", "", Usage{}},
		{"plain text error", "upstream connect error or disconnect/reset before headers", Usage{}},
		{"error json", `{"error":{"message":"bad","type":"invalid_request_error"}}`, Usage{}},
		{"crlf and no space after colon", "data:{\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\r\n\r\ndata:[DONE]\r\n", Usage{PromptTokens: 3, CompletionTokens: 4, Found: true}},
		{"comments, event and id lines", ": keep-alive\nevent: message\nid: 7\ndata: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\nretry: 10\n\n", Usage{PromptTokens: 5, CompletionTokens: 1, Found: true}},
		{"not a data line", "xdata: {\"usage\":{\"prompt_tokens\":5}}\n", Usage{}},
		{"continuous usage: last wins", "data: {\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1}}\n\ndata: {\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2}}\n\n", Usage{PromptTokens: 10, CompletionTokens: 2, Found: true}},
		{"usage later nulled", "data: {\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1}}\n\ndata: {\"usage\":null}\n\n", Usage{PromptTokens: 10, CompletionTokens: 1, Found: true}},
		{"responses stream", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"usage\":null}}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"output\":[{\"usage\":{\"input_tokens\":1}}],\"usage\":{\"input_tokens\":77,\"input_tokens_details\":{\"cached_tokens\":64},\"output_tokens\":9,\"total_tokens\":86}}}\n\n", Usage{PromptTokens: 77, CachedTokens: 64, CompletionTokens: 9, Found: true}},
		{"responses json", `{"id":"r","object":"response","output":[],"usage":{"input_tokens":12,"output_tokens":3,"input_tokens_details":{"cached_tokens":0}}}`, Usage{PromptTokens: 12, CompletionTokens: 3, Found: true}},
		{"embeddings", `{"object":"list","data":[{"embedding":[0.1,-0.2,{"usage":1}],"index":0}],"model":"e","usage":{"prompt_tokens":8,"total_tokens":8}}`, Usage{PromptTokens: 8, Found: true}},
		{"sglang generate", `{"text":"Paris","meta_info":{"id":"x","prompt_tokens":6,"completion_tokens":2,"cached_tokens":5,"finish_reason":{"type":"stop"}}}`, Usage{PromptTokens: 6, CachedTokens: 5, CompletionTokens: 2, Found: true}},
		{"sglang stream", "data: {\"text\":\"P\",\"meta_info\":{\"prompt_tokens\":6,\"completion_tokens\":1,\"cached_tokens\":0}}\n\ndata: {\"text\":\"Paris\",\"meta_info\":{\"prompt_tokens\":6,\"completion_tokens\":2,\"cached_tokens\":0}}\n\ndata: [DONE]\n\n", Usage{PromptTokens: 6, CompletionTokens: 2, Found: true}},
		{"usage without counts", `{"usage":{"foo":1}}`, Usage{}},
		{"usage not an object", `{"usage":[1,2],"x":{"usage":3}}`, Usage{}},
		{"negative counts", `{"usage":{"prompt_tokens":-5,"completion_tokens":2}}`, Usage{CompletionTokens: 2, Found: true}},
		{"wrong count type", `{"usage":{"prompt_tokens":"5"}}`, Usage{}},
		{"escaped key", `{"us\u0061ge":{"prompt_tokens":5}}`, Usage{}},
		{"long key", `{"usage_and_a_much_longer_name":{"prompt_tokens":5}}`, Usage{}},
		{"key prefix", `{"usag":{"prompt_tokens":5}}`, Usage{}},
		{"string value named usage", `{"note":"usage","usage":{"prompt_tokens":2}}`, Usage{PromptTokens: 2, Found: true}},
		{"bom", "\uFEFF{\"usage\":{\"prompt_tokens\":2}}", Usage{PromptTokens: 2, Found: true}},
		{"top-level array", `[{"usage":{"prompt_tokens":2}}]`, Usage{}},
		{"concatenated json", `{"a":1}{"usage":{"prompt_tokens":2}}`, Usage{PromptTokens: 2, Found: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, scan(tc.body)); diff != "" {
				t.Errorf("Usage (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUsageLargeBodyBoundedMemory(t *testing.T) {
	// A 4 MiB embeddings response: the usage comes last and is still found,
	// while the scanner holds only the usage object.
	var s UsageScanner
	s.Feed([]byte(`{"object":"list","data":[`))
	vec := "{\"embedding\":[" + strings.Repeat("0.0123456789,", 4095) + "0.1],\"index\":0},"
	for range 4 << 20 / len(vec) {
		s.Feed([]byte(vec))
	}
	s.Feed([]byte(`{"embedding":[],"index":1}],"usage":{"prompt_tokens":4096,"total_tokens":4096}}`))
	if got := s.Usage(); got != (Usage{PromptTokens: 4096, Found: true}) {
		t.Errorf("got %+v", got)
	}
	if cap(s.buf) > 1024 {
		t.Errorf("buffer grew to %d bytes", cap(s.buf))
	}
}

func TestUsageOversizeDropped(t *testing.T) {
	big := `{"usage":{"prompt_tokens":1,"pad":"` + strings.Repeat("x", MaxUsageBytes) + `"}}`
	var s UsageScanner
	s.Feed([]byte(big))
	if s.Usage().Found {
		t.Errorf("an oversize usage object was parsed: %+v", s.Usage())
	}
	if cap(s.buf) > 2*MaxUsageBytes {
		t.Errorf("buffer grew to %d bytes, bound %d", cap(s.buf), MaxUsageBytes)
	}
	// The scanner recovers for the next event.
	s.Reset()
	s.Feed([]byte("data: " + big + "\n\ndata: {\"usage\":{\"prompt_tokens\":3}}\n\n"))
	if got := s.Usage(); got != (Usage{PromptTokens: 3, Found: true}) {
		t.Errorf("after an oversize event: %+v", got)
	}
}

func TestUsageReset(t *testing.T) {
	var s UsageScanner
	s.Feed([]byte(chatStream))
	s.Reset()
	if s.Usage().Found {
		t.Fatal("Reset kept the usage")
	}
	s.Feed([]byte(jsonResponse))
	if s.Usage() != jsonUsage {
		t.Errorf("after Reset: %+v", s.Usage())
	}
}

func FuzzUsageScanner(f *testing.F) {
	f.Add([]byte(chatStream), 10)
	f.Add([]byte(jsonResponse), 3)
	f.Add([]byte(`{"meta_info":{"prompt_tokens":1}}`), 0)
	f.Add([]byte("data: {\"response\":{\"usage\":{\"input_tokens\":1}}}\n"), 5)
	f.Fuzz(func(t *testing.T, body []byte, cut int) {
		// The result must not depend on how the body is split.
		whole := scan(string(body))
		if cut < 0 {
			cut = -cut
		}
		if len(body) > 0 {
			cut %= len(body) + 1
		} else {
			cut = 0
		}
		var s UsageScanner
		s.Feed(body[:cut])
		s.Feed(body[cut:])
		if s.Usage() != whole {
			t.Fatalf("split at %d: %+v, whole: %+v", cut, s.Usage(), whole)
		}
		if u := s.Usage(); u.PromptTokens < 0 || u.CachedTokens < 0 || u.CompletionTokens < 0 {
			t.Fatalf("negative usage %+v", u)
		}
		if cap(s.buf) > 2*MaxUsageBytes {
			t.Fatalf("buffer %d", cap(s.buf))
		}
	})
}

func ExampleUsageScanner() {
	var s UsageScanner
	for _, chunk := range []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\ndata: {\"choices\":[],\"usa",
		"ge\":{\"prompt_tokens\":12,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\ndata: [DONE]\n\n",
	} {
		s.Feed([]byte(chunk))
	}
	fmt.Printf("%+v\n", s.Usage())
	// Output: {PromptTokens:12 CachedTokens:8 CompletionTokens:1 Found:true}
}

func BenchmarkUsageScannerStream(b *testing.B) {
	chunk := []byte(`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"token"}}],"usage":null}` + "\n\n")
	final := []byte(`data: {"choices":[],"usage":{"prompt_tokens":1234,"completion_tokens":256}}` + "\n\ndata: [DONE]\n\n")
	b.SetBytes(int64(256*len(chunk) + len(final)))
	b.ReportAllocs()
	var s UsageScanner
	for b.Loop() {
		s.Reset()
		for range 256 {
			s.Feed(chunk)
		}
		s.Feed(final)
	}
	if !s.Usage().Found {
		b.Fatal("no usage")
	}
}

// decodeUsageReference is the reflection decoder decodeUsageFields
// replaced, kept as its oracle.
func decodeUsageReference(b []byte) (usageFields, bool) {
	type details struct {
		CachedTokens *int `json:"cached_tokens"`
	}
	var u struct {
		PromptTokens        *int     `json:"prompt_tokens"`
		InputTokens         *int     `json:"input_tokens"`
		CompletionTokens    *int     `json:"completion_tokens"`
		OutputTokens        *int     `json:"output_tokens"`
		CachedTokens        *int     `json:"cached_tokens"`
		PromptTokensDetails *details `json:"prompt_tokens_details"`
		InputTokensDetails  *details `json:"input_tokens_details"`
	}
	var f usageFields
	if json.Unmarshal(b, &u) != nil || valueKind(b) != kindObject {
		return f, false
	}
	opt := func(p *int) optInt {
		if p == nil {
			return optInt{}
		}
		return optInt{*p, true}
	}
	f.ints = [numUsageInts]optInt{opt(u.PromptTokens), opt(u.InputTokens), opt(u.CompletionTokens), opt(u.OutputTokens), opt(u.CachedTokens)}
	for i, d := range []*details{u.PromptTokensDetails, u.InputTokensDetails} {
		if d != nil {
			f.details[i].set, f.details[i].cached = true, opt(d.CachedTokens)
		}
	}
	return f, true
}

// TestDecodeUsageFields holds the usage decoder to encoding/json on the
// cases where they could part: case, duplicates, null, nested details,
// number forms, wrong types and broken JSON.
func TestDecodeUsageFields(t *testing.T) {
	for _, in := range []string{
		`{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}}`,
		`{"input_tokens":5,"output_tokens":2,"input_tokens_details":{"cached_tokens":1,"x":[1,{"y":null}]}}`,
		`{"PROMPT_TOKENS":4,"Completion_Tokens":1}`,
		`{"\u0070rompt_tokens":7,"completion_to\u212aens":1}`, "{\"prompt_to\u212aens\":7}",
		`{"prompt_tokens":1,"prompt_tokens":null,"completion_tokens":2}`,
		`{"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens_details":{},"prompt_tokens":1}`,
		`{"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens_details":null,"prompt_tokens":1}`,
		`{"prompt_tokens":1.0}`, `{"prompt_tokens":1e3}`, `{"prompt_tokens":-4}`, `{"prompt_tokens":"4"}`, `{"prompt_tokens":"4","completion_tokens":1}`,
		`{"prompt_tokens":99999999999999999999}`, `{"prompt_tokens":true}`, `{"prompt_tokens_details":5}`,
		`{"prompt_tokens_details":{"cached_tokens":"5"}}`, `{"total_tokens":"x","prompt_tokens":2}`,
		`{"prompt_tokens":2,}`, `{"prompt_tokens":2} x`, ` {"prompt_tokens":2} `, `[1]`, `null`, ``, `{`,
		`{"prompt_tokens":2,"other":{"a":[tru]}}`,
	} {
		got, gotOK := decodeUsageFields([]byte(in))
		want, wantOK := decodeUsageReference([]byte(in))
		if gotOK != wantOK || (gotOK && got != want) {
			t.Errorf("%s: %+v %v, encoding/json %+v %v", in, got, gotOK, want, wantOK)
		}
	}
}

// FuzzDecodeUsageFields holds the usage decoder to encoding/json on any
// text.
func FuzzDecodeUsageFields(f *testing.F) {
	f.Add([]byte(`{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}}`))
	f.Add([]byte(`{"Input_Tokens":1,"input_tokens_details":null,"cached_tokens":-2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gotOK := decodeUsageFields(b)
		want, wantOK := decodeUsageReference(b)
		if gotOK != wantOK || (gotOK && got != want) {
			t.Fatalf("%q: %+v %v, encoding/json %+v %v", b, got, gotOK, want, wantOK)
		}
	})
}

// BenchmarkDecodeUsage decodes a typical usage object by hand and, for
// comparison, with encoding/json.
func BenchmarkDecodeUsage(b *testing.B) {
	in := []byte(`{"prompt_tokens":1234,"total_tokens":1240,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":1024}}`)
	for _, d := range []struct {
		name   string
		decode func([]byte) (usageFields, bool)
	}{{"hand", decodeUsageFields}, {"encoding_json", decodeUsageReference}} {
		b.Run(d.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := d.decode(in); !ok {
					b.Fatal("not decoded")
				}
			}
		})
	}
}
