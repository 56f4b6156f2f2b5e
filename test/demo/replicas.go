package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/election"
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/peer"
	"github.com/tollgate/tollgate/test/envoysim"
)

// replicaSet is tollgate replicas in replica mode (extproc.Config.Replica)
// in front of the same workers, each behind its own simulated Envoy, which
// talks to that replica only. Every replica is a front; one, elected, is
// the scheduler for all of them over the peer channel. The demo plays the
// election that the Kubernetes Lease or etcd plays in a deployment
// (--leader-elect): elect and handover call SetActive and SetLeader as the
// election backends do. Only the goroutine that drives the scenario uses
// it.
type replicaSet struct {
	spec serverSpec
	log  *slog.Logger
	// drainDelay is every replica's Config.DrainDelay; 0 keeps the spec's
	// (none).
	drainDelay time.Duration
	workers    []fleet.Worker
	// reps holds each slot's replica, nil while the slot's is down.
	reps []*replica
	// leader is the scheduler's slot, -1 before the first election.
	leader int
	// settled is when the current scheduler's settle window ends at the
	// latest.
	settled time.Time
}

// replica is one tollgate process of a replicaSet: the server, its
// ext_proc and peer-channel gRPC servers on 127.0.0.1, and the simulated
// Envoy in front of it.
type replica struct {
	id string
	// rec is what the election publishes while it is the scheduler.
	rec     election.Record
	srv     *extproc.Server
	gs, pg  *grpc.Server
	sim     *envoysim.Sim
	stopRun context.CancelFunc
	wg      sync.WaitGroup
}

// replicaID is slot i's identity; the replica that replaces it keeps it,
// as a StatefulSet's pod does.
func replicaID(i int) string { return fmt.Sprintf("tollgate-%d", i) }

// startReplicaStack starts the workers ws describes and n tollgate replicas
// in replica mode configured by spec, elects slot leader the scheduler and
// returns once every replica reaches it and its settle window is over. On
// error everything started is stopped again.
func startReplicaStack(ctx context.Context, spec serverSpec, ws workerSpec, speed float64, log *slog.Logger,
	n, leader int, drainDelay time.Duration,
) (st *stack, err error) {
	st = &stack{}
	defer func() {
		if err != nil {
			st.close()
			st = nil
		}
	}()
	workers, err := st.startWorkers(ctx, ws, speed, log)
	if err != nil {
		return st, err
	}
	st.replicas = &replicaSet{spec: spec, log: log, drainDelay: drainDelay, workers: workers, reps: make([]*replica, n), leader: -1}
	for i := range n {
		if err := st.replicas.start(ctx, i); err != nil {
			return st, err
		}
	}
	if err := st.replicas.elect(ctx, leader); err != nil {
		return st, err
	}
	if err := st.replicas.waitLinked(ctx); err != nil {
		return st, err
	}
	return st, sleepFor(ctx, time.Until(st.replicas.settled))
}

// start starts slot i's replica and tells it the scheduler, if one is
// elected. Like a new pod, it has a new address and the slot's identity.
func (rs *replicaSet) start(ctx context.Context, i int) error {
	// Each replica builds its own configuration, as its process would:
	// no scheduler shares another's tie-breaker.
	cfg, err := rs.spec.build(rs.log)
	if err != nil {
		return err
	}
	if rs.drainDelay != 0 {
		cfg.DrainDelay = rs.drainDelay
	}
	cfg.Logger = slog.New(quietHandovers{rs.log.Handler()})
	var lc net.ListenConfig
	gl, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: grpc listener: %w", err)
	}
	pl, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		_ = gl.Close()
		return fmt.Errorf("demo: peer listener: %w", err)
	}
	r := &replica{id: replicaID(i), rec: election.Record{Identity: replicaID(i), PeerAddr: pl.Addr().String()}}
	cfg.Replica = &extproc.ReplicaConfig{Identity: r.rec.Identity, PeerAddr: r.rec.PeerAddr}
	gopts, err := extproc.ServerOptions(cfg)
	if err == nil {
		r.srv, err = extproc.New(cfg, rs.workers)
	}
	if err != nil {
		_, _ = gl.Close(), pl.Close()
		return err
	}
	r.gs = grpc.NewServer(gopts...)
	r.srv.Register(r.gs)
	r.pg = grpc.NewServer(peer.ServerOptions(nil)...)
	peer.Register(r.pg, r.srv.ServePeer)
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	r.stopRun = stopRun
	r.wg.Go(func() { _ = r.srv.Run(runCtx) })
	r.wg.Go(func() { _ = r.gs.Serve(gl) })
	r.wg.Go(func() { _ = r.pg.Serve(pl) })
	if r.sim, err = envoysim.New(gatewayConfig(gl.Addr().String())); err != nil {
		r.stop()
		return err
	}
	rs.reps[i] = r
	if rs.leader >= 0 {
		r.srv.SetLeader(rs.reps[rs.leader].rec)
	}
	return nil
}

