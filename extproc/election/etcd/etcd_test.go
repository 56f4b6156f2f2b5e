package etcd

import (
	"context"
	"crypto/tls"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/extproc/election"
)

func TestLeaderIsObservedByStandby(t *testing.T) {
	s := startEtcd(t)
	a := startElector(t, s, "a")
	eventually(t, 10*time.Second, "a leads", func() bool { return a.e.Leading() && a.f.isActive() })
	b := startElector(t, s, "b")
	awaitLeader(t, b, a)
	awaitLeader(t, a, a)
	time.Sleep(200 * time.Millisecond)
	if b.e.Leading() || b.f.isActive() {
		t.Error("standby b is active while a leads")
	}
	b.stop(t)
	a.stop(t)
	noLeak(t)
}

func TestResignHandsOverAtOnce(t *testing.T) {
	s := startEtcd(t)
	a, b := leaderAndStandby(t, s)

	cancelled := time.Now()
	a.cancel()
	eventually(t, 10*time.Second, "b takes over", b.f.isActive)
	b.f.mu.Lock()
	handover := b.f.activeAt.Sub(cancelled)
	b.f.mu.Unlock()
	t.Logf("handover: %v from cancelling the leader to the standby's SetActive(true)", handover)

	a.stop(t) // Run returned nil, a is inactive
	a.f.mu.Lock()
	aOff := a.f.inactiveAt
	a.f.mu.Unlock()
	b.f.mu.Lock()
	bOn := b.f.activeAt
	b.f.mu.Unlock()
	if !aOff.Before(bOn) {
		t.Errorf("a stepped down at %v, after b took over at %v", aOff, bOn)
	}
	awaitLeader(t, b, b)
	b.stop(t)
	noLeak(t)
}

func TestLeaderStepsDownWhenEtcdGoesAway(t *testing.T) {
	s := startEtcd(t)
	a, b := leaderAndStandby(t, s)

	s.Kill()
	d := eventually(t, 10*time.Second, "a steps down with etcd gone", func() bool {
		return !a.f.isActive() && !a.e.Leading()
	})
	t.Logf("a stepped down %v after etcd was killed (lease duration %v)", d, a.e.cfg.LeaseDuration)
	if b.f.isActive() {
		t.Error("b became active without etcd")
	}

	s.Restart()
	d = eventually(t, 20*time.Second, "someone leads after etcd restarts", func() bool {
		return a.f.isActive() || b.f.isActive()
	})
	t.Logf("a leader again %v after etcd restarted", d)
	time.Sleep(200 * time.Millisecond)
	if a.f.isActive() && b.f.isActive() {
		t.Error("a and b both active")
	}
	a.stop(t)
	b.stop(t)
	noLeak(t)
}

func TestLeaderStepsDownWhenEtcdHangs(t *testing.T) {
	s := startEtcd(t)
	a, b := leaderAndStandby(t, s)

	// A stopped etcd keeps its connections open and answers nothing: a
	// partition, not a reset.
	if err := s.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	d := eventually(t, 10*time.Second, "a steps down with etcd silent", func() bool {
		return !a.f.isActive() && !a.e.Leading()
	})
	t.Logf("a stepped down %v after etcd stopped answering (lease duration %v)", d, a.e.cfg.LeaseDuration)
	if b.f.isActive() {
		t.Error("b became active without etcd")
	}

	if err := s.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	d = eventually(t, 20*time.Second, "someone leads after etcd resumes", func() bool {
		return a.f.isActive() || b.f.isActive()
	})
	t.Logf("a leader again %v after etcd resumed", d)
	time.Sleep(200 * time.Millisecond)
	if a.f.isActive() && b.f.isActive() {
		t.Error("a and b both active")
	}
	a.stop(t)
	b.stop(t)
	noLeak(t)
}

func TestHostileElectionValue(t *testing.T) {
	s := startEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	put := func(key, val string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, key, val); err != nil {
			t.Fatal(err)
		}
	}
	// A key older than any candidate's is the leader to every observer.
	key := DefaultPrefix("test") + "/hostile"
	put(key, strings.Repeat("x", 1<<20))

	log := &logLines{t: t}
	a := startElector(t, s, "a", func(c *Config) { c.Logger = log.logger("a") })
	eventually(t, 10*time.Second, "a is told of no leader", func() bool {
		_, leader, n := a.f.state()
		return n == 1 && leader == election.Record{}
	})
	put(key, "@127.0.0.1:1") // no identity
	eventually(t, 10*time.Second, "a is told of no leader again", func() bool {
		_, leader, n := a.f.state()
		return n == 2 && leader == election.Record{}
	})
	put(key, "@127.0.0.1:1") // the same value: no news
	if a.f.isActive() {
		t.Fatal("a leads behind an older key")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a leads once the key is gone", a.f.isActive)
	awaitLeader(t, a, a)
	if _, _, n := a.f.state(); n != 3 {
		t.Errorf("SetLeader called %d times, want 3 (none, none, a)", n)
	}
	if n := log.count("holds no record"); n != 2 {
		t.Errorf("logged %d bad values, want 2 (once per value)", n)
	}
	if n := log.count(strings.Repeat("x", 100)); n != 0 {
		t.Error("the 1 MiB value was logged")
	}
	a.stop(t)
	if err := cli.Close(); err != nil {
		t.Error(err)
	}
	noLeak(t)
}

