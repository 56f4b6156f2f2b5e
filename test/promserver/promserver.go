// Package promserver runs a real Prometheus server on loopback for tests:
// it scrapes the given targets, loads rule files, and is queried through
// its HTTP API.
package promserver

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/test/loopback"
	"github.com/tollgate/tollgate/test/testbin"
)

// Install says how to get the Prometheus binaries.
const Install = "install the Debian package prometheus (make deps)"

// Config is what the server scrapes and evaluates.
type Config struct {
	// Targets are host:port addresses scraped at /metrics under Job.
	Targets []string
	// Job is the job label of the targets. Empty means "tollgate".
	Job string
	// Interval is the scrape and rule evaluation interval. Zero means 1s.
	Interval time.Duration
	// RuleFiles are loaded as rule_files.
	RuleFiles []string
}

// Server is a running Prometheus.
type Server struct {
	URL string
	API promv1.API
}

// Promtool returns the path of promtool, or fails or skips t (testbin).
func Promtool(t testing.TB) string {
	t.Helper()
	return testbin.Lookup(t, "promtool", Install)
}

// Start runs Prometheus until t ends. It fails t when the server does not
// become ready in 30 s.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	bin := testbin.Lookup(t, "prometheus", Install)
	if cfg.Job == "" {
		cfg.Job = "tollgate"
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	dir := t.TempDir()
	conf := map[string]any{
		"global": map[string]any{"scrape_interval": cfg.Interval.String(), "evaluation_interval": cfg.Interval.String()},
		"scrape_configs": []any{map[string]any{
			"job_name":       cfg.Job,
			"static_configs": []any{map[string]any{"targets": cfg.Targets}},
		}},
	}
	if len(cfg.RuleFiles) > 0 {
		var abs []string
		for _, f := range cfg.RuleFiles {
			a, err := filepath.Abs(f)
			if err != nil {
				t.Fatal(err)
			}
			abs = append(abs, a)
		}
		conf["rule_files"] = abs
	}
	b, err := yaml.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	addr, err := loopback.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin,
		"--config.file="+confPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	cmd.Stdout = t.Output()
	cmd.Stderr = t.Output()
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan struct{}) // closed when the process has exited
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cancel()
			<-exited
		}
		cancel()
	})
	url := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("prometheus exited before it was ready: %v", waitErr)
		default:
		}
		resp, err := http.Get(url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus on %s not ready after 30s (last error %v)", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c, err := promapi.NewClient(promapi.Config{Address: url})
	if err != nil {
		t.Fatal(err)
	}
	return &Server{URL: url, API: promv1.NewAPI(c)}
}

// CheckMetrics runs promtool check metrics on an exposition in the text
// format and returns its complaints, one per line; none means clean.
func CheckMetrics(t testing.TB, exposition []byte) []string {
	t.Helper()
	cmd := exec.Command(Promtool(t), "check", "metrics")
	cmd.Stdin = strings.NewReader(string(exposition))
	out, err := cmd.CombinedOutput()
	var problems []string
	for l := range strings.Lines(string(out)) {
		if l = strings.TrimSpace(l); l != "" {
			problems = append(problems, l)
		}
	}
	if err != nil && len(problems) == 0 {
		problems = append(problems, fmt.Sprintf("promtool check metrics: %v", err))
	}
	return problems
}
