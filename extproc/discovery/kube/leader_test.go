package kube

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/tollgate/tollgate/test/kubefixture"
)

// cluster tracks the activators of several replicas and records any moment
// at which two were active at once.
type cluster struct {
	mu      sync.Mutex
	active  map[string]bool
	overlap []string
}

func (c *cluster) activator(id string) Activator { return &fakeActivator{id: id, c: c} }

func (c *cluster) isActive(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.active[id]
}

type fakeActivator struct {
	id string
	c  *cluster
}

func (a *fakeActivator) SetActive(_ context.Context, active bool) error {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if active {
		for id, on := range a.c.active {
			if on && id != a.id {
				a.c.overlap = append(a.c.overlap, a.id+" activated while "+id+" was active")
			}
		}
	}
	a.c.active[a.id] = active
	return nil
}

// replica runs one Elector until stop is called.
type replica struct {
	el   *Elector
	stop func()
}

func startReplica(t *testing.T, client *fake.Clientset, c *cluster, id string) *replica {
	t.Helper()
	el, err := NewElector(LeaderConfig{
		Client: client, Namespace: ns, Name: "tollgate", Identity: id,
		LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
		Activator: c.activator(id),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := el.Run(ctx); err != nil {
			t.Errorf("%s: Run: %v", id, err)
		}
	}()
	var once sync.Once
	r := &replica{el: el, stop: func() { once.Do(func() { cancel(); <-done }) }}
	t.Cleanup(r.stop)
	return r
}

// The elector runs on client-go's timers and a fake clientset, all inside a
// synctest bubble: lease, renew and retry periods pass on the fake clock,
// so the timing checks below are exact however loaded the machine is.
func TestElector_StandbyTakesOverWhenTheLeaderStopsRenewing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var partitioned atomic.Bool
		client := kubefixture.LeaseClient(&partitioned)
		c := &cluster{active: map[string]bool{}}

		a := startReplica(t, client, c, "a")
		kubefixture.Eventually(t, 2*time.Second, "a leads", func() bool { return c.isActive("a") })
		b := startReplica(t, client, c, "b")
		time.Sleep(300 * time.Millisecond)
		if c.isActive("b") || b.el.Leading() || !a.el.Leading() {
			t.Fatal("the standby became active while the leader renewed")
		}

		// The leader can no longer renew: it steps down after the renew
		// deadline, and the standby takes over once the lease has expired.
		partitioned.Store(true)
		kubefixture.Eventually(t, 2*time.Second, "a steps down", func() bool { return !c.isActive("a") })
		kubefixture.Eventually(t, 3*time.Second, "b takes over", func() bool { return c.isActive("b") })
		if c.isActive("a") {
			t.Error("both replicas active")
		}

		// The old leader reconnects and stays a standby.
		partitioned.Store(false)
		time.Sleep(300 * time.Millisecond)
		if c.isActive("a") || !c.isActive("b") {
			t.Errorf("after healing: a active %v, b active %v; want only b", c.isActive("a"), c.isActive("b"))
		}

		// A leader that shuts down releases the lease: the standby takes over
		// at its next retry (at most 220 ms on the fake clock), well before
		// the lease would have expired (at least 780 ms: a lease of 1 s
		// observed at most one jittered retry period late).
		b.stop()
		if c.isActive("b") {
			t.Error("a stopped replica is still active")
		}
		if took := kubefixture.Eventually(t, 2*time.Second, "a takes over after the release", func() bool { return c.isActive("a") }); took > 500*time.Millisecond {
			t.Errorf("takeover after a release took %v, want less than half the lease duration", took)
		}
		a.stop()
		if c.isActive("a") {
			t.Error("a stopped replica is still active")
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.overlap) > 0 {
			t.Errorf("two active replicas: %v", c.overlap)
		}
	})
}

func TestLeaderConfig_Validate(t *testing.T) {
	ok := LeaderConfig{Namespace: ns, Name: "tollgate", Identity: "pod-0"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	tests := []struct {
		name string
		mod  func(*LeaderConfig)
		want string
	}{
		{"bad namespace", func(c *LeaderConfig) { c.Namespace = "" }, "lease namespace"},
		{"bad name", func(c *LeaderConfig) { c.Name = "Not Valid" }, "lease name"},
		{"no identity", func(c *LeaderConfig) { c.Identity = "" }, "identity is empty"},
		{"negative", func(c *LeaderConfig) { c.RetryPeriod = -time.Second }, "negative"},
		{"fractional lease", func(c *LeaderConfig) {
			c.LeaseDuration = 1500 * time.Millisecond
			c.RenewDeadline = time.Second
			c.RetryPeriod = 100 * time.Millisecond
		}, "whole number of seconds"},
		{"renew not below lease", func(c *LeaderConfig) { c.LeaseDuration = 10 * time.Second }, "must exceed the renew deadline"},
		{"retry too long", func(c *LeaderConfig) { c.RetryPeriod = 9 * time.Second }, "must exceed 1.2 times the retry period"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mod(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := NewElector(ok); err == nil || !strings.Contains(err.Error(), "client is required") || !strings.Contains(err.Error(), "activator is required") {
		t.Errorf("NewElector without client and activator: %v", err)
	}
}
