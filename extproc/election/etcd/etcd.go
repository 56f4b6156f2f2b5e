// Package etcd runs leader election over etcd, as NVIDIA Dynamo deploys
// it. The replicas campaign in one concurrency.Election under a key
// prefix, each holding a session lease of LeaseDuration; the elected
// replica's key carries its election.Record (IDENTITY@HOST:PORT), which
// every replica observes and hands to its Follower.
package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tollgate/tollgate/extproc/election"
)

// Defaults for the zero Config fields (the lease duration and retry
// period default to election's).
const (
	DefaultName        = "tollgate"
	DefaultDialTimeout = 5 * time.Second
)

// DefaultPrefix is the election key prefix for an election name.
func DefaultPrefix(name string) string { return "/tollgate/leader/" + name }

// activatorTimeout bounds one SetActive call.
const activatorTimeout = 5 * time.Second

// Config configures leader election over etcd.
type Config struct {
	// Endpoints are the etcd client URLs, each http(s)://HOST:PORT or
	// HOST:PORT. Required.
	Endpoints []string
	// Prefix is the election's key prefix; the candidates' keys lie under
	// Prefix + "/". Empty means DefaultPrefix(Name).
	Prefix string
	// Name names the election (the meaning of --leader-elect-name).
	// Empty means DefaultName.
	Name string
	// Record is what this replica publishes while it leads. Identity is
	// required and unique among the replicas; PeerAddr is optional.
	Record election.Record
	// LeaseDuration is the session lease's TTL: how long after the last
	// renewal etcd deletes a silent leader's key and a standby takes
	// over. A whole number of seconds (etcd leases count seconds); 0
	// means election.DefaultLeaseDuration.
	LeaseDuration time.Duration
	// RetryPeriod is the wait after an error (a lost session, etcd
	// unreachable) before campaigning again. 0 means election.DefaultRetryPeriod.
	RetryPeriod time.Duration
	// DialTimeout bounds dialing and every etcd call that is not a
	// long-lived wait (granting, resigning, revoking). 0 means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// TLS, when set, is used for the etcd connections; every endpoint
	// must then be https:// or HOST:PORT.
	TLS *tls.Config
	// Follower is switched on while this replica leads and told the
	// leader's record. Required.
	Follower election.Follower
	// Logger receives leadership changes. Nil discards them.
	Logger *slog.Logger
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix(c.Name)
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = election.DefaultLeaseDuration
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = election.DefaultRetryPeriod
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every problem, joined. It does not need Follower and
// touches no network, so flags can be checked without etcd.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("etcd: leader election: "+format, args...))
	}
	if len(c.Endpoints) == 0 {
		bad("no endpoints")
	}
	for _, ep := range c.Endpoints {
		if err := checkEndpoint(ep, c.TLS != nil); err != nil {
			bad("%w", err)
		}
	}
	d := c.withDefaults()
	if msgs := validation.IsDNS1123Subdomain(d.Name); len(msgs) > 0 {
		bad("election name %q: %s", d.Name, msgs[0])
	}
	if strings.HasSuffix(d.Prefix, "/") {
		bad("key prefix %q ends in '/' (the election adds its own)", d.Prefix)
	}
	if err := election.CheckIdentity(c.Record.Identity); err != nil {
		bad("%w", err)
	}
	if c.Record.PeerAddr != "" {
		if err := election.CheckPeerAddr(c.Record.PeerAddr); err != nil {
			bad("%w", err)
		}
	}
	if n := len(c.Record.String()); n > election.MaxRecordLen {
		bad("record %q of %d bytes exceeds %d", c.Record.String(), n, election.MaxRecordLen)
	}
	if c.LeaseDuration < 0 || c.RetryPeriod < 0 || c.DialTimeout < 0 {
		bad("durations must not be negative")
		return errors.Join(errs...)
	}
	if d.LeaseDuration < time.Second || d.LeaseDuration%time.Second != 0 {
		bad("lease duration %v must be a whole number of seconds (etcd leases count seconds)", d.LeaseDuration)
	}
	return errors.Join(errs...)
}

// checkEndpoint reports an endpoint that is not http(s)://HOST:PORT or
// HOST:PORT, and an http:// one when TLS is configured (the client would
// silently drop TLS for it).
func checkEndpoint(ep string, withTLS bool) error {
	hostport := ep
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return fmt.Errorf("endpoint %q: %w", ep, err)
		}
		switch u.Scheme {
		case "https":
		case "http":
			if withTLS {
				return fmt.Errorf("endpoint %q is http:// but TLS is configured", ep)
			}
		default:
			return fmt.Errorf("endpoint %q: scheme must be http or https", ep)
		}
		if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("endpoint %q: want only scheme://HOST:PORT", ep)
		}
		hostport = u.Host
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("endpoint %q: want http(s)://HOST:PORT or HOST:PORT: %w", ep, err)
	}
	if host == "" {
		return fmt.Errorf("endpoint %q has no host", ep)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("endpoint %q: port must be 1..65535", ep)
	}
	return nil
}

