package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/discovery/kube"
	"github.com/tollgate/tollgate/extproc/election"
	"github.com/tollgate/tollgate/extproc/election/etcd"
	"github.com/tollgate/tollgate/extproc/peer"
)

// Values of --leader-elect-backend.
const (
	backendKube = "kube"
	backendEtcd = "etcd"
)

// elector is a leader election backend.
type elector interface {
	Run(ctx context.Context) error
}

// registerReplicaFlags registers the flags of replica mode.
func registerReplicaFlags(fs *flag.FlagSet, d *discoveryOptions) {
	fs.StringVar(&d.backend, "leader-elect-backend", backendKube, "leader election: kube (a coordination.k8s.io Lease) or etcd (an etcd election, as Dynamo deploys it; needs --etcd-endpoints)")
	fs.StringVar(&d.etcdEndpoints, "etcd-endpoints", "", "etcd backend: the etcd endpoints, URL[,URL...] (http://host:2379)")
	fs.StringVar(&d.peerAddr, "peer-addr", "", "with --leader-elect: HOST:PORT other replicas reach this one's peer channel on (normally the pod IP); published while it is the scheduler, served on :PORT. Every replica then serves Envoy")
}

// validateReplicas reports every problem with the replica flags.
func (d *discoveryOptions) validateReplicas() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	switch d.backend {
	case backendKube, backendEtcd:
	default:
		add(fmt.Errorf("--leader-elect-backend: unknown backend %q (want kube or etcd)", d.backend))
	}
	if !d.leaderElect {
		for _, f := range []struct{ name, v string }{{"--peer-addr", d.peerAddr}, {"--etcd-endpoints", d.etcdEndpoints}} {
			if f.v != "" {
				add(fmt.Errorf("%s applies to --leader-elect only", f.name))
			}
		}
		return errors.Join(errs...)
	}
	if d.peerAddr != "" {
		add(flagErr("--peer-addr", election.CheckPeerAddr(d.peerAddr)))
	}
	switch d.backend {
	case backendKube:
		if d.etcdEndpoints != "" {
			add(errors.New("--etcd-endpoints applies to --leader-elect-backend=etcd only"))
		}
		_, err := d.leaderConfig()
		add(err)
	case backendEtcd:
		_, err := d.etcdConfig()
		add(err)
	}
	return errors.Join(errs...)
}

// flagErr prefixes err with the flag's name.
func flagErr(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", name, err)
}

// replicaWarnings are the replica settings that take effect but lose
// something.
func (d *discoveryOptions) replicaWarnings() []string {
	if d.leaderElect && d.peerAddr == "" {
		return []string{"--leader-elect without --peer-addr: only the elected replica serves Envoy, the others are not ready, and a failover answers every queued request 503; set --peer-addr so every replica serves and a failover loses nothing"}
	}
	return nil
}

// identityName is --leader-elect-identity, else the hostname (the pod
// name).
func (d *discoveryOptions) identityName() (string, error) {
	if d.identity != "" {
		return d.identity, nil
	}
	id, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("--leader-elect-identity: no hostname to default to: %w", err)
	}
	return id, nil
}

// etcdConfig resolves the etcd backend's flags; the caller adds the
// follower and logger.
func (d *discoveryOptions) etcdConfig() (etcd.Config, error) {
	id, err := d.identityName()
	if err != nil {
		return etcd.Config{}, err
	}
	var eps []string
	for ep := range strings.SplitSeq(d.etcdEndpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	if len(eps) == 0 {
		return etcd.Config{}, errors.New("--leader-elect-backend=etcd needs --etcd-endpoints URL[,URL...]")
	}
	c := etcd.Config{
		Endpoints: eps, Name: d.leaseName, Record: election.Record{Identity: id, PeerAddr: d.peerAddr},
		LeaseDuration: d.leaseDuration, RetryPeriod: d.retryPeriod,
	}
	return c, c.Validate()
}

// elector builds the --leader-elect-backend elector switching srv.
func (d *discoveryOptions) elector(clients kubeClients, srv *extproc.Server, log *slog.Logger) (elector, error) {
	if d.backend == backendEtcd {
		c, err := d.etcdConfig()
		if err != nil {
			return nil, err
		}
		c.Follower, c.Logger = srv, log
		return etcd.New(c)
	}
	lc, err := d.leaderConfig()
	if err != nil {
		return nil, err
	}
	lc.PeerAddr = d.peerAddr
	lc.Client, lc.Activator, lc.Logger = clients.core, srv, log
	return kube.NewElector(lc)
}

// replicaConfig is replica mode's server configuration: nil unless
// --leader-elect and --peer-addr are both set. The peer channel dials
// with the ext_proc listener's TLS files (mutual TLS with a client CA).
func (o *options) replicaConfig() (*extproc.ReplicaConfig, error) {
	d := &o.discovery
	if !d.leaderElect || d.peerAddr == "" {
		return nil, nil
	}
	id, err := d.identityName()
	if err != nil {
		return nil, err
	}
	_, client, err := peer.TLSConfigs(o.grpcTLSCert, o.grpcTLSKey, o.grpcClientCA)
	if err != nil {
		return nil, fmt.Errorf("peer channel: %w", err)
	}
	return &extproc.ReplicaConfig{Identity: id, PeerAddr: d.peerAddr, ClientTLS: client}, nil
}

// peerListenAddr is where the peer channel listens: every interface, on
// --peer-addr's port.
func (d *discoveryOptions) peerListenAddr() string {
	_, port, _ := net.SplitHostPort(d.peerAddr)
	return ":" + port
}
