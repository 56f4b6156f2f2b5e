package extproc

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/peer"
	"github.com/tollgate/tollgate/sched"
)

// deskServer is a server in replica mode, elected, with its peer channel
// on loopback.
func deskServer(t *testing.T) (*Server, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(func(c *Config) {
		c.Replica = &ReplicaConfig{Identity: "scheduler", PeerAddr: l.Addr().String()}
		c.Sched.Priority = sched.DefaultPriorityConfig()
		for p := range c.Sched.Priority.Classes {
			c.Sched.Priority.Classes[p].ReservedFloor, c.Sched.Priority.Classes[p].ReservedPerSlot = 0, 0
		}
	})
	s, err := New(cfg, []fleet.Worker{{ID: "w", Address: "10.0.0.1:8000", MaxRunningRequests: 1}})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(peer.ServerOptions(nil)...)
	peer.Register(g, s.ServePeer)
	runServer(t, s)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	if err := s.SetActive(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	return s, l.Addr().String()
}

// frontStream opens a front's stream and greets the scheduler.
func frontStream(t *testing.T, addr string) peer.ClientStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cs, err := peer.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cs.Close)
	if _, err := greet(ctx, cs, "front"); err != nil {
		t.Fatal(err)
	}
	return cs
}

func upSubmit(id uint64) *peer.Up {
	return &peer.Up{Kind: peer.UpSubmit, ID: id, Request: &sched.Request{Model: "m", ISL: 10}}
}

// ended reads until the stream ends and returns its status.
func ended(t *testing.T, cs peer.ClientStream) *status.Status {
	t.Helper()
	for {
		if _, err := cs.Recv(); err != nil {
			return status.Convert(err)
		}
	}
}

// A front's stream that breaks the protocol ends with the reason; what it
// submitted is released.
func TestServePeer_ProtocolErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		send []*peer.Up
		code codes.Code
		msg  string
	}{
		{"second hello", []*peer.Up{{Kind: peer.UpHello, Front: "again"}}, codes.InvalidArgument, "a second hello"},
		{"duplicate id", []*peer.Up{upSubmit(1), upSubmit(1)}, codes.InvalidArgument, "submitted twice"},
		{"too many", []*peer.Up{upSubmit(1), upSubmit(2), upSubmit(3)}, codes.ResourceExhausted, "more than 2 live requests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, addr := deskServer(t)
			s.desk.maxRequests = 2
			cs := frontStream(t, addr)
			for _, u := range tc.send {
				if err := cs.Send(u); err != nil {
					t.Fatal(err)
				}
			}
			st := ended(t, cs)
			if st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
				t.Fatalf("stream ended with %v, want %v %q", st, tc.code, tc.msg)
			}
			awaitIdle(t, s)
		})
	}
}

// A stream whose first message is not a hello is refused.
func TestServePeer_FirstMessageMustBeHello(t *testing.T) {
	_, addr := deskServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cs, err := peer.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if err := cs.Send(upSubmit(1)); err != nil {
		t.Fatal(err)
	}
	if st := ended(t, cs); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "not a hello") {
		t.Fatalf("stream ended with %v", st)
	}
}

// A replica that is not the scheduler refuses fronts.
func TestServePeer_NotTheScheduler(t *testing.T) {
	s, addr := deskServer(t)
	if err := s.SetActive(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cs, err := peer.Dial(ctx, addr, nil)
	if err == nil {
		defer cs.Close()
		_, err = greet(ctx, cs, "front")
	}
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition {
		t.Fatalf("got %v, want FailedPrecondition", err)
	}
}

// awaitIdle waits until the scheduler holds nothing.
func awaitIdle(t *testing.T, s *Server) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := s.Stats(context.Background())
		if st.InFlight[sched.PriorityDefault] == 0 && st.QueueDepth[sched.PriorityDefault] == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not idle: %v in flight, %v queued", st.InFlight, st.QueueDepth)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// CheckPeerAddr tells this replica's own listener from another one's.
func TestCheckPeerAddr(t *testing.T) {
	s, addr := deskServer(t)
	if err := s.SetActive(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.CheckPeerAddr(ctx); err != nil {
		t.Fatalf("its own address: %v", err)
	}
	other, err := New(testConfig(func(c *Config) { c.Replica = &ReplicaConfig{Identity: "other", PeerAddr: addr} }), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := other.CheckPeerAddr(ctx); err == nil || !strings.Contains(err.Error(), `another replica answered there: tollgate: replica "scheduler" is not the scheduler`) {
		t.Fatalf("another replica's address: %v", err)
	}
}

// A front that reads slowly keeps one list of fronts, the latest; a
// sealed box hands over what is queued, then says so.
func TestOutbox_ReplaceAndSeal(t *testing.T) {
	o := newOutbox[peer.Down]()
	isFronts := func(d peer.Down) bool { return d.Kind == peer.DownFronts }
	o.push(peer.Down{Kind: peer.DownQueued, ID: 1})
	o.replace(isFronts, peer.Down{Kind: peer.DownFronts, Fronts: []string{"a"}})
	o.replace(isFronts, peer.Down{Kind: peer.DownFronts, Fronts: []string{"a", "b"}})
	o.push(peer.Down{Kind: peer.DownQueued, ID: 2})
	o.replace(isFronts, peer.Down{Kind: peer.DownFronts, Fronts: []string{"b"}})
	o.seal()
	batch, sealed, ok := o.take(nil, nil)
	var got []string
	for _, d := range batch {
		got = append(got, fmt.Sprint(d.Kind, d.ID, d.Fronts))
	}
	if want := []string{"queued 1 []", "fronts 0 [b]", "queued 2 []"}; !ok || !sealed || !slices.Equal(got, want) {
		t.Fatalf("took %q (sealed %v, ok %v), want %q sealed", got, sealed, ok, want)
	}
	done := make(chan struct{})
	close(done)
	if _, _, ok := o.take(done, batch); ok {
		t.Fatal("take returned with nothing queued after done closed")
	}
}
