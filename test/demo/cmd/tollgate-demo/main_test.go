package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func runArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(t.Context(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRun_Help(t *testing.T) {
	code, _, errs := runArgs(t, "--help")
	if code != 0 {
		t.Fatalf("--help: code %d", code)
	}
	for _, flag := range []string{"-serve", "-scenario", "-speed", "-seed", "-out", "-examples"} {
		if !strings.Contains(errs, flag) {
			t.Errorf("--help lacks %s:\n%s", flag, errs)
		}
	}
}

func TestRun_UsageErrors(t *testing.T) {
	for _, args := range [][]string{{"--no-such-flag"}, {"--speed", "fast"}, {"serve"}} {
		if code, _, errs := runArgs(t, args...); code != 2 || errs == "" {
			t.Errorf("%q: code %d, stderr %q; want 2 and a message", args, code, errs)
		}
	}
}

// TestRun_BadOptionsFailBeforeStarting checks that invalid values are
// reported with exit code 1 before anything is started or written.
func TestRun_BadOptionsFailBeforeStarting(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "fast"}, `unknown scenario "fast"`},
		{[]string{"--speed", "50"}, "speed 50 is above 20"},
		{[]string{"--examples", t.TempDir()}, "equal_share.yaml"},
		{[]string{"--serve", "127.0.0.1:0", "--examples", t.TempDir()}, "equal_share.yaml"},
	} {
		code, _, errs := runArgs(t, append([]string{"--out", out}, tt.args...)...)
		if code != 1 || !strings.Contains(errs, "tollgate-demo: ") || !strings.Contains(errs, tt.want) {
			t.Errorf("%q: code %d, stderr %q; want 1 and %q", tt.args, code, errs, tt.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a rejected run created %s", out)
	}
}

// upWriter collects output and calls up once the demo stack says it is up.
type upWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	up   func()
	seen bool
}

func (w *upWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if !w.seen && strings.Contains(w.buf.String(), "press Ctrl-C to stop it") {
		w.seen = true
		w.up()
	}
	return n, err
}

func (w *upWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestRun_ServeWithBuiltinExamples brings the --serve stack up from the
// flags, with the example files built into the program, then stops it.
func TestRun_ServeWithBuiltinExamples(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &upWriter{up: cancel}
	var errb bytes.Buffer
	t.Chdir(t.TempDir()) // no examples/ directory to find on disk
	code := run(ctx, []string{"--serve", "127.0.0.1:0", "--speed", "10"}, out, &errb)
	if code != 0 {
		t.Fatalf("code %d, stderr %s", code, errb.String())
	}
	for _, want := range []string{"--router-policy-config examples/premium_4x.yaml", "--priority-scheduler-config examples/priority.yaml", "stopping the demo stack"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
