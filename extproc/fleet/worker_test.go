package fleet

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/extproc/engine/enginemetrics"
	"github.com/tollgate/tollgate/sched"
)

func TestParseWorkers(t *testing.T) {
	ws, err := ParseWorkers([]byte(`
workers:
- id: w0
  address: 10.0.0.7:8000
  max_running_requests: 32
  max_num_batched_tokens: 8192
  dp_size: 2
  dp_start_rank: 4
  taints: [gpu-h100]
  model: llama
  kv_events_endpoint: tcp://10.0.0.7:5557
  kv_events_replay_endpoint: tcp://10.0.0.7:5558
- id: w1
  address: "[fd00::1]:8000"
  metrics_url: ":9400/engine"
`), "")
	if err != nil {
		t.Fatal(err)
	}
	want := []Worker{
		{ID: "w0", Address: "10.0.0.7:8000", MaxRunningRequests: 32, MaxNumBatchedTokens: 8192, DPSize: 2, DPStartRank: 4, Taints: []string{"gpu-h100"}, Model: "llama",
			KVEventsEndpoint: "tcp://10.0.0.7:5557", KVEventsReplayEndpoint: "tcp://10.0.0.7:5558"},
		{ID: "w1", Address: "[fd00::1]:8000", MetricsURL: ":9400/engine"},
	}
	if diff := cmp.Diff(want, ws); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	set, err := NewSet(ws)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := set.Addr("w0"); !ok || a.Address != "10.0.0.7:8000" || a.Ranks != 2 {
		t.Errorf("addr w0: %+v %v", a, ok)
	}
	if a, _ := set.Addr("w1"); a.Ranks != 1 || a.Address != "[fd00::1]:8000" {
		t.Errorf("addr w1: %+v", a)
	}
	wantTargets := []enginemetrics.Target{
		{Worker: "w0", URL: "http://10.0.0.7:8000/metrics", DPStart: 4, DPSize: 2},
		{Worker: "w1", URL: "http://[fd00::1]:9400/engine"},
	}
	if diff := cmp.Diff(wantTargets, set.Targets); diff != "" {
		t.Errorf("metrics targets (-want +got):\n%s", diff)
	}
	if _, ok := set.Addr("w9"); ok {
		t.Error("unknown worker resolved")
	}
	if s := set.Sched[0]; s.ID != "w0" || s.DPSize != 2 || s.DPStart != 4 || s.MaxRunningRequests != 32 || s.MaxBatchedTokens != 8192 || s.Model != "llama" {
		t.Errorf("sched worker %+v", s)
	}
}

func TestParseWorkers_Rejects(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown key", "workers:\n- {id: w0, address: 10.0.0.1:80, gpus: 8}\n", []string{"unknown field", "gpus"}},
		{"duplicate key", "workers:\n- {id: w0, id: w1, address: 10.0.0.1:80}\n", []string{"id"}},
		{"hostname", "workers:\n- {id: gpu-a, address: gpu-a.svc:8000}\n", []string{`worker "gpu-a"`, "not a literal IP:port"}},
		{"no port", "workers:\n- {id: w0, address: 10.0.0.1}\n", []string{"not a literal IP:port"}},
		{"port zero", "workers:\n- {id: w0, address: 10.0.0.1:0}\n", []string{"port 0"}},
		{"duplicate id", "workers:\n- {id: w0, address: 10.0.0.1:80}\n- {id: w0, address: 10.0.0.2:80}\n", []string{`worker "w0": duplicate id`}},
		{"missing id and address", "workers:\n- {model: m}\n", []string{"worker 0: id is required", "address is required"}},
		{"rank overflow", "workers:\n- {id: w0, address: 10.0.0.1:80, dp_start_rank: 4294967295, dp_size: 2}\n", []string{"overflows"}},
		{"dp_size too large", "workers:\n- {id: w0, address: 10.0.0.1:80, dp_size: 16385}\n", []string{`worker "w0": dp_size 16385 exceeds 16384`}},
		{"kv events endpoint without a scheme", "workers:\n- {id: w0, address: 10.0.0.1:80, kv_events_endpoint: 10.0.0.1:5557}\n", []string{"kv_events_endpoint", "tcp://"}},
		{"replay without events", "workers:\n- {id: w0, address: 10.0.0.1:80, kv_events_replay_endpoint: tcp://10.0.0.1:5558}\n", []string{"kv_events_replay_endpoint without kv_events_endpoint"}},
		{"float", "workers:\n- {id: w0, address: 10.0.0.1:80, max_running_requests: 1.5}\n", []string{"max_running_requests"}},
		{"metrics url scheme", "workers:\n- {id: w0, address: 10.0.0.1:80, metrics_url: \"ftp://x/m\"}\n", []string{`worker "w0"`, "metrics url", "http or https"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseWorkers([]byte(tt.yaml), "")
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestValidateWorkers_ReportsEveryProblem(t *testing.T) {
	err := ValidateWorkers([]Worker{{ID: "a", Address: "host:1"}, {ID: "b", Address: "10.0.0.1:2", Taints: []string{""}}})
	if err == nil || !strings.Contains(err.Error(), `worker "a"`) || !strings.Contains(err.Error(), `worker "b": taints`) {
		t.Fatalf("%v", err)
	}
}

// TestParseWorkers_Roles: role is both, prefill or decode, both when
// omitted, and reaches the core's workers.
func TestParseWorkers_Roles(t *testing.T) {
	ws, err := ParseWorkers([]byte(`workers:
- {id: d, address: 10.0.0.1:80, role: decode}
- {id: p, address: 10.0.0.2:80, role: prefill}
- {id: b, address: 10.0.0.3:80, role: both}
- {id: o, address: 10.0.0.4:80}
- {id: n, address: 10.0.0.5:80, role: ~}
`), "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rolesOf(ws), []string{"decode", "prefill", "both", "", ""}; !slices.Equal(got, want) {
		t.Errorf("roles %q, want %q", got, want)
	}
	set, err := NewSet(ws)
	if err != nil {
		t.Fatal(err)
	}
	want := []sched.Role{sched.RoleDecode, sched.RolePrefill, sched.RoleBoth, sched.RoleBoth, sched.RoleBoth}
	for i, w := range set.Sched {
		if w.Role != want[i] {
			t.Errorf("worker %s: sched role %v, want %v", w.ID, w.Role, want[i])
		}
	}
}

func rolesOf(ws []Worker) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Role
	}
	return out
}

func TestParseRole(t *testing.T) {
	for _, tt := range []struct {
		give string
		want sched.Role
	}{{"", sched.RoleBoth}, {"both", sched.RoleBoth}, {"prefill", sched.RolePrefill}, {"decode", sched.RoleDecode}} {
		if got, err := ParseRole(tt.give); err != nil || got != tt.want {
			t.Errorf("ParseRole(%q) = %v, %v; want %v", tt.give, got, err, tt.want)
		}
	}
	for _, give := range []string{"prefill-decode", "Prefill", " decode", "role(3)"} {
		if _, err := ParseRole(give); err == nil || !strings.Contains(err.Error(), "not one of both, prefill, decode") {
			t.Errorf("ParseRole(%q): %v", give, err)
		}
	}
}

// TestNewSet_RejectsAnUnknownRole: a set from no file (discovery) is
// checked the same way.
func TestNewSet_RejectsAnUnknownRole(t *testing.T) {
	_, err := NewSet([]Worker{{ID: "w0", Address: "10.0.0.1:80", Role: "encode"}})
	if err == nil || err.Error() != `worker "w0": role "encode" is not one of both, prefill, decode` {
		t.Fatalf("error %v", err)
	}
}

// recorder collects applied worker sets.
type recorder struct {
	mu   sync.Mutex
	sets [][]Worker
}

func (r *recorder) apply(ws []Worker) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sets = append(r.sets, ws)
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sets)
}

