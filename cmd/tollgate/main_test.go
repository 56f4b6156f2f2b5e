package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tollgate/tollgate/sched"
)

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		main() // a replica of the failover tests
	}
	goleak.VerifyTestMain(m)
}

var update = flag.Bool("update", false, "rewrite the flag reference in docs/flags.md from --help")

func runArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(t.Context(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRun_Help(t *testing.T) {
	code, out, _ := runArgs(t, "help")
	if code != 0 || !strings.Contains(out, "check-config") {
		t.Fatalf("help: code %d, output %q", code, out)
	}
}

func TestRun_UnknownCommand(t *testing.T) {
	code, _, errs := runArgs(t, "frobnicate")
	if code != 2 || !strings.Contains(errs, `unknown command "frobnicate"`) {
		t.Fatalf("code %d, stderr %q", code, errs)
	}
}

func TestRun_BadFlagIsUsageError(t *testing.T) {
	code, _, errs := runArgs(t, "check-config", "--no-such-flag")
	if code != 2 || !strings.Contains(errs, "no-such-flag") {
		t.Fatalf("code %d, stderr %q", code, errs)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const twoWorkers = `workers:
  - id: w1
    address: 127.0.0.1:18001
    max_running_requests: 128
  - id: w2
    address: 127.0.0.1:18002
    max_running_requests: 128
`

func TestCheckConfig_ExamplesAreValid(t *testing.T) {
	workers := writeFile(t, "workers.yaml", twoWorkers)
	for _, args := range [][]string{
		{"--workers", workers},
		{"--workers", workers, "--router-policy-config", "../../examples/policy-class-queues.yaml"},
		{"--workers", workers, "--router-policy-config", "../../examples/premium_4x.yaml"},
		{"--workers", workers, "--priority-scheduler-enabled", "--priority-scheduler-config", "../../examples/priority.yaml"},
		{"--workers", workers, "--router-policy-config", "../../examples/policy-class-queues-slo.yaml"},
		{"--workers", workers, "--router-policy-config", "../../examples/slo_rejection.yaml"},
		{"--workers", workers, "--router-policy-config", "../../examples/policy-class-queues-v1.7.yaml"},
		{"--workers", workers, "--tenant-rate-limit-enabled", "--tenant-rate-limit-config", "../../examples/tenant-rate-limits.yaml"},
	} {
		code, out, errs := runArgs(t, append([]string{"check-config"}, args...)...)
		if code != 0 || !strings.Contains(out, "configuration ok") {
			t.Errorf("check-config %v: code %d\nstdout %s\nstderr %s", args, code, out, errs)
		}
	}
}

// check-config says which generation of Dynamo's policy file it read.
func TestCheckConfig_NamesThePolicyGeneration(t *testing.T) {
	for file, want := range map[string]string{
		"policy-class-queues.yaml":     "policy-class-queues.yaml: family/bucket classes (default_policy_family)",
		"policy-class-queues-slo.yaml": "policy-class-queues-slo.yaml: flat SLO classes (default_policy_class)",
	} {
		_, out, _ := runArgs(t, "check-config", "--router-policy-config", "../../examples/"+file)
		if !strings.Contains(out, want) {
			t.Errorf("%s: output lacks %q:\n%s", file, want, out)
		}
	}
}

// check-config names the line of a problem in the tenant rate-limit file,
// and a header: tenant that cannot match without a trusted header.
func TestCheckConfig_TenantRateLimitFile(t *testing.T) {
	bad := writeFile(t, "limits.yaml", "default_policy:\n  tokens_per_minute: 0\n  requests_per_minute: 10\n")
	_, out, _ := runArgs(t, "check-config", "--tenant-rate-limit-enabled", "--tenant-rate-limit-config", bad)
	if !strings.Contains(out, ":2:") || !strings.Contains(out, "tokens_per_minute must be > 0") {
		t.Errorf("output lacks the line of the problem:\n%s", out)
	}
	header := writeFile(t, "header.yaml", "default_policy: {tokens_per_minute: 10, requests_per_minute: 10}\ntenants:\n  - {tenant_key: \"header:acme\", tokens_per_minute: 5, requests_per_minute: 5}\n")
	_, out, _ = runArgs(t, "check-config", "--tenant-rate-limit-enabled", "--tenant-rate-limit-config", header)
	if !strings.Contains(out, "needs --trust-tenant-header") {
		t.Errorf("output lacks the trust problem:\n%s", out)
	}
}

func TestCheckConfig_ReportsEveryProblem(t *testing.T) {
	badPolicy := writeFile(t, "policy.yaml", "default_policy_family: x\nuncached_isl_buckets: []\npolicy_classes: []\n")
	badWorkers := writeFile(t, "workers.yaml", "workers:\n  - id: w1\n    address: worker.local:8000\n")
	code, out, _ := runArgs(t, "check-config",
		"--router-policy-config", badPolicy,
		"--workers", badWorkers,
		"--tokenizer", "bogus",
		"--log-level", "loud",
		"--priority-scheduler-default-max-class", "urgent",
	)
	if code != 1 {
		t.Fatalf("code %d, want 1; output:\n%s", code, out)
	}
	for _, want := range []string{
		"invalid router policy config: root policy_classes must not be empty",
		"worker.local:8000",
		`unknown tokenizer "bogus"`,
		`unknown level "loud"`,
		`"urgent"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "problem: "); n != 5 {
		t.Errorf("%d problems printed, want 5:\n%s", n, out)
	}
}

func TestCheckConfig_ReservationsExceedCapacity(t *testing.T) {
	workers := writeFile(t, "workers.yaml", "workers:\n  - id: w1\n    address: 127.0.0.1:18001\n    max_running_requests: 100\n")
	code, out, _ := runArgs(t, "check-config", "--workers", workers, "--priority-scheduler-enabled")
	if code != 1 || !strings.Contains(out, "sum of class reservations (142) exceeds capacity (100)") {
		t.Fatalf("code %d, output %q", code, out)
	}
	// The upstream text is followed by the classes, the files and the fix.
	for _, want := range []string{
		"system 32 (reserved_floor) + interactive 100 (reserved_floor 128, at most the capacity) + default 10 (reserved_per_slot 0.1 × 100)",
		"from the built-in class defaults (no --priority-scheduler-config)",
		"against 100 slots from " + workers + " (w1: 100)",
		"the classes need at least 178 slots: raise the workers' max_running_requests",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestCheckConfig_KVEndpointNeedsKVEvents: a worker's kv_events_endpoint
// would be ignored without --kv-events, so check-config refuses it and
// says what to add; with the flag the same file is valid.
func TestCheckConfig_KVEndpointNeedsKVEvents(t *testing.T) {
	workers := writeFile(t, "workers.yaml", "workers:\n  - id: w1\n    address: 127.0.0.1:18001\n    kv_events_endpoint: tcp://127.0.0.1:5557\n")
	code, out, _ := runArgs(t, "check-config", "--workers", workers)
	if code != 1 || !strings.Contains(out, `worker "w1" names kv_events_endpoint, but KV events are off: add --kv-events`) {
		t.Fatalf("code %d, output %q", code, out)
	}
	if code, out, errs := runArgs(t, "check-config", "--workers", workers, "--kv-events"); code != 0 {
		t.Fatalf("with --kv-events: code %d\nstdout %s\nstderr %s", code, out, errs)
	}
}

// TestServe_ReadyThenDrains starts the real server on loopback, checks
// /readyz and /metrics, then cancels the context and expects a clean stop.
func TestServe_ReadyThenDrains(t *testing.T) {
	workers := writeFile(t, "workers.yaml", twoWorkers)
	sv := startServe(t, "--workers", workers, "--drain-delay", "0", "--shutdown-timeout", "2s")
	for _, c := range []struct{ path, want string }{
		{"/readyz", "ready"}, {"/healthz", "ok"},
		{"/metrics", "smg_scheduler_utilization"}, {"/metrics", "go_goroutines"}, {"/metrics", "process_resident_memory_bytes"},
		{"/metrics", "tollgate_build_info{"},
	} {
		body := httpGet(t, "http://"+sv.metrics+c.path)
		if !strings.Contains(body, c.want) {
			t.Errorf("%s lacks %q", c.path, c.want)
		}
	}
	sv.stop()
	select {
	case err := <-sv.done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// served is a serve started by startServe.
type served struct {
	// metrics is the metrics listener's address.
	metrics string
	// stop ends serve's context; done then receives what it returned.
	stop context.CancelFunc
	done chan error
}

// startServe runs serve in process with args on loopback ports until it
// listens.
func startServe(t *testing.T, args ...string) *served {
	t.Helper()
	o := options{}
	fs := newFlagSet("serve", &o)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(append([]string{"--grpc-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"}, args...)); err != nil {
		t.Fatal(err)
	}
	log := discardLogger()
	st, err := o.build(log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	addrs := make(chan string, 1)
	sv := &served{stop: cancel, done: make(chan error, 1)}
	go func() { sv.done <- serve(ctx, &o, st, log, func(_, metrics string) { addrs <- metrics }, nil) }()
	select {
	case sv.metrics = <-addrs:
	case err := <-sv.done:
		t.Fatalf("serve returned early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not come up")
	}
	return sv
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDocs_FlagReference keeps the flag reference in docs/flags.md equal
// to `tollgate serve --help`. Run with -update to rewrite it.
func TestDocs_FlagReference(t *testing.T) {
	const doc = "../../docs/flags.md"
	const begin, end = "<!-- flags:begin -->\n", "<!-- flags:end -->"
	code, help, errs := runArgs(t, "serve", "--help")
	if code != 0 || errs != "" {
		t.Fatalf("serve --help: code %d, stderr %q", code, errs)
	}
	want := begin + "```text\n" + help + "```\n" + end
	text, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(text, []byte(begin)), bytes.Index(text, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("docs/flags.md lacks the %q ... %q markers", begin, end)
	}
	got := string(text[i : j+len(end)])
	if got == want {
		return
	}
	if *update {
		out := append(append(append([]byte{}, text[:i]...), want...), text[j+len(end):]...)
		if err := os.WriteFile(doc, out, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/flags.md's flag reference is stale; run: go test ./cmd/tollgate -run TestDocs_FlagReference -update")
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestSchedConfig_DecodeOnlyCost checks that --router-prefill-load-scale 0
// with --router-kv-overlap-score-credit 0 reaches the scheduler as given
// (a decode-only cost), not as its defaults.
func TestSchedConfig_DecodeOnlyCost(t *testing.T) {
	var o options
	fs := newFlagSet("serve", &o)
	if err := fs.Parse([]string{"--router-prefill-load-scale", "0", "--router-kv-overlap-score-credit", "0"}); err != nil {
		t.Fatal(err)
	}
	sc, err := o.schedConfig()
	if err != nil {
		t.Fatal(err)
	}
	if want := (sched.SelectionConfig{}); sc.Selection == nil || *sc.Selection != want {
		t.Fatalf("selection %+v: want %+v", sc.Selection, want)
	}
}
