package tokenize

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// llama3Dir writes a model directory around the llama3-style fixture with
// the given tokenizer_config.json and optional chat_template.jinja.
func llama3Dir(t *testing.T, config, jinjaFile string) string {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile("testdata/llama3-style.json")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"tokenizer.json": string(data), "tokenizer_config.json": config}
	if jinjaFile != "" {
		files["chat_template.jinja"] = jinjaFile
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// renderChat renders a conversation with the directory's template.
func renderChat(t *testing.T, m *HFModel, messages, tools string) string {
	t.Helper()
	tmpl := m.chat
	if m.toolChat != nil && tools != "" {
		tmpl = m.toolChat
	}
	var toolsRaw []byte
	if tools != "" {
		toolsRaw = []byte(tools)
	}
	out, err := tmpl.Render([]byte(messages), toolsRaw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

const simpleTemplate = `{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}`

func TestHFDirTemplateForms(t *testing.T) {
	user := `[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, config, jinjaFile, tools, want string
	}{
		{"string", `{"bos_token":"<|begin_of_text|>","eos_token":{"content":"<|eot_id|>","lstrip":false},"chat_template":` + quote(simpleTemplate) + `}`, "", "",
			"<|begin_of_text|><user>hi<|eot_id|><assistant>"},
		{"named list", `{"chat_template":[{"name":"default","template":"D{{ messages[0].content }}"},{"name":"tool_use","template":"T{{ tools[0].name }}"}]}`, "", "",
			"Dhi"},
		{"named list with tools", `{"chat_template":[{"name":"default","template":"D{{ messages[0].content }}"},{"name":"tool_use","template":"T{{ tools[0].name }}"}]}`, "", `[{"name":"f"}]`,
			"Tf"},
		{"jinja file wins", `{"chat_template":"config"}`, "file{{ messages|length }}", "", "file1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := LoadHFDir(llama3Dir(t, c.config, c.jinjaFile))
			if err != nil {
				t.Fatal(err)
			}
			if got := renderChat(t, m, user, c.tools); got != c.want {
				t.Errorf("rendered %q, want %q", got, c.want)
			}
		})
	}
}

func quote(s string) string {
	b := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
	return `"` + b + `"`
}

// TestHFDirChatEncoding: chat encodes the rendered template without the
// post-processor's BOS (the template wrote it), completions with it.
func TestHFDirChatEncoding(t *testing.T) {
	dir := llama3Dir(t, `{"bos_token":"<|begin_of_text|>","eos_token":"<|eot_id|>","chat_template":`+quote(simpleTemplate)+`}`, "")
	tok, err := New("hf:" + dir)
	if err != nil {
		t.Fatal(err)
	}
	const bos, eot = 556, 558
	ids, n, err := EncodePrompt(tok, Prompt{Model: "m", Text: "ignored", Messages: []byte(`[{"role":"user","content":"hi"}]`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(ids) || ids[0] != bos || ids[1] == bos || !containsID(ids, eot) {
		t.Errorf("chat ids %v: want one leading BOS from the template and an EOT", ids)
	}
	body, _ := tok.Encode("m", "<user>hi<|eot_id|><assistant>", nil)
	if !reflect.DeepEqual(ids, body) {
		t.Errorf("chat ids %v, want the completion encoding of the rendered text %v", ids, body)
	}
	comp, _, _ := EncodePrompt(tok, Prompt{Model: "m", Text: "hi"}, nil)
	if comp[0] != bos {
		t.Errorf("completion ids %v lack the post-processor's BOS", comp)
	}
}

func containsID(ids []uint32, id uint32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func TestHFDirLoadErrors(t *testing.T) {
	cases := map[string]struct{ config, want string }{
		"syntax":          {`{"chat_template":"{% for m in messages %}"}`, "chat template"},
		"cannot render":   {`{"chat_template":"{{ raise_exception('no') }}"}`, "cannot render a plain conversation: chat template: no"},
		"bad list":        {`{"chat_template":[{"name":"other","template":"x"}]}`, `no "default" or "tool_use"`},
		"bad type":        {`{"chat_template":5}`, "neither a string nor a list"},
		"missing bos":     {`{"tokenizer_class":"LlamaTokenizerFast","add_bos_token":true}`, "asks to add the bos_token but defines none"},
		"bad config json": {`{`, "parse tokenizer_config.json"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := LoadHFDir(llama3Dir(t, c.config, ""))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	if _, err := LoadHFDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("empty directory: %v", err)
	}
}

// TestHFDirAddBOS: Llama and Gemma tokenizer classes rebuild the
// post-processor from add_bos_token/add_eos_token, as transformers does.
func TestHFDirAddBOS(t *testing.T) {
	cases := []struct {
		config           string
		wantPre, wantSuf []uint32
	}{
		{`{"tokenizer_class":"LlamaTokenizerFast","add_bos_token":false,"bos_token":"<|begin_of_text|>"}`, nil, nil},
		{`{"tokenizer_class":"LlamaTokenizerFast","add_bos_token":true,"add_eos_token":true,"bos_token":"<|begin_of_text|>","eos_token":"<|eot_id|>"}`, []uint32{556}, []uint32{558}},
		{`{"tokenizer_class":"PreTrainedTokenizerFast","add_bos_token":false}`, []uint32{556}, nil}, // the post-processor's
	}
	for _, c := range cases {
		m, err := LoadHFDir(llama3Dir(t, c.config, ""))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m.prefix, c.wantPre) || !reflect.DeepEqual(m.suffix, c.wantSuf) {
			t.Errorf("%s: prefix %v suffix %v, want %v %v", c.config, m.prefix, m.suffix, c.wantPre, c.wantSuf)
		}
	}
}

// TestChatTemplateInput pins how a request becomes template input: the
// vLLM message rules, member order kept for tojson, Python's strip
// semantics, and the engine variables.
func TestChatTemplateInput(t *testing.T) {
	render := func(src, messages, tools string) string {
		t.Helper()
		c, err := NewChatTemplate(src, map[string]string{"bos_token": "<s>"})
		if err != nil {
			t.Fatal(err)
		}
		var toolsRaw []byte
		if tools != "" {
			toolsRaw = []byte(tools)
		}
		out, err := c.Render([]byte(messages), toolsRaw)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	parts := `[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]}]`
	if got := render(`{{ messages[0].content }}`, parts, ""); got != "a\nb" {
		t.Errorf("string content format: %q", got)
	}
	if got := render(`{% for m in messages %}{% for p in m['content'] %}[{{ p.text }}]{% endfor %}{% endfor %}`, parts, ""); got != "[a][b]" {
		t.Errorf("parts content format: %q", got)
	}
	if got := render(`{% for m in messages %}{% for p in m.content %}[{{ p.text }}]{% endfor %}{% endfor %}`, `[{"role":"user","content":"s"}]`, ""); got != "[s]" {
		t.Errorf("string content in parts format: %q", got)
	}
	call := `[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"z\": 1, \"a\": \"ü\"}"}}]},{"role":"tool","tool_call_id":"1","content":"r","extra":"dropped"}]`
	got := render(`{% for m in messages %}{{ m.role }}|{{ m.content }}|{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson }}{% endif %}{{ m.tool_call_id }}{{ m.extra }};{% endfor %}`, call, "")
	if want := `user|q|;assistant||{"z": 1, "a": "ü"};tool|r|1;`; got != want {
		t.Errorf("tool calls: %q, want %q", got, want)
	}
	if got := render(`{{ tools | tojson }}`, `[{"role":"user","content":"q"}]`, `[{"type":"function","function":{"name":"f","b":2,"a":1.5}}]`); got != `[{"type": "function", "function": {"name": "f", "b": 2, "a": 1.5}}]` {
		t.Errorf("tools member order: %q", got)
	}
	if got := render(`{% if tools %}T{% else %}none{% endif %}{{ add_generation_prompt }}{{ bos_token }}`, `[{"role":"user","content":"q"}]`, ""); got != "noneTrue<s>" {
		t.Errorf("variables: %q", got)
	}
	if got := render(`[{{ messages[0].content.lstrip('\n') }}][{{ messages[0].content.strip('\n') }}]`, `[{"role":"user","content":"\n  x \n"}]`, ""); got != "[  x \n][  x ]" {
		t.Errorf("strip with an argument strips only those characters, as in Python: %q", got)
	}
	year := time.Now().Format("2006")
	if got := render(`{{ strftime_now('%Y') }}`, `[{"role":"user","content":"q"}]`, ""); got != year {
		t.Errorf("strftime_now: %q", got)
	}
	c, err := NewChatTemplate(`{% if messages|length > 3 %}{{ raise_exception('too long') }}{% endif %}ok`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Render([]byte(`[{"role":"user","content":"1"},{"role":"user","content":"2"},{"role":"user","content":"3"},{"role":"user","content":"4"}]`), nil); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("raise_exception: %v", err)
	}
}

// TestChatTemplateNoSystem: a template that refuses system messages loads
// (the second probe has none).
func TestChatTemplateNoSystem(t *testing.T) {
	if _, err := NewChatTemplate(`{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}ok`, nil); err != nil {
		t.Fatal(err)
	}
}

func TestMapping(t *testing.T) {
	dir := llama3Dir(t, `{"chat_template":"C{{ messages[0].content }}"}`, "")
	tok, err := NewFromSpecs("estimate", []string{"a=hf:" + dir, " b = tiktoken:cl100k_base "})
	if err != nil {
		t.Fatal(err)
	}
	m := tok.(*Mapping)
	if Kind(m, "a") != "hf" || Kind(m, "b") != "tiktoken" || Kind(m, "other") != "estimate" {
		t.Errorf("kinds: %s %s %s", Kind(m, "a"), Kind(m, "b"), Kind(m, "other"))
	}
	if !ExactFor(m, "a") || !ExactFor(m, "b") || ExactFor(m, "other") || m.Exact() {
		t.Error("exactness per model")
	}
	if !m.HasChatTemplateFor("a") || m.HasChatTemplateFor("b") || m.HasChatTemplateFor("other") {
		t.Error("chat templates per model")
	}
	ids, _, err := EncodePrompt(m, Prompt{Model: "other", Text: "user: hi\n", Messages: []byte(`[]`)}, nil)
	if err != nil || ids != nil {
		t.Errorf("estimated model: ids %v err %v", ids, err)
	}
	if want := "estimate a=hf:" + dir + " b=tiktoken:cl100k_base"; m.Name() != want {
		t.Errorf("name %q, want %q", m.Name(), want)
	}
	_, err = NewFromSpecs("bogus", []string{"a", "b=x", "c=estimate", "c=estimate"})
	for _, want := range []string{"--tokenizer: unknown tokenizer", `--model-tokenizer "a": want MODEL=SPEC`, `--model-tokenizer b: unknown tokenizer "x"`, `model "c" is mapped twice`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to contain %q", err, want)
		}
	}
	if def, err := NewFromSpecs("estimate", nil); err != nil || def.Name() != "estimate" {
		t.Errorf("no mapping: %v %v", def, err)
	}
}