// Elector runs leader election and switches a Follower: active while this
// replica holds the election, inactive otherwise, and told the leader's
// record whenever it changes.
type Elector struct {
	cfg Config
	log *slog.Logger
	// leading mirrors the Follower's state for Leading.
	leading atomic.Bool
	// last is the last election value passed to the Follower; seen says
	// there was one. Only the observing goroutine uses them, and one term's
	// observer ends before the next term's starts.
	last string
	seen bool
}

// New validates cfg and returns an Elector.
func New(cfg Config) (*Elector, error) {
	err := cfg.Validate()
	if cfg.Follower == nil {
		err = errors.Join(err, errors.New("etcd: leader election: a follower is required"))
	}
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger.With("election", cfg.Prefix, "identity", cfg.Record.Identity)
	return &Elector{cfg: cfg, log: log}, nil
}

// Leading reports whether this replica leads.
func (e *Elector) Leading() bool { return e.leading.Load() }

// Run deactivates the Follower, then campaigns until ctx ends: it
// activates on winning and deactivates the moment its lease may be lost,
// then campaigns again after RetryPeriod. When ctx ends while leading it
// deactivates, resigns (a standby's campaign returns at once) and revokes
// its lease. It returns nil with the Follower inactive and every goroutine
// it started ended. Run must not be called concurrently with itself.
//
// Losing the lease: concurrency.Session's Done closes when the client's
// keepalive channel closes, which the client does when etcd answers that
// the lease expired or when no keepalive answer came within the TTL
// (checked once a second). Run also keeps its own timer: it steps down
// when no keepalive answer arrived for LeaseDuration. etcd expires the
// lease LeaseDuration after it renewed it, so the two replicas may
// overlap by the answer's transit time.
func (e *Elector) Run(ctx context.Context) error {
	e.set(ctx, false)
	var wg sync.WaitGroup
	var cli *clientv3.Client
	for cli == nil {
		var err error
		cli, err = clientv3.New(clientv3.Config{
			Endpoints:   e.cfg.Endpoints,
			DialTimeout: e.cfg.DialTimeout,
			TLS:         e.cfg.TLS,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			e.log.Warn("connecting to etcd failed", "error", err)
			if !sleep(ctx, e.cfg.RetryPeriod) {
				return nil
			}
		}
	}
	defer func() {
		_ = cli.Close() // ends the client's goroutines and unblocks ours
		wg.Wait()
	}()
	for {
		err := e.term(ctx, cli, &wg)
		if ctx.Err() != nil {
			return nil
		}
		e.log.Warn("campaign ended; retrying", "error", err, "after", e.cfg.RetryPeriod)
		if !sleep(ctx, e.cfg.RetryPeriod) {
			return nil
		}
	}
}

// term runs one session: grant a lease, observe the leader, campaign,
// lead until the lease may be lost or ctx ends. It returns with the
// Follower inactive, the lease released (within DialTimeout), and its
// goroutines ended: with etcd unreachable a cancelled Campaign waits for
// etcd, so term does too, unless ctx has ended (Run's client Close then
// ends it).
func (e *Elector) term(ctx context.Context, cli *clientv3.Client, wg *sync.WaitGroup) error {
	start := time.Now()
	ttl := int64(e.cfg.LeaseDuration / time.Second)
	gctx, cancel := context.WithTimeout(ctx, e.cfg.DialTimeout)
	lease, err := cli.Grant(gctx, ttl)
	cancel()
	if err != nil {
		return fmt.Errorf("etcd: leader election: granting a lease: %w", err)
	}
	// With the lease given, NewSession only starts the keepalives.
	sess, err := concurrency.NewSession(cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(int(ttl)))
	if err != nil {
		e.revoke(ctx, cli, lease.ID)
		return fmt.Errorf("etcd: leader election: starting a session: %w", err)
	}
	var goroutines []<-chan struct{}
	goDone := func(f func()) {
		done := make(chan struct{})
		goroutines = append(goroutines, done)
		wg.Go(func() {
			defer close(done)
			f()
		})
	}
	// el is the campaign; resign is set once it was won.
	el := concurrency.NewElection(sess, e.cfg.Prefix)
	var resign bool
	defer func() {
		// One deadline for the release, even with etcd unreachable.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.DialTimeout)
		defer cancel()
		if resign { // deleting the key hands over to a standby at once
			if err := el.Resign(rctx); err != nil && ctx.Err() != nil {
				e.log.Warn("resigning failed", "error", err)
			}
		}
		sess.Orphan() // stop the keepalives: this lease is given up
		if _, err := cli.Revoke(rctx, lease.ID); err != nil {
			e.log.Debug("revoking the lease failed", "error", err)
		}
		for _, done := range goroutines {
			select {
			case <-done:
			case <-ctx.Done():
			}
		}
	}()

	// renewed is when (since start) the last keepalive answer arrived.
	var renewed atomic.Int64
	kac, err := cli.KeepAlive(sess.Ctx(), lease.ID)
	if err != nil {
		return fmt.Errorf("etcd: leader election: watching keepalives: %w", err)
	}
	goDone(func() {
		for range kac { // closes when the session ends
			renewed.Store(int64(time.Since(start)))
		}
	})

	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	goDone(func() { e.observe(octx, concurrency.NewElection(sess, e.cfg.Prefix)) })

	// Campaign ends with the session too: a campaign on a dead lease
	// cannot win.
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	defer context.AfterFunc(sess.Ctx(), ccancel)()
	won := make(chan error, 1)
	goDone(func() { won <- el.Campaign(cctx, e.cfg.Record.String()) })
	select {
	case <-ctx.Done():
		return nil
	case <-sess.Done():
		return errors.New("etcd: leader election: session ended while campaigning")
	case err := <-won:
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("etcd: leader election: campaigning: %w", err)
		}
	}

	resign = true
	e.log.Info("leading: serving ext_proc")
	e.set(ctx, true)
	lost := e.hold(ctx, sess, start, &renewed)
	if lost == nil {
		e.log.Info("stepping down: resigning")
	} else {
		e.log.Warn("lost the lease: standing by", "reason", lost)
	}
	// Deactivate before the key goes (the deferred Resign): two
	// schedulers must not overlap.
	e.set(ctx, false)
	return lost
}

