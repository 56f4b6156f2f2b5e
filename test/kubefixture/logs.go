package kubefixture

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// LogBuffer is a slog handler target that tests can read. The zero value
// is ready.
type LogBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Logger returns a text logger that writes to l.
func (l *LogBuffer) Logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// Count returns how many times s occurs in the log.
func (l *LogBuffer) Count(s string) int { return strings.Count(l.String(), s) }

// Await waits until the log holds s: a source logs its problems after the
// apply returns.
func (l *LogBuffer) Await(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(l.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("log lacks %q:\n%s", s, l)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
