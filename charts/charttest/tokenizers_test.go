package charttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const tokenizerValues = `
tokenizers:
  default: {spec: "tiktoken:cl100k_base"}
  models:
  - model: Qwen/Qwen3-8B
    volume: {persistentVolumeClaim: {claimName: models}}
    subPath: Qwen3-8B
  - model: tiny
    configMap: tiny-tokenizer
  - model: gpt-4o
    spec: tiktoken:o200k_base
`

// TestTokenizers: values.tokenizers becomes --tokenizer and repeated
// --model-tokenizer arguments, with model directories mounted read-only
// from their ConfigMap or volume.
func TestTokenizers(t *testing.T) {
	d, c := mustRender(t, values(t, tokenizerValues)).deployment(t)
	if v, _ := flag(c.Args, "tokenizer"); v != "tiktoken:cl100k_base" {
		t.Errorf("--tokenizer=%q", v)
	}
	var mapped []string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--model-tokenizer="); ok {
			mapped = append(mapped, v)
		}
	}
	want := []string{"Qwen/Qwen3-8B=hf:/etc/tollgate/tokenizers/0/Qwen3-8B", "tiny=hf:/etc/tollgate/tokenizers/1", "gpt-4o=tiktoken:o200k_base"}
	if !slices.Equal(mapped, want) {
		t.Errorf("--model-tokenizer values %q, want %q", mapped, want)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	if m := mounts["tokenizer-0"]; m.MountPath != "/etc/tollgate/tokenizers/0" || !m.ReadOnly {
		t.Errorf("tokenizer-0 mount %+v", m)
	}
	if m := mounts["tokenizer-1"]; m.MountPath != "/etc/tollgate/tokenizers/1" || !m.ReadOnly {
		t.Errorf("tokenizer-1 mount %+v", m)
	}
	if _, ok := mounts["tokenizer-2"]; ok {
		t.Error("a spec entry got a mount")
	}
	vols := map[string]corev1.Volume{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	if v := vols["tokenizer-0"]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "models" {
		t.Errorf("tokenizer-0 volume %+v", v)
	}
	if v := vols["tokenizer-1"]; v.ConfigMap == nil || v.ConfigMap.Name != "tiny-tokenizer" {
		t.Errorf("tokenizer-1 volume %+v", v)
	}
	// The default: the estimator, no mounts.
	_, c = mustRender(t, values(t, "")).deployment(t)
	if v, _ := flag(c.Args, "tokenizer"); v != "estimate" {
		t.Errorf("default --tokenizer=%q", v)
	}
	if _, ok := flag(c.Args, "model-tokenizer"); ok {
		t.Error("default values map a model")
	}
}

func TestTokenizersRejectBadValues(t *testing.T) {
	for name, tc := range map[string]struct{ doc, want string }{
		"two sources":     {"tokenizers: {models: [{model: m, spec: estimate, configMap: x}]}\n", "tokenizers.models[0] (m): set exactly one of spec, configMap and volume"},
		"no source":       {"tokenizers: {models: [{model: m}]}\n", "tokenizers.models[0] (m): set exactly one"},
		"subPath on spec": {"tokenizers: {models: [{model: m, spec: estimate, subPath: x}]}\n", "subPath needs configMap or volume"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := renderChart(t, values(t, tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v; want one containing %q", err, tc.want)
			}
		})
	}
	for _, doc := range []string{"tokenizers: {models: [{spec: estimate}]}\n", "tokenizers: {default: {spec: bogus}}\n", "tokenizers: {extra: 1}\n"} {
		if _, err := renderChart(t, values(t, doc)); err == nil {
			t.Errorf("schema accepted %q", doc)
		}
	}
}

// TestTokenizersPassCheckConfig runs the real check-config on the rendered
// tokenizer arguments, with the mounted model directory laid out locally.
func TestTokenizersPassCheckConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tollgate binary")
	}
	bin := tollgateBinary(t)
	root := t.TempDir()
	model := filepath.Join(root, "0") // the first models entry
	if err := os.MkdirAll(model, 0o755); err != nil {
		t.Fatal(err)
	}
	tj, err := os.ReadFile("../../extproc/request/tokenize/testdata/llama3-style.json")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"tokenizer.json": string(tj), "tokenizer_config.json": `{"bos_token":"<|begin_of_text|>"}`, "chat_template.jinja": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(model, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	doc := "tokenizers:\n  models:\n  - {model: tiny, configMap: tiny-tokenizer}\n  - {model: gpt-4o, spec: \"tiktoken:o200k_base\"}\n"
	run := func(doc string) (string, error) {
		_, c := mustRender(t, values(t, doc)).deployment(t)
		var args []string
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--tokenizer=") || strings.HasPrefix(a, "--model-tokenizer=") {
				args = append(args, strings.ReplaceAll(a, "/etc/tollgate/tokenizers", root))
			}
		}
		out, err := exec.CommandContext(t.Context(), bin, append([]string{"check-config"}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := run(doc); err != nil || !strings.Contains(out, "configuration ok") {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(model, "chat_template.jinja"), []byte("{% if %}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(doc); err == nil || !strings.Contains(out, "--model-tokenizer tiny: hf model directory") || !strings.Contains(out, "chat template") {
		t.Errorf("a broken template passed check-config (err %v):\n%s", err, out)
	}
}