// hold waits while this replica leads: until ctx ends (nil) or the lease
// may be lost (the reason).
func (e *Elector) hold(ctx context.Context, sess *concurrency.Session, start time.Time, renewed *atomic.Int64) error {
	stale := func() time.Duration {
		return time.Until(start.Add(time.Duration(renewed.Load()) + e.cfg.LeaseDuration))
	}
	t := time.NewTimer(stale())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sess.Done():
			return errors.New("etcd: leader election: the session ended (etcd stopped renewing the lease)")
		case <-t.C:
			d := stale()
			if d <= 0 {
				return fmt.Errorf("etcd: leader election: no keepalive answer for %v", e.cfg.LeaseDuration)
			}
			t.Reset(d)
		}
	}
}

// observe passes each new leader value to the Follower until ctx ends,
// observing again after RetryPeriod when the watch breaks. An empty
// election reports nothing, so the Follower keeps the last leader until
// the next is elected.
func (e *Elector) observe(ctx context.Context, el *concurrency.Election) {
	for {
		for resp := range el.Observe(ctx) {
			if len(resp.Kvs) > 0 {
				e.follow(resp.Kvs[0].Value)
			}
		}
		if !sleep(ctx, e.cfg.RetryPeriod) {
			return
		}
	}
}

// follow hands the leader's record to the Follower when the value
// changed; a value that is no record reads as no leader.
func (e *Elector) follow(v []byte) {
	s := string(v)
	if e.seen && s == e.last {
		return
	}
	e.last, e.seen = s, true
	var r election.Record
	var err error
	if len(s) > election.MaxRecordLen {
		err = fmt.Errorf("value of %d bytes exceeds %d", len(s), election.MaxRecordLen)
	} else {
		r, err = election.Parse(s)
	}
	switch {
	case err != nil:
		e.log.Warn("the leader's key holds no record: following no leader", "error", err)
		r = election.Record{}
	case r.Identity != e.cfg.Record.Identity:
		e.log.Info("standing by", "leader", r.String())
	}
	e.cfg.Follower.SetLeader(r)
}

// revoke releases a lease, deleting the keys on it, within DialTimeout.
func (e *Elector) revoke(ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.DialTimeout)
	defer cancel()
	if _, err := cli.Revoke(ctx, id); err != nil {
		e.log.Debug("revoking the lease failed", "error", err)
	}
}

// set switches the Follower and records the state. It runs even after
// ctx ends: stepping down on shutdown must still reach the server.
func (e *Elector) set(ctx context.Context, active bool) {
	e.leading.Store(active)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), activatorTimeout)
	defer cancel()
	if err := e.cfg.Follower.SetActive(ctx, active); err != nil {
		e.log.Error("switching the server failed", "active", active, "error", err)
	}
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
