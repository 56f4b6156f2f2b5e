package envoy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// read returns the contents of a file in this directory.
func read(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.FromSlash(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// mutation is one edit of a shipped file and the error it must provoke.
type mutation struct {
	name    string
	old     string // text that must occur in the file
	new     string // its replacement
	wantErr string // a substring of the resulting error
}

// apply returns src with m applied once, failing the test when m.old does
// not occur, so that a stale mutation cannot pass silently.
func (m mutation) apply(t *testing.T, src string) []byte {
	t.Helper()
	if !strings.Contains(src, m.old) {
		t.Fatalf("mutation %q: %q does not occur in the file", m.name, m.old)
	}
	return []byte(strings.Replace(src, m.old, m.new, 1))
}

// wantError fails the test unless err is non-nil and contains want.
func wantError(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error; want one containing %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("got error:\n%v\nwant one containing %q", err, want)
	}
}
