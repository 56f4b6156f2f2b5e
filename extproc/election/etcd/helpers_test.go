package etcd

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tollgate/tollgate/extproc/election"
	"github.com/tollgate/tollgate/test/etcdserver"
	"github.com/tollgate/tollgate/test/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startEtcd starts a real etcd that stops when the test ends.
func startEtcd(t *testing.T) *etcdserver.Server { return etcdserver.Start(t) }

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
func startElector(t *testing.T, s *etcdserver.Server, identity string, tweak ...func(*Config)) *run {
	t.Helper()
	f := &follower{}
	cfg := Config{
		Endpoints:     []string{s.ClientURL},
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

// awaitLeader waits until r's follower was told leader's record.
func awaitLeader(t *testing.T, r, leader *run) {
	t.Helper()
	eventually(t, 10*time.Second, r.e.cfg.Record.Identity+" observes "+leader.e.cfg.Record.Identity, func() bool {
		_, got, _ := r.f.state()
		return got == leader.e.cfg.Record
	})
}

// leaderAndStandby starts a, waits until it leads, then starts b and
// waits until b observes a.
func leaderAndStandby(t *testing.T, s *etcdserver.Server) (a, b *run) {
	t.Helper()
	a = startElector(t, s, "a")
	eventually(t, 10*time.Second, "a leads", a.f.isActive)
	b = startElector(t, s, "b")
	awaitLeader(t, b, a)
	return a, b
}

// eventually polls cond every 10ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return poll.Until(t, timeout, 10*time.Millisecond, what, cond)
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

// noLeak checks that the electors left no goroutine behind; the running
// etcd's reaper (test/etcdserver) stays until the test ends.
func noLeak(t *testing.T) {
	t.Helper()
	goleak.VerifyNone(t, goleak.IgnoreAnyFunction("github.com/tollgate/tollgate/test/etcdserver.(*Server).Run.func1"))
}
