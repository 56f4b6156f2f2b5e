// Package testbin finds the programs outside Go that some tests run
// (Prometheus, promtool, kube-apiserver, etcd). A missing program fails
// the test when CI=true, so CI never passes by skipping; elsewhere the test
// is skipped with a message naming what to install.
package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// InCI reports whether the tests run under CI (CI=true), where every
// outside part is required.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing fails t under CI and skips it elsewhere, naming what is missing
// and how to get it.
func Missing(t testing.TB, what, install string) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s is required under CI=true and is missing: %s", what, install)
	}
	t.Skipf("%s is missing (%s)", what, install)
}

// Lookup returns the path of the program name on PATH, or calls Missing.
// Debian packages come from hack/debian-packages.txt through hack/deps.sh
// (make deps).
func Lookup(t testing.TB, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, name, install)
	}
	return p
}

// File returns path when it is an executable file, or calls Missing.
func File(t testing.TB, path, install string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(abs); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		Missing(t, abs, install)
	}
	return abs
}
