package kvevents_test

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/test/kvwire"
)

// adapterGoroutines counts the goroutines running code of kvevents or
// zmtp (not of these tests).
func adapterGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("/extproc/engine/kvevents.")) || bytes.Contains(g, []byte("/extproc/engine/kvevents/zmtp.")) {
			count++
		}
	}
	return count
}

// TestLifecycle: New starts nothing, even in bind mode; the workers set
// before Run are subscribed to once it starts; Run ends its goroutines
// before it returns, runs once, and SetWorkers after it does nothing.
func TestLifecycle(t *testing.T) {
	w := startWorker(t, kvwire.Encoding{}, 64)
	pub, replay := w.KVEventEndpoints()
	m, err := kvevents.New(kvevents.Config{BlockSize: blockSize, ReconnectDelay: 20 * time.Millisecond,
		Bind: "tcp://127.0.0.1:0", ResyncAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m.SetWorkers([]kvevents.Endpoint{{Worker: "w0", Endpoint: pub, Replay: replay}})
	if !strings.HasPrefix(m.BindEndpoint(), "tcp://127.0.0.1:") {
		t.Fatalf("BindEndpoint = %q before Run", m.BindEndpoint())
	}
	// The socket is bound: an engine's connection waits in its backlog.
	nc, err := net.Dial("tcp", strings.TrimPrefix(m.BindEndpoint(), "tcp://"))
	if err != nil {
		t.Fatalf("the bound socket refused a connection before Run: %v", err)
	}
	defer nc.Close()
	// (Polled: an earlier test's adapter goroutines may still be exiting.)
	waitFor(t, "no adapter goroutine after New and SetWorkers", func() bool { return adapterGoroutines() == 0 })

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	probe := 0
	waitFor(t, "the worker set before Run subscribed to", func() bool {
		probe++
		complete(t, w, prompt(blockSize+1, 100000+probe*blockSize))
		return m.Index().Synced("w0")
	})
	if adapterGoroutines() == 0 {
		t.Fatal("adapterGoroutines counts none while Run runs")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(watchdog):
		t.Fatal("Run did not return after its context ended")
	}
	waitFor(t, "the adapter's goroutines gone", func() bool { return adapterGoroutines() == 0 })

	if err := m.Run(context.Background()); err == nil {
		t.Error("a second Run ran")
	}
	m.SetWorkers([]kvevents.Endpoint{{Worker: "w1", Endpoint: pub}})
	if n := adapterGoroutines(); n != 0 {
		t.Errorf("SetWorkers after Run started %d goroutines", n)
	}
}

// TestRunDoneReleasesBind: a Manager of bind mode Run with a context
// already done returns at once and releases its socket.
func TestRunDoneReleasesBind(t *testing.T) {
	m, err := kvevents.New(kvevents.Config{BlockSize: blockSize, Bind: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(m.BindEndpoint(), "tcp://")
	if _, err := kvevents.New(kvevents.Config{BlockSize: blockSize, Bind: m.BindEndpoint()}); err == nil {
		t.Fatal("New bound a port already bound")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	within(t, "Run with a done context", func() {
		if err := m.Run(ctx); err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the socket is still bound after Run: %v", err)
	}
	_ = ln.Close()
}
