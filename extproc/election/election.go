// Package election holds what the leader-election backends share: the
// record a leader publishes (its identity and the address it serves peers
// on) and the interface a backend switches. The backends are the
// Kubernetes Lease (extproc/discovery/kube) and etcd (election/etcd).
package election

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Record is what the elected replica publishes in the election record
// (the Lease's holderIdentity, the etcd key's value): its identity and the
// address it serves peers on.
type Record struct {
	// Identity is the replica's name (normally the pod name). It never
	// contains '@'.
	Identity string
	// PeerAddr is HOST:PORT where the replica serves the peer channel;
	// empty for a replica that publishes none (an older release).
	PeerAddr string
}

// Defaults both backends share: how long the others wait after the
// leader's last renewal (the Lease's duration, the etcd lease's TTL), and
// the wait between attempts. client-go's usual values.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// MaxRecordLen bounds an encoded record read from the store: a longer
// value is not a record this code wrote.
const MaxRecordLen = 512

// String encodes r as IDENTITY@HOST:PORT, or IDENTITY alone without a
// peer address.
func (r Record) String() string {
	if r.PeerAddr == "" {
		return r.Identity
	}
	return r.Identity + "@" + r.PeerAddr
}

// Parse decodes a record written by String. A value without '@' is a bare
// identity (no peer address).
func Parse(s string) (Record, error) {
	if len(s) > MaxRecordLen {
		return Record{}, fmt.Errorf("election: record of %d bytes exceeds %d", len(s), MaxRecordLen)
	}
	id, addr, found := strings.Cut(s, "@")
	if id == "" {
		return Record{}, fmt.Errorf("election: record %q has no identity", s)
	}
	if !found {
		return Record{Identity: id}, nil
	}
	if err := CheckPeerAddr(addr); err != nil {
		return Record{}, fmt.Errorf("election: record %q: %w", s, err)
	}
	return Record{Identity: id, PeerAddr: addr}, nil
}

// CheckIdentity reports an identity that cannot be published.
func CheckIdentity(id string) error {
	switch {
	case id == "":
		return errors.New("identity is empty")
	case strings.ContainsAny(id, "@ \t\n"):
		return fmt.Errorf("identity %q contains '@' or white space", id)
	case len(id) > MaxRecordLen/2:
		return fmt.Errorf("identity %q is longer than %d bytes", id, MaxRecordLen/2)
	}
	return nil
}

// CheckPeerAddr reports a peer address that is not HOST:PORT with a
// host and a port in 1..65535. A wildcard host (0.0.0.0, ::) is refused:
// other replicas could not dial it.
func CheckPeerAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("peer address %q: %w", addr, err)
	}
	if host == "" {
		return fmt.Errorf("peer address %q has no host", addr)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("peer address %q: %s is not an address other replicas can dial", addr, host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("peer address %q: port must be 1..65535", addr)
	}
	if len(addr) > MaxRecordLen/2 {
		return fmt.Errorf("peer address %q is longer than %d bytes", addr, MaxRecordLen/2)
	}
	return nil
}

// Follower is what a backend switches: the ext_proc server.
//
// SetActive(ctx, true) makes this replica the scheduler; false makes it a
// front that follows another scheduler. SetLeader tells it the current
// leader's record whenever it changes (the empty Record when none is
// known). Both are safe from any goroutine and must not block for long.
type Follower interface {
	SetActive(ctx context.Context, active bool) error
	SetLeader(r Record)
}
