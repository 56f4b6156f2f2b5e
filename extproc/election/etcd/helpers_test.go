package etcd

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tollgate/tollgate/extproc/election"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// etcdServer is a real single-member etcd (the Debian etcd-server
// package's /usr/bin/etcd) on free loopback ports.
type etcdServer struct {
	t                  *testing.T
	bin, dir, logPath  string
	clientURL, peerURL string
	cmd                *exec.Cmd
}

// startEtcd starts etcd and stops it when the test ends. Without the
// binary it skips the test, or fails it when CI=true.
func startEtcd(t *testing.T) *etcdServer {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("etcd not found (install the etcd-server package, hack/debian-packages.txt): %v", err)
		}
		t.Skipf("etcd not found (install the etcd-server package): %v", err)
	}
	dir := t.TempDir()
	s := &etcdServer{
		t:         t,
		bin:       bin,
		dir:       filepath.Join(dir, "data"),
		logPath:   filepath.Join(dir, "etcd.log"),
		clientURL: "http://" + freeAddr(t),
		peerURL:   "http://" + freeAddr(t),
	}
	s.start()
	t.Cleanup(s.stop)
	return s
}

// freeAddr returns a loopback HOST:PORT nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs etcd (again, on the same data directory and ports) and
// waits until it is healthy.
func (s *etcdServer) start() {
	s.t.Helper()
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	defer logf.Close()
	s.cmd = exec.Command(s.bin,
		"--name", "default",
		"--data-dir", s.dir,
		"--listen-client-urls", s.clientURL,
		"--advertise-client-urls", s.clientURL,
		"--listen-peer-urls", s.peerURL,
		"--initial-advertise-peer-urls", s.peerURL,
		"--initial-cluster", "default="+s.peerURL,
	)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf // files: no copying goroutines
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	for {
		resp, err := hc.Get(s.clientURL + "/health")
		if err == nil {
			var buf [256]byte
			n, _ := resp.Body.Read(buf[:])
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(buf[:n]), `"true"`) {
				hc.CloseIdleConnections()
				return
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			out, _ := os.ReadFile(s.logPath)
			s.t.Fatalf("etcd not healthy after 15s: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop kills etcd and reaps it.
func (s *etcdServer) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// follower records what an Elector tells it.
type follower struct {
	mu         sync.Mutex
	active     bool
	activeAt   time.Time // last switch to active
	inactiveAt time.Time // last switch to inactive
	leader     election.Record
	leaders    int // SetLeader calls
}

func (f *follower) SetActive(_ context.Context, active bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case active && !f.active:
		f.activeAt = time.Now()
	case !active && f.active:
		f.inactiveAt = time.Now()
	}
	f.active = active
	return nil
}

func (f *follower) SetLeader(r election.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leader = r
	f.leaders++
}

func (f *follower) state() (active bool, leader election.Record, leaders int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.active, f.leader, f.leaders
}

func (f *follower) isActive() bool { a, _, _ := f.state(); return a }

// run is an Elector running until its stop is called.
type run struct {
	e      *Elector
	f      *follower
	cancel context.CancelFunc
	done   chan error
}

// startElector runs an Elector for identity against s with short test
// timings; the test's cleanup stops it.
func startElector(t *testing.T, s *etcdServer, identity string, tweak ...func(*Config)) *run {
	t.Helper()
	f := &follower{}
	cfg := Config{
		Endpoints:     []string{s.clientURL},
		Name:          "test",
		Record:        election.Record{Identity: identity, PeerAddr: "127.0.0.1:" + strconv.Itoa(9000+len(identity))},
		LeaseDuration: 2 * time.Second,
		RetryPeriod:   200 * time.Millisecond,
		DialTimeout:   time.Second,
		Follower:      f,
		Logger:        (&logLines{t: t}).logger(identity),
	}
	for _, fn := range tweak {
		fn(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{e: e, f: f, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- e.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the run and waits for Run to return (at most 10s).
func (r *run) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run: %v", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancel")
	}
	if r.e.Leading() || r.f.isActive() {
		t.Error("still active after Run returned")
	}
}

// eventually polls cond every 10ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// logLines is a test log: each line goes to t.Log and is kept.
type logLines struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(p []byte) (int, error) {
	line := strings.TrimSuffix(string(p), "\n")
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	l.t.Log(line)
	return len(p), nil
}

// count reports how many lines contain s.
func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// logger logs to l at debug level, each line tagged with who.
func (l *logLines) logger(who string) *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug})).With("who", who)
}
