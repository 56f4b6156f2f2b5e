package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/peer"
)

// runServe parses the serving flags and serves until ctx ends (SIGTERM or
// SIGINT), then drains gracefully.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o options
	fs := newFlagSet("serve", &o)
	if err := parseFlags(fs, "serve", args, stdout, stderr); err != nil {
		return err
	}
	level, err := parseLevel(o.logLevel)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	st, err := o.build(log)
	if err != nil {
		return err
	}
	for _, w := range st.warnings {
		log.Warn(w)
	}
	defer startGCFloor(o.gcHeapFloor, log)()
	return serve(ctx, &o, st, log, nil, nil)
}

// listening, when non-nil, receives the bound gRPC and metrics addresses
// once both listeners are up (tests use it with ":0" addresses).
type listening func(grpcAddr, metricsAddr string)

// listenFunc opens the gRPC and metrics listeners. Nil means TCP; tests give
// in-memory listeners to run serve on testing/synctest's fake time.
type listenFunc func(ctx context.Context, network, address string) (net.Listener, error)

// serve runs the server described by st until ctx ends, then drains.
func serve(ctx context.Context, o *options, st *setup, log *slog.Logger, up listening, listen listenFunc) error {
	kv, err := o.kvEvents.manager(int(st.cfg.Sched.BlockSize), log)
	if err != nil {
		return err
	}
	// runCtx runs the background work (the KV-event manager, the server's
	// loops, the watchers, discovery) until the drain is over; wg waits
	// for it.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	var wg sync.WaitGroup
	// abort stops the background work started so far and returns err.
	abort := func(err error) error {
		stopRun()
		wg.Wait()
		return err
	}
	var opts []extproc.Option
	if kv != nil {
		opts = append(opts, extproc.WithKVEvents(kv))
		// Run subscribes to the workers the server hands over, from now
		// on; once runCtx ends it closes every connection (and bind
		// mode's socket) at once, whatever the engines do, and returns.
		wg.Go(func() { _ = kv.Run(runCtx) })
	}
	st.cfg.Build = currentBuild().forServer()
	srv, err := extproc.New(st.cfg, st.workers, opts...)
	if err != nil {
		return abort(o.explainReservations(err))
	}
	gopts, err := extproc.ServerOptions(st.cfg)
	if err != nil {
		return abort(err)
	}
	gs := grpc.NewServer(gopts...)
	srv.Register(gs)

	if listen == nil {
		var lc net.ListenConfig
		listen = lc.Listen
	}
	gl, err := listen(ctx, "tcp", o.grpcAddr)
	if err != nil {
		return abort(fmt.Errorf("grpc listener: %w", err))
	}
	ml, err := listen(ctx, "tcp", o.metricsAddr)
	if err != nil {
		_ = gl.Close()
		return abort(fmt.Errorf("metrics listener: %w", err))
	}
	hs := &http.Server{Handler: srv.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second}
	pgs, pl, err := peerServer(ctx, o, srv, listen)
	if err != nil {
		_, _ = gl.Close(), ml.Close()
		return abort(err)
	}

	wg.Go(func() { _ = srv.Run(runCtx) })
	errc := make(chan error, 2)
	wg.Go(func() { errc <- ignoreClosed(gs.Serve(gl)) })
	wg.Go(func() { errc <- ignoreClosed(hs.Serve(ml)) })
	if pgs != nil {
		wg.Go(func() { _ = pgs.Serve(pl) })
	}

	if o.workersFile != "" {
		w := fleet.NewFileWatcher(o.workersFile, srv.SetWorkers, log, 0)
		wg.Go(func() { _ = w.Run(runCtx) })
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		wg.Go(func() {
			for {
				select {
				case <-runCtx.Done():
					return
				case <-hup:
					if err := w.Reload(); err == nil {
						log.Info("workers file reloaded", "path", o.workersFile)
					}
				}
			}
		})
	}
	if pgs != nil {
		// Before campaigning: an elected replica that other replicas
		// cannot reach would stop every front.
		cctx, cancel := context.WithTimeout(ctx, peerCheckTimeout)
		err := srv.CheckPeerAddr(cctx)
		cancel()
		if err != nil {
			stopRun()
			_ = hs.Close()
			gs.Stop()
			pgs.Stop()
			wg.Wait()
			return err
		}
	}
	handOver, err := startDiscovery(runCtx, o, srv, log, &wg)
	if err != nil {
		stopRun()
		_ = hs.Close()
		gs.Stop()
		if pgs != nil {
			pgs.Stop()
		}
		wg.Wait()
		return err
	}
	log.Info("serving", "grpc", gl.Addr().String(), "metrics", ml.Addr().String(), "workers", len(st.workers))
	if up != nil {
		up(gl.Addr().String(), ml.Addr().String())
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	log.Info("shutting down")
	// Everything below fits in --drain-delay + --shutdown-timeout, which the
	// chart's termination grace period is sized from: Drain waits for the
	// streams until then, and the listeners get what is left.
	deadline := time.Now().Add(max(st.cfg.DrainDelay, 0) + st.cfg.ShutdownTimeout)
	drainCtx, cancel := context.WithDeadline(context.Background(), deadline)
	// The scheduler's role goes first, so another replica takes over
	// while this one drains.
	handOver(drainCtx)
	if err := srv.Drain(drainCtx); err != nil {
		log.Warn("drain incomplete", "error", err)
	}
	stopGRPC(gs, time.Until(deadline))
	if pgs != nil {
		pgs.Stop()
	}
	if err := hs.Shutdown(drainCtx); err != nil {
		_ = hs.Close()
	}
	cancel()
	stopRun()
	// The KV-event manager (at once), the watchers and discovery end with
	// runCtx. Past the budget plus a fixed margin the process exits
	// whatever they wait on: no peer keeps it alive.
	stopped := make(chan struct{})
	go func() {
		srv.Wait()
		wg.Wait()
		close(stopped)
	}()
	t := time.NewTimer(time.Until(deadline) + exitMargin)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		log.Error("shutdown: background work still running past the shutdown budget; exiting anyway", "margin", exitMargin)
	}
	return serveErr
}