func TestFileWatcher_ReloadKeepsOldSetOnInvalidFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "workers.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("workers:\n- {id: w0, address: 10.0.0.1:80}\n")
	var logs bytes.Buffer
	rec := &recorder{}
	w := NewFileWatcher(path, rec.apply, slog.New(slog.NewTextHandler(&logs, nil)), time.Hour)
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	write("workers:\n- {id: w0, address: worker-0:80}\n")
	if err := w.Reload(); err == nil || !strings.Contains(err.Error(), `worker "w0"`) {
		t.Fatalf("invalid file: %v", err)
	}
	if rec.count() != 1 {
		t.Fatalf("applied %d sets, want 1", rec.count())
	}
	if !strings.Contains(logs.String(), "keeping the current worker set") {
		t.Errorf("logs: %s", logs.String())
	}
}

// TestFileWatcher_PollFollowsSymlinkSwap reproduces a Kubernetes ConfigMap
// update: the file is a symlink into a data directory that is replaced. It
// runs in a synctest bubble: each poll comes at its period on the fake
// clock, and the test looks once the watcher is idle.
func TestFileWatcher_PollFollowsSymlinkSwap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		mkdata := func(name, content string) {
			t.Helper()
			if err := os.MkdirAll(filepath.Join(dir, name), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name, "workers.yaml"), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		mkdata("v1", "workers:\n- {id: w0, address: 10.0.0.1:80}\n")
		mkdata("v2", "workers:\n- {id: w0, address: 10.0.0.1:80}\n- {id: w1, address: 10.0.0.2:80}\n")
		if err := os.Symlink("v1", filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "workers.yaml")
		if err := os.Symlink(filepath.Join("..data", "workers.yaml"), path); err != nil {
			t.Fatal(err)
		}
		const period = 10 * time.Millisecond
		rec := &recorder{}
		w := NewFileWatcher(path, rec.apply, nil, period)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		poll := func(n int) int {
			time.Sleep(time.Duration(n) * period)
			synctest.Wait()
			return rec.count()
		}
		// A new content is applied once it has stayed the same for a poll.
		if got := poll(1); got != 0 {
			t.Fatalf("first poll applied %d sets, want 0", got)
		}
		if got := poll(1); got != 1 {
			t.Fatalf("second poll applied %d sets, want 1", got)
		}
		if got := poll(5); got != 1 { // unchanged content is not applied again
			t.Fatalf("unchanged file applied %d times", got)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink("v2", tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if got := poll(1); got != 1 {
			t.Fatalf("first poll after the swap: %d sets, want 1", got)
		}
		if got := poll(1); got != 2 {
			t.Fatalf("second poll after the swap: %d sets, want 2", got)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.sets[1]) != 2 {
			t.Errorf("second set %v", rec.sets[1])
		}
	})
}

func TestLoadWorkersFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.yaml")
	if err := os.WriteFile(path, []byte("workers: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ws, err := LoadWorkersFile(path); err != nil || len(ws) != 0 {
		t.Fatalf("%v %v", ws, err)
	}
	if _, err := LoadWorkersFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "workers file") {
		t.Fatalf("missing file: %v", err)
	}
	if err := os.WriteFile(path, []byte("workers:\n- {id: a, address: x}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadWorkersFile(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("bad file: %v", err)
	}
}