// elect makes slot i's replica the scheduler where none is yet, as the
// first election does: it becomes the scheduler, then every replica learns
// where it is.
func (rs *replicaSet) elect(ctx context.Context, i int) error {
	if rs.leader >= 0 {
		return fmt.Errorf("demo: %s is the scheduler already; hand over instead", rs.reps[rs.leader].id)
	}
	return rs.takeOver(ctx, i)
}

// handover moves the scheduler to slot i, as the election does when the
// scheduler resigns on SIGTERM: the old scheduler steps down (its last
// word to each front names the fronts to wait for, then every front's
// peer stream ends and the fronts hold their requests), slot i becomes the
// scheduler once the fronts have heard it (an election takes that long at
// least), then every replica learns where it is and re-registers its
// requests there.
func (rs *replicaSet) handover(ctx context.Context, i int) error {
	if rs.leader < 0 || rs.leader == i {
		return fmt.Errorf("demo: no handover to slot %d (scheduler: slot %d)", i, rs.leader)
	}
	if err := rs.reps[rs.leader].srv.SetActive(ctx, false); err != nil {
		return err
	}
	// A front that lost its link has read the stream to its end.
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for _, r := range rs.reps {
		for r != nil && r.srv.Ready() && wctx.Err() == nil {
			_ = sleepFor(wctx, time.Millisecond)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return rs.takeOver(ctx, i)
}

// takeOver makes slot i the scheduler and tells every replica.
func (rs *replicaSet) takeOver(ctx context.Context, i int) error {
	r := rs.reps[i]
	if err := r.srv.SetActive(ctx, true); err != nil {
		return err
	}
	// The new scheduler holds submits until the fronts it knows have
	// re-registered, at most this long (the replicas' Settle is the
	// default).
	rs.settled = time.Now().Add(extproc.DefaultSettle)
	rs.leader = i
	for _, o := range rs.reps {
		if o != nil {
			o.srv.SetLeader(r.rec)
		}
	}
	return nil
}

// waitLinked waits until every replica up reaches the scheduler and is
// not draining (Server.Ready), at most 10 seconds.
func (rs *replicaSet) waitLinked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, r := range rs.reps {
		for r != nil && !r.srv.Ready() {
			if err := sleepFor(ctx, 2*time.Millisecond); err != nil {
				return fmt.Errorf("demo: %s did not reach the scheduler: %w", r.id, err)
			}
		}
	}
	return nil
}

// up returns the replicas up, by slot.
func (rs *replicaSet) up() []*replica {
	var out []*replica
	for _, r := range rs.reps {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// remove stops slot i's replica and empties the slot. The caller has
// handed the scheduler over and drained it.
func (rs *replicaSet) remove(i int) {
	rs.reps[i].stop()
	rs.reps[i] = nil
}

// closeEnvoys closes every replica's simulated Envoy: their streams end.
func (rs *replicaSet) closeEnvoys() {
	for _, r := range rs.reps {
		if r != nil && r.sim != nil {
			_ = r.sim.Close()
		}
	}
}

// stop stops every replica, the scheduler last, so that no front loses
// it; closeEnvoys ended their streams.
func (rs *replicaSet) stop() {
	for i, r := range rs.reps {
		if r != nil && i != rs.leader {
			r.stop()
			rs.reps[i] = nil
		}
	}
	if rs.leader >= 0 && rs.reps[rs.leader] != nil {
		rs.reps[rs.leader].stop()
		rs.reps[rs.leader] = nil
	}
}

// stop stops the replica as its process would end: its Envoy goes, then
// the gRPC servers, then Run (its link to the scheduler closes and the
// scheduler releases what it still held of this front) and the goroutines
// that hand notices to streams.
func (r *replica) stop() {
	if r.sim != nil {
		_ = r.sim.Close()
	}
	r.gs.Stop()
	r.pg.Stop()
	r.stopRun()
	r.wg.Wait()
	r.srv.Wait()
}

// drainAll drains every replica up at once (Server.Drain): it returns once
// no stream is open on any, at most 10 seconds.
func (rs *replicaSet) drainAll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	up := rs.up()
	errs := make([]error, len(up))
	var wg sync.WaitGroup
	for i, r := range up {
		wg.Go(func() { errs[i] = r.srv.Drain(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// handoverWarnings are the warnings every front logs at a handover: its
// peer stream to the old scheduler ended, and the old scheduler refuses
// it until the election names the next one.
var handoverWarnings = []string{"lost the scheduler", "cannot reach the scheduler; retrying"}

// quietHandovers logs handoverWarnings at Info. The demo hands the
// scheduler over on purpose, and its tables report what the fronts saw;
// every other record passes unchanged.
type quietHandovers struct{ slog.Handler }

func (h quietHandovers) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && slices.Contains(handoverWarnings, r.Message) {
		r.Level = slog.LevelInfo
		if !h.Enabled(ctx, r.Level) {
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietHandovers) WithAttrs(as []slog.Attr) slog.Handler {
	return quietHandovers{h.Handler.WithAttrs(as)}
}

func (h quietHandovers) WithGroup(name string) slog.Handler {
	return quietHandovers{h.Handler.WithGroup(name)}
}