// peerServer opens the peer channel's listener and server in replica
// mode (nil, nil otherwise): other replicas reach the scheduler there. It
// uses the ext_proc listener's TLS files; with a client CA, only replicas
// holding a certificate from it get in.
func peerServer(ctx context.Context, o *options, srv *extproc.Server, listen listenFunc) (*grpc.Server, net.Listener, error) {
	if !o.discovery.leaderElect || o.discovery.peerAddr == "" {
		return nil, nil, nil
	}
	tc, _, err := peer.TLSConfigs(o.grpcTLSCert, o.grpcTLSKey, o.grpcClientCA)
	if err != nil {
		return nil, nil, fmt.Errorf("peer channel: %w", err)
	}
	l, err := listen(ctx, "tcp", o.discovery.peerListenAddr())
	if err != nil {
		return nil, nil, fmt.Errorf("peer listener: %w", err)
	}
	g := grpc.NewServer(peer.ServerOptions(tc)...)
	peer.Register(g, srv.ServePeer)
	return g, l, nil
}

// peerCheckTimeout bounds the check that --peer-addr reaches this replica.
const peerCheckTimeout = 10 * time.Second

// exitMargin is how long past --drain-delay + --shutdown-timeout the
// background work (watchers, discovery, engine adapters) may take to stop.
const exitMargin = time.Second

// stopGRPC stops gs gracefully, forcing it after timeout (at once when
// timeout is not positive).
func stopGRPC(gs *grpc.Server, timeout time.Duration) {
	if timeout <= 0 {
		gs.Stop()
		return
	}
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		gs.Stop()
		<-done
	}
}

func ignoreClosed(err error) error {
	if err == nil || errors.Is(err, grpc.ErrServerStopped) || errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
