package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/tollgate/tollgate/extproc/election"
)

// DefaultRenewDeadline is the Lease's renew deadline default (client-go's
// usual value); the lease duration and retry period default to
// election's.
const DefaultRenewDeadline = 10 * time.Second

// Activator is what leader election switches: the ext_proc server
// (*extproc.Server implements it; cmd/tollgate checks).
//
// SetActive(ctx, false) must, at once: report NOT_SERVING on gRPC health and
// 503 on /readyz; answer every queued request 503 with Retry-After; answer
// new requests the same way; and let dispatched requests finish with their
// bookings released as usual. SetActive(ctx, true) undoes that (readiness
// then follows the worker set and draining as before). Worker set updates
// keep working either way. Calls are idempotent and safe from any
// goroutine; an error means the switch may be incomplete (the health state
// must still have changed).
type Activator interface {
	SetActive(ctx context.Context, active bool) error
}

// activatorTimeout bounds one SetActive call.
const activatorTimeout = 5 * time.Second

// LeaderConfig configures leader election over a coordination.k8s.io
// Lease.
type LeaderConfig struct {
	// Client reads and writes the Lease. Required.
	Client kubernetes.Interface
	// Namespace and Name name the Lease. Required.
	Namespace, Name string
	// Identity is this replica's name in the Lease (normally the pod
	// name). Required; unique among the replicas.
	Identity string
	// PeerAddr, when set, is published with the identity in the Lease's
	// holderIdentity as IDENTITY@HOST:PORT (election.Record): the address
	// other replicas reach this one's peer channel on while it leads.
	PeerAddr string
	// LeaseDuration is how long standbys wait after the last renewal before
	// taking over; a whole number of seconds, as the Lease stores it.
	// 0 means election.DefaultLeaseDuration.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps retrying a renewal before
	// it steps down; less than LeaseDuration. 0 means DefaultRenewDeadline.
	RenewDeadline time.Duration
	// RetryPeriod is the interval between attempts; RenewDeadline must
	// exceed 1.2 times it. 0 means election.DefaultRetryPeriod.
	RetryPeriod time.Duration
	// Activator is switched on while this replica leads. Required.
	Activator Activator
	// Logger receives leadership changes. Nil discards them.
	Logger *slog.Logger
}

// withDefaults fills the zero durations.
func (c LeaderConfig) withDefaults() LeaderConfig {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = election.DefaultLeaseDuration
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = DefaultRenewDeadline
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = election.DefaultRetryPeriod
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every problem, joined. It does not need Client or
// Activator, so flags can be checked without a cluster.
func (c LeaderConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("kube: leader election: "+format, args...))
	}
	if msgs := validation.IsDNS1123Label(c.Namespace); len(msgs) > 0 {
		bad("lease namespace %q: %s", c.Namespace, msgs[0])
	}
	if msgs := validation.IsDNS1123Subdomain(c.Name); len(msgs) > 0 {
		bad("lease name %q: %s", c.Name, msgs[0])
	}
	if err := election.CheckIdentity(c.Identity); err != nil {
		bad("%v", err)
	}
	if c.PeerAddr != "" {
		if err := election.CheckPeerAddr(c.PeerAddr); err != nil {
			bad("%v", err)
		}
	}
	if c.LeaseDuration < 0 || c.RenewDeadline < 0 || c.RetryPeriod < 0 {
		bad("durations must not be negative")
		return errors.Join(errs...)
	}
	d := c.withDefaults()
	if d.LeaseDuration < time.Second || d.LeaseDuration%time.Second != 0 {
		bad("lease duration %v must be a whole number of seconds (the Lease stores seconds)", d.LeaseDuration)
	}
	if d.LeaseDuration <= d.RenewDeadline {
		bad("lease duration %v must exceed the renew deadline %v", d.LeaseDuration, d.RenewDeadline)
	}
	if d.RenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(d.RetryPeriod)) {
		bad("renew deadline %v must exceed %v times the retry period %v", d.RenewDeadline, leaderelection.JitterFactor, d.RetryPeriod)
	}
	return errors.Join(errs...)
}

