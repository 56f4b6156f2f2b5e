package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// FileWatcher keeps a Server's worker set in step with a workers file. It
// re-reads the file every PollInterval and applies it when its content
// changed and then read the same on the next poll, which also catches
// Kubernetes ConfigMap updates (an atomic symlink swap that leaves the
// path's own modification time alone) and never applies a file caught
// half-written by a writer still at work; Reload applies it on demand
// (cmd/tollgate calls it on SIGHUP). An invalid file is logged with its
// reason and the old set stays in force.
//
// A FileWatcher is safe for concurrent use.
type FileWatcher struct {
	path   string
	apply  func([]Worker) error
	log    *slog.Logger
	period time.Duration

	// mu serializes loads and guards last.
	mu sync.Mutex
	// last is the content of the file last seen (applied or rejected), so a
	// bad file is reported once, not every poll.
	last []byte
	// pending is changed content seen by one poll, applied if the next
	// poll reads the same.
	pending []byte
}

// NewFileWatcher returns a watcher that loads path into apply (normally
// Server.SetWorkers). period 0 means DefaultPollInterval. It does not
// read the file until Reload or Run.
func NewFileWatcher(path string, apply func([]Worker) error, log *slog.Logger, period time.Duration) *FileWatcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if period <= 0 {
		period = DefaultPollInterval
	}
	return &FileWatcher{path: path, apply: apply, log: log, period: period}
}

// Reload reads, validates and applies the file now, whether or not it
// changed. On error the previous worker set stays in force.
func (w *FileWatcher) Reload() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.load(true)
}

// Poll is one of Run's polls: it applies the file when its content
// changed since the last poll and reads the same as at the poll before.
func (w *FileWatcher) Poll() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.load(false)
}

// Run polls the file until ctx ends, applying it whenever its content
// changes. It returns ctx's error.
func (w *FileWatcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			_ = w.Poll() // logged inside
		}
	}
}

// load applies the file; unless force, only when its content changed.
// w.mu is held.
func (w *FileWatcher) load(force bool) error {
	data, err := readWorkersFile(w.path)
	if err != nil {
		if force || !errors.Is(err, os.ErrNotExist) || w.last != nil {
			w.log.Error("workers file not reloaded; keeping the current worker set", "path", w.path, "error", err)
		}
		w.last = nil
		return err
	}
	if !force {
		if w.last != nil && bytes.Equal(data, w.last) {
			w.pending = nil
			return nil
		}
		if w.pending == nil || !bytes.Equal(data, w.pending) {
			w.pending = data // settle for one poll
			return nil
		}
	}
	w.last, w.pending = data, nil
	ws, err := ParseWorkers(data, w.path) // every problem names the file
	if err == nil {
		if err = w.apply(ws); err != nil {
			err = fmt.Errorf("fleet: workers file %s: %w", w.path, err)
		}
	}
	if err != nil {
		w.log.Error("invalid workers file; keeping the current worker set", "path", w.path, "error", err)
		return err
	}
	w.log.Info("worker set loaded", "path", w.path, "workers", len(ws))
	return nil
}

// DefaultPollInterval is how often a FileWatcher checks its file.
const DefaultPollInterval = 2 * time.Second
