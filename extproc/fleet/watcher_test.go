package fleet

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestFileWatcher_PollWaitsForTheFileToSettle: a file rewritten in place
// can be read half-written; a cut that still parses (a port cut from 8000
// to 80) used to be applied and route traffic to the wrong port. A poll
// applies changed content only when the next poll reads it unchanged.
func TestFileWatcher_PollWaitsForTheFileToSettle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "workers.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var applied []string
	w := NewFileWatcher(path, func(ws []Worker) error {
		applied = append(applied, ws[0].Address)
		return nil
	}, nil, 0)
	poll := func() {
		t.Helper()
		_ = w.Poll()
	}
	full := "workers:\n- id: w0\n  address: 10.0.0.1:8000\n"
	write(full[:len(full)-3]) // the writer is still at work: "10.0.0.1:80"
	poll()
	write(full)
	poll()
	poll()
	poll()
	if !slices.Equal(applied, []string{"10.0.0.1:8000"}) {
		t.Fatalf("applied %q, want only the complete file", applied)
	}
}