func TestValidate(t *testing.T) {
	good := Config{Endpoints: []string{"http://127.0.0.1:2379"}, Record: election.Record{Identity: "a"}}
	tests := []struct {
		name string
		edit func(*Config)
		want []string // substrings of the error; none: valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"full", func(c *Config) {
			c.Endpoints = []string{"etcd-0.etcd:2379", "https://[::1]:2379/"}
			c.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
			c.Name, c.Prefix = "dynamo", "v1/leader"
			c.Record.PeerAddr = "10.0.0.1:9002"
			c.LeaseDuration, c.RetryPeriod, c.DialTimeout = time.Second, time.Millisecond, time.Millisecond
		}, nil},
		{"no endpoints", func(c *Config) { c.Endpoints = nil }, []string{"no endpoints"}},
		{"no port", func(c *Config) { c.Endpoints = []string{"localhost"} }, []string{`endpoint "localhost"`}},
		{"bad scheme", func(c *Config) { c.Endpoints = []string{"unix://x:1"} }, []string{"scheme must be http or https"}},
		{"port 0", func(c *Config) { c.Endpoints = []string{"http://h:0"} }, []string{"port must be 1..65535"}},
		{"no host", func(c *Config) { c.Endpoints = []string{":2379"} }, []string{"has no host"}},
		{"path", func(c *Config) { c.Endpoints = []string{"http://h:1/v3"} }, []string{"want only scheme://HOST:PORT"}},
		{"http with TLS", func(c *Config) { c.TLS = &tls.Config{MinVersion: tls.VersionTLS12} }, []string{"is http:// but TLS is configured"}},
		{"identity with @", func(c *Config) { c.Record.Identity = "a@b" }, []string{"contains '@'"}},
		{"no identity", func(c *Config) { c.Record.Identity = "" }, []string{"identity is empty"}},
		{"bad peer addr", func(c *Config) { c.Record.PeerAddr = "0.0.0.0:80" }, []string{"peer address"}},
		{"peer addr without port", func(c *Config) { c.Record.PeerAddr = "host" }, []string{"peer address"}},
		{"record too long", func(c *Config) {
			c.Record = election.Record{Identity: strings.Repeat("i", 256), PeerAddr: strings.Repeat("h", 250) + ":12345"}
		}, []string{"exceeds 512"}},
		{"lease 1500ms", func(c *Config) { c.LeaseDuration = 1500 * time.Millisecond }, []string{"whole number of seconds"}},
		{"lease 500ms", func(c *Config) { c.LeaseDuration = 500 * time.Millisecond }, []string{"whole number of seconds"}},
		{"negative lease", func(c *Config) { c.LeaseDuration = -time.Second }, []string{"must not be negative"}},
		{"negative retry", func(c *Config) { c.RetryPeriod = -1 }, []string{"must not be negative"}},
		{"negative dial", func(c *Config) { c.DialTimeout = -1 }, []string{"must not be negative"}},
		{"bad name", func(c *Config) { c.Name = "Bad_Name" }, []string{`election name "Bad_Name"`}},
		{"prefix with slash", func(c *Config) { c.Prefix = "/x/" }, []string{"ends in '/'"}},
		{"joined", func(c *Config) { c.Endpoints, c.Record.Identity = nil, "" }, []string{"no endpoints", "identity is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.edit(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: nil, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v; want it to contain %q", err, w)
				}
			}
			for line := range strings.SplitSeq(err.Error(), "\n") {
				if !strings.HasPrefix(line, "etcd: leader election: ") {
					t.Errorf("error line %q lacks the prefix", line)
				}
			}
		})
	}
}

func TestNewNeedsFollower(t *testing.T) {
	_, err := New(Config{Endpoints: []string{"127.0.0.1:2379"}, Record: election.Record{Identity: "a"}})
	if err == nil || !strings.Contains(err.Error(), "a follower is required") {
		t.Fatalf("New without a follower: %v", err)
	}
}

func TestDefaults(t *testing.T) {
	d := Config{}.withDefaults()
	if d.Name != "tollgate" || d.Prefix != "/tollgate/leader/tollgate" || d.LeaseDuration != 15*time.Second ||
		d.RetryPeriod != 2*time.Second || d.DialTimeout != 5*time.Second || d.Logger == nil {
		t.Errorf("defaults: %+v", d)
	}
	if p := (Config{Name: "x"}).withDefaults().Prefix; p != "/tollgate/leader/x" {
		t.Errorf("prefix for name x: %q", p)
	}
}
