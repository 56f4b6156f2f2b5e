package extproc

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/extproc/election"
	"github.com/tollgate/tollgate/sched"
)

// ReplicaConfig runs a server as one of several replicas. Every replica
// is a front: it serves Envoy's streams, parses, tokenizes, prices and
// holds the streams. One replica at a time, elected, is the scheduler: it
// runs the scheduling core for every front, which reach it over the peer
// channel (extproc/peer). The requests belong to the fronts, so a new
// scheduler is rebuilt from what they re-register: nothing waiting is
// lost when the scheduler changes.
type ReplicaConfig struct {
	// Identity is this replica's name in the election record and in the
	// scheduler's logs (normally the pod name).
	Identity string
	// PeerAddr is HOST:PORT where this replica serves the peer channel,
	// published in the election record while it is the scheduler.
	PeerAddr string
	// ClientTLS dials the scheduler's peer channel; nil dials without TLS.
	ClientTLS *tls.Config
	// DialOptions are added to the peer channel's dial (tests use an
	// in-memory network).
	DialOptions []grpc.DialOption
	// Settle is how long a new scheduler holds the submits it gets while
	// the fronts re-register, so that queued work meets the load already
	// running; 0 means DefaultSettle.
	Settle time.Duration
}

// DefaultSettle is ReplicaConfig.Settle's default: the fronts learn of a
// new scheduler from the election (an etcd watch at once, a Lease on each
// follower's next retry) and re-register within milliseconds of it.
const DefaultSettle = 300 * time.Millisecond

// Validate reports every problem, joined.
func (c *ReplicaConfig) Validate() error {
	var errs []error
	if err := election.CheckIdentity(c.Identity); err != nil {
		errs = append(errs, fmt.Errorf("extproc: replica: %w", err))
	}
	if err := election.CheckPeerAddr(c.PeerAddr); err != nil {
		errs = append(errs, fmt.Errorf("extproc: replica: %w", err))
	}
	if c.Settle < 0 {
		errs = append(errs, fmt.Errorf("extproc: replica: settle %v is negative", c.Settle))
	}
	return errors.Join(errs...)
}

// replicaMetrics describe this replica's part: its link to the scheduler
// as a front, and the fronts it serves as the scheduler.
type replicaMetrics struct {
	linked       prometheus.Gauge
	scheduler    *prometheus.GaugeVec
	handovers    prometheus.Counter
	pause        prometheus.Histogram
	reregistered *prometheus.CounterVec
	dialFailures prometheus.Counter
	fronts       prometheus.Gauge

	// mu guards current, the identity the scheduler series names.
	mu      sync.Mutex
	current string
}

func newReplicaMetrics(reg prometheus.Registerer) *replicaMetrics {
	m := &replicaMetrics{
		linked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_peer_linked", Help: "1 while this front reaches a scheduler (its own dispatcher or the elected replica's), 0 while it holds its requests for the next one.",
		}),
		scheduler: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_peer_scheduler", Help: "1 for the replica this front last linked to as its scheduler (one series at a time).",
		}, []string{"identity"}),
		handovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_peer_links_total", Help: "Times this front linked to a scheduler: the first link and every handover after it.",
		}),
		pause: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_peer_admission_pause_seconds",
			Help:    "Time this front had no scheduler, from losing one link to the next: its admission pause at a handover.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60},
		}),
		reregistered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_peer_reregistered_requests_total", Help: "Requests this front re-registered with a new scheduler, by state (queued, in_flight).",
		}, []string{"state"}),
		dialFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_peer_dial_failures_total", Help: "Failed attempts to reach the elected scheduler's peer channel.",
		}),
		fronts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_peer_fronts", Help: "Other replicas' peer streams this replica serves as the scheduler.",
		}),
	}
	reg.MustRegister(m.linked, m.scheduler, m.handovers, m.pause, m.reregistered, m.dialFailures, m.fronts)
	return m
}

// setScheduler moves the scheduler series to identity.
func (m *replicaMetrics) setScheduler(identity string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.current != "" {
		m.scheduler.DeleteLabelValues(m.current)
	}
	m.current = identity
	m.scheduler.WithLabelValues(identity).Set(1)
}

// replicaMode sets the server up as a replica: the relay carries every
// stream's scheduling events, the desk serves other fronts while this
// replica is the scheduler, and the dispatcher starts each term afresh.
func (s *Server) replicaMode(rc *ReplicaConfig) {
	s.replica = newReplicaMetrics(s.metrics.reg)
	s.relay = newRelay(s.log.With("component", "relay"), rc, s.replica)
	s.relay.local = s.localLink
	s.relay.changed = func() { s.updateHealth(s.disp.serving()) }
	s.desk = newPeerDesk(s, rc.Identity)
	s.disp.fresh = s.freshScheduler
	s.disp.settle = cmp.Or(rc.Settle, DefaultSettle)
	s.disp.state.standby = true
	s.disp.publish()
}

// freshScheduler builds an empty scheduler over ws for a new term. The
// warm start is off: the fronts re-register the exact load.
func (s *Server) freshScheduler(ws []sched.Worker) (scheduler, error) {
	sc := s.cfg.Sched
	now := time.Now()
	sc.Start = now
	sc.Engine.WarmStart = false
	sch, err := sched.New(sc, ws)
	if err == nil {
		return sch, nil
	}
	// Reservations past this set's capacity: SetWorkers takes any set.
	sch, err2 := sched.New(sc, nil)
	if err2 != nil {
		return nil, errors.Join(err, err2)
	}
	sch.SetWorkers(now, ws)
	return sch, nil
}

// setReplicaActive starts or ends this replica's term as the scheduler.
// Becoming it: a fresh scheduler, then the desk opens to other fronts and
// this front links to its own dispatcher. Ending it: the desk closes
// (every front's stream ends and releases its requests), this front's
// link closes, and the scheduler is dropped; the fronts re-register with
// the next scheduler.
func (s *Server) setReplicaActive(ctx context.Context, active bool) error {
	if active {
		ev := &event{kind: evActive, active: true, fronts: s.relay.knownFronts()}
		if err := s.control(ctx, ev); err != nil {
			return err
		}
		if err := s.desk.setActive(ctx, true); err != nil {
			return err
		}
		s.relay.setSelf(true)
		return nil
	}
	err := s.desk.setActive(ctx, false)
	s.relay.setSelf(false)
	if err2 := s.control(ctx, &event{kind: evActive, active: false}); err2 != nil {
		err = errors.Join(err, err2)
	}
	return err
}

// SetLeader tells a replica which replica the election chose (the empty
// Record when none is known): a front links to its peer address. It does
// nothing outside replica mode.
func (s *Server) SetLeader(r election.Record) {
	if s.relay == nil {
		return
	}
	s.log.Info("scheduler elected", "identity", r.Identity, "peer", r.PeerAddr)
	s.relay.setLeader(r)
}

var _ election.Follower = (*Server)(nil)