// Elector runs leader election and switches an Activator: active while
// this replica holds the Lease, inactive otherwise. Replicas that do not
// lead keep running everything else (worker discovery included), so a
// standby that takes over starts with a current worker set.
type Elector struct {
	cfg LeaderConfig
	// leading mirrors the Activator's state for Leading.
	leading atomic.Bool
	// mu orders the elector's start and stop callbacks, which client-go
	// runs on different goroutines.
	mu sync.Mutex
}

// NewElector validates cfg and returns an Elector.
func NewElector(cfg LeaderConfig) (*Elector, error) {
	err := cfg.Validate()
	if cfg.Client == nil {
		err = errors.Join(err, errors.New("kube: leader election: a kubernetes client is required"))
	}
	if cfg.Activator == nil {
		err = errors.Join(err, errors.New("kube: leader election: an activator is required"))
	}
	if err != nil {
		return nil, err
	}
	return &Elector{cfg: cfg.withDefaults()}, nil
}

// Leading reports whether this replica holds the Lease.
func (e *Elector) Leading() bool { return e.leading.Load() }

// Run deactivates the Activator, then campaigns for the Lease until ctx
// ends: it activates on winning, deactivates the moment it cannot renew
// (RenewDeadline after the last renewal, before any standby may take over
// at LeaseDuration), and campaigns again. When ctx ends it releases the
// Lease, so a standby takes over within RetryPeriod, and returns with the
// Activator inactive.
func (e *Elector) Run(ctx context.Context) error {
	e.set(ctx, false)
	holder := election.Record{Identity: e.cfg.Identity, PeerAddr: e.cfg.PeerAddr}.String()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.cfg.Name},
		Client:     e.cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: holder},
	}
	log := e.cfg.Logger.With("lease", e.cfg.Namespace+"/"+e.cfg.Name, "identity", e.cfg.Identity)
	follower, _ := e.cfg.Activator.(election.Follower)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   e.cfg.LeaseDuration,
		RenewDeadline:   e.cfg.RenewDeadline,
		RetryPeriod:     e.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            e.cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			// client-go starts this on its own goroutine and cancels lctx
			// before it calls OnStoppedLeading; under mu, a cancelled lctx
			// means the stop already happened or is about to.
			OnStartedLeading: func(lctx context.Context) {
				e.mu.Lock()
				defer e.mu.Unlock()
				if lctx.Err() == nil {
					log.Info("leading: serving ext_proc")
					e.set(lctx, true)
				}
			},
			OnStoppedLeading: func() {
				e.mu.Lock()
				defer e.mu.Unlock()
				switch {
				case e.leading.Load() && ctx.Err() != nil:
					log.Info("stepping down: releasing the lease")
				case e.leading.Load():
					log.Warn("lost the lease: standing by")
				}
				e.set(ctx, false)
			},
			OnNewLeader: func(id string) {
				rec, err := election.Parse(id)
				if err != nil {
					log.Warn("the lease's holder is not a tollgate record", "holder", id, "error", err)
				}
				if rec.Identity != e.cfg.Identity {
					log.Info("standing by", "leader", rec.Identity, "peer", rec.PeerAddr)
				}
				if follower != nil {
					follower.SetLeader(rec)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("kube: leader election: %w", err)
	}
	for ctx.Err() == nil {
		le.Run(ctx) // returns when leadership is lost or ctx ends
	}
	return nil
}

// set switches the Activator and records the state. It runs even after
// ctx ends: stepping down on shutdown must still reach the server.
func (e *Elector) set(ctx context.Context, active bool) {
	e.leading.Store(active)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), activatorTimeout)
	defer cancel()
	if err := e.cfg.Activator.SetActive(ctx, active); err != nil {
		e.cfg.Logger.Error("switching the server failed", "active", active, "error", err)
	}
}
