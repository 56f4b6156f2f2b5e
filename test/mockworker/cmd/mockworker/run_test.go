package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRun_ServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--model", "m", "--speed", "100", "--log-level", "debug"}, pw)
		_ = pw.Close()
	}()

	// The first log line names the bound address.
	lines := bufio.NewScanner(pr)
	if !lines.Scan() {
		t.Fatalf("no log line: %v", lines.Err())
	}
	m := regexp.MustCompile(`msg=listening .*addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(lines.Text())
	if m == nil {
		t.Fatalf("first log line %q does not name the address", lines.Text())
	}
	logs := make(chan string, 1)
	go func() {
		var b strings.Builder
		for lines.Scan() {
			b.WriteString(lines.Text() + "\n")
		}
		logs <- b.String()
	}()

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+m[1]+"/v1/completions",
		strings.NewReader(`{"model":"m","prompt":"hello","max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("completion status %d, want 200", resp.StatusCode)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("run = %v, want nil after cancel", err)
	}
	out := <-logs
	for _, want := range []string{"msg=\"request ended\"", "outcome=finished", "msg=\"shutting down\""} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
}

func TestRun_RejectsBadArguments(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "unknown flag", args: []string{"--nope"}, want: "flag provided but not defined: -nope"},
		{name: "bad number", args: []string{"--speed", "fast"}, want: `invalid value "fast" for flag -speed`},
		{name: "negative value", args: []string{"--max-num-seqs", "-1"}, want: "max num seqs must not be negative, got -1"},
		{name: "unknown role", args: []string{"--role", "encode"}, want: `role must be both, prefill or decode, got "encode"`},
		{name: "bad log level", args: []string{"--log-level", "loud"}, want: `invalid value "loud" for flag -log-level`},
		{name: "batch budget below max num seqs", args: []string{"--batch", "--max-num-batched-tokens", "4", "--max-num-seqs", "8"},
			want: "max num batched tokens 4 is less than max num seqs 8"},
		{name: "step flag without batch", args: []string{"--step-overhead", "5ms"}, want: "need --batch"},
		{name: "positional argument", args: []string{"extra"}, want: `unexpected arguments ["extra"]`},
		{name: "unusable address", args: []string{"--addr", "127.0.0.1:-1"}, want: "mockworker: listen tcp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr strings.Builder
			err := run(t.Context(), tt.args, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run(%q) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

func TestRun_HelpIsNotAFailure(t *testing.T) {
	var stderr strings.Builder
	if err := run(t.Context(), []string{"-h"}, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run(-h) = %v, want flag.ErrHelp", err)
	}
	for _, f := range []string{"-addr", "-id", "-model", "-max-num-seqs", "-prefill-tokens-per-sec", "-decode-tokens-per-sec",
		"-block-size", "-cache-blocks", "-speed", "-default-max-tokens", "-max-model-len", "-max-records", "-max-body-bytes", "-log-level",
		"-role", "-prefill-timeout", "-batch", "-max-num-batched-tokens", "-step-overhead", "-step-tokens-per-sec"} {
		if !strings.Contains(stderr.String(), f) {
			t.Errorf("usage lacks %s:\n%s", f, stderr.String())
		}
	}
}
