package extproc

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tollgate/tollgate/extproc/fleet"
)

func TestParseWorkers_EmptyAndMultiDocument(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       string // "" means accepted
	}{
		{"explicit empty list", "workers: []\n", ""},
		{"explicit empty list, flow style", "{workers: []}", ""},
		{"empty file", "", "empty or null"},
		{"whitespace", "  \n\n", "empty or null"},
		{"comments only", "# nothing yet\n", "empty or null"},
		{"null document", "null\n", "empty or null"},
		{"tilde document", "~\n", "empty or null"},
		{"workers with nothing after it", "workers:\n", "workers is null"},
		{"workers null", "workers: null\n", "workers is null"},
		{"no workers key", "{}\n", "no workers key"},
		{"two documents", "workers: []\n---\nworkers:\n- {id: w0, address: 10.0.0.1:80}\n", "more than one YAML document"},
		{"empty second document", "workers:\n- {id: w0, address: 10.0.0.1:80}\n---\n", "more than one YAML document"},
		{"explicit zero slots", "workers:\n- {id: w0, address: 10.0.0.1:80, max_running_requests: 0}\n", `worker "w0": max_running_requests: 0 is not a valid value`},
		{"explicit zero dp_size", "workers:\n- {id: w0, address: 10.0.0.1:80, dp_size: 0x0}\n", `worker "w0": dp_size: 0 is not a valid value`},
		{"over the size cap", "workers: []\n#" + strings.Repeat("x", fleet.MaxWorkersFileBytes), "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, err := fleet.ParseWorkers([]byte(tt.yaml), "")
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tt.want == "" && len(ws) != 0:
				t.Fatalf("workers %v", ws)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestLoadWorkersFile_SizeCap(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	if _, err := fleet.LoadWorkersFile("/dev/zero"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("/dev/zero: %v", err)
	}
}

// servingFleet is a running Server fed by a fleet.FileWatcher over a temporary
// workers file.
type servingFleet struct {
	srv   *Server
	w     *fleet.FileWatcher
	path  string
	stop  context.CancelFunc
	wg    sync.WaitGroup
	first string
}

const twoWorkers = "workers:\n- {id: w0, address: 10.0.0.1:8000}\n- {id: w1, address: 10.0.0.2:8000}\n"

func startFleet(t testing.TB) *servingFleet {
	t.Helper()
	f := &servingFleet{path: filepath.Join(t.TempDir(), "workers.yaml"), first: twoWorkers}
	if err := os.WriteFile(f.path, []byte(f.first), 0o600); err != nil {
		t.Fatal(err)
	}
	ws, err := fleet.LoadWorkersFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	if f.srv, err = New(Config{}, ws); err != nil {
		t.Fatal(err)
	}
	f.w = fleet.NewFileWatcher(f.path, f.srv.SetWorkers, nil, 0)
	ctx, cancel := context.WithCancel(context.Background())
	f.stop = cancel
	f.wg.Go(func() { _ = f.srv.Run(ctx) })
	return f
}

func (f *servingFleet) close() { f.stop(); f.wg.Wait() }

// workerIDs returns the scheduler's workers, sorted.
func (f *servingFleet) workerIDs(t testing.TB) []string {
	t.Helper()
	st, ok := f.srv.Stats(context.Background())
	if !ok {
		t.Fatal("no stats")
	}
	var ids []string
	for _, r := range st.Ranks {
		if !slices.Contains(ids, r.Worker) {
			ids = append(ids, r.Worker)
		}
	}
	slices.Sort(ids)
	return ids
}

// TestFileWatcher_TruncationKeepsTheFleet: truncating the file or leaving
// "workers:" with nothing after it while serving used to apply zero
// workers, and every request was answered 503.
func TestFileWatcher_TruncationKeepsTheFleet(t *testing.T) {
	f := startFleet(t)
	defer f.close()
	for _, content := range []string{"", "workers:\n", "workers: []\n---\nworkers:\n- {id: w9, address: 10.0.0.9:8000}\n"} {
		if err := os.WriteFile(f.path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := f.w.Reload(); err == nil {
			t.Fatalf("%q applied", content)
		}
		if got := f.workerIDs(t); !slices.Equal(got, []string{"w0", "w1"}) || !f.srv.Ready() {
			t.Fatalf("after %q: workers %v ready %v", content, got, f.srv.Ready())
		}
	}
	if err := os.WriteFile(f.path, []byte("workers: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.w.Reload(); err != nil || len(f.workerIDs(t)) != 0 || f.srv.Ready() {
		t.Fatalf("explicit empty list: %v, workers %v", err, f.workerIDs(t))
	}
}

// FuzzWorkersFileRewrite rewrites the workers file of a serving Server with
// arbitrary content, picked up by SIGHUP's Reload or by two polls: the
// content either parses and is applied exactly, or is rejected and the
// previous set stays; no rewrite empties the fleet unless it says
// workers: [].
func FuzzWorkersFileRewrite(f *testing.F) {
	for _, s := range []string{
		"", "workers:\n", "workers: []\n", "null", twoWorkers, twoWorkers[:len(twoWorkers)/2],
		twoWorkers[:len(twoWorkers)-5], "workers:\n- {id: w0, address: 10.0.0.1:80}\n---\n",
		"workers:\n- {id: w0, address: 10.0.0.1:80, model: m, dp_size: 4, taints: [a]}\n",
		"workers:\n- id: w0\n  address: '[::1]:9'\n", "{workers: [{id: a, address: 1.2.3.4:5}]}",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	fl := startFleet(f)
	defer fl.close()
	f.Fuzz(func(t *testing.T, data []byte, viaPoll bool) {
		if err := os.WriteFile(fl.path, []byte(fl.first), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := fl.w.Reload(); err != nil {
			t.Fatal(err)
		}
		before := fl.workerIDs(t)
		if err := os.WriteFile(fl.path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		want, parseErr := fleet.ParseWorkers(data, "")
		var reloadErr error
		if viaPoll {
			if reloadErr = fl.w.Poll(); reloadErr == nil {
				reloadErr = fl.w.Poll()
			}
		} else {
			reloadErr = fl.w.Reload()
		}
		got := fl.workerIDs(t)
		if parseErr != nil {
			if reloadErr == nil {
				t.Fatalf("invalid file applied: %v", parseErr)
			}
			if !slices.Equal(got, before) {
				t.Fatalf("rejected file changed the workers from %v to %v", before, got)
			}
			return
		}
		if reloadErr != nil {
			// Valid syntax, but the set does not fit (e.g. SMG reservations).
			if !slices.Equal(got, before) {
				t.Fatalf("rejected set changed the workers from %v to %v", before, got)
			}
			return
		}
		var ids []string
		for _, w := range want {
			ids = append(ids, w.ID)
		}
		slices.Sort(ids)
		if !slices.Equal(got, ids) {
			t.Fatalf("applied workers %v, parsed %v", got, ids)
		}
		if len(want) == 0 && !strings.Contains(string(data), "[") {
			t.Fatalf("zero workers from %q, which has no explicit empty list", data)
		}
		if fl.srv.Ready() != (len(want) > 0) {
			t.Fatalf("ready %v with %d workers", fl.srv.Ready(), len(want))
		}
	})
}
