package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/election"
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/peer"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/test/envoysim"
	"github.com/tollgate/tollgate/test/memnet"
	"github.com/tollgate/tollgate/test/mockworker"
)

// cluster is tollgate replicas in replica mode, each behind its own
// simulated Envoy, in front of shared mock workers, on one in-memory
// network. The test plays the election: elect makes one replica the
// scheduler and tells every other one where it is.
type cluster struct {
	t    *testing.T
	net  *memnet.Network
	gate *mockworker.Gate
	list []fleet.Worker
	reps []*replica
}

// replica is one tollgate process: its server, its ext_proc and peer
// listeners, and the Envoy in front of it.
type replica struct {
	id   string
	addr string // peer address
	// cut partitions its peer connections (see cutConn).
	cut *partition
	srv *extproc.Server
	sim *envoysim.Sim
	// kill stops it at once, as SIGKILL would: listeners, streams and
	// the dispatcher.
	kill func()
	dead bool
}

func newCluster(t *testing.T, n int, slots uint32, config func(*extproc.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, net: &memnet.Network{}, gate: mockworker.NewGate()}
	wc := mockworker.Config{ID: "w0", Model: model, Speed: 1000, DefaultMaxTokens: 4, Dial: c.net.Dial,
		Hold: func(ctx context.Context, r mockworker.RequestInfo) error { return c.gate.Wait(ctx, r) }}
	w, err := mockworker.New(wc)
	if err != nil {
		t.Fatal(err)
	}
	wl, waddr := c.net.Listen()
	if err := w.Serve(wl, waddr); err != nil {
		t.Fatal(err)
	}
	c.list = []fleet.Worker{{ID: "w0", Address: waddr, MaxRunningRequests: slots, Model: model}}
	for i := range n {
		c.reps = append(c.reps, c.start(fmt.Sprintf("r%d", i), config))
	}
	t.Cleanup(func() {
		c.gate.Open()
		for _, r := range c.reps {
			r.kill()
		}
		if err := w.Close(); err != nil {
			t.Errorf("mockworker: %v", err)
		}
	})
	return c
}

func (c *cluster) start(id string, config func(*extproc.Config)) *replica {
	t := c.t
	pl, paddr := c.net.Listen()
	dial := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return c.net.Dial(ctx, "tcp", addr) })
	cut := &partition{}
	peerDial := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		conn, err := c.net.Dial(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &cutConn{Conn: conn, p: cut}, nil
	})
	cfg := extproc.Config{
		EnvoyMessageTimeout: 5 * time.Second, EnvoyMaxMessageTimeout: 310 * time.Second, EnvoyTimeoutMargin: 100 * time.Millisecond,
		DrainDelay: -1, ShutdownTimeout: 10 * time.Second,
		Replica: &extproc.ReplicaConfig{Identity: id, PeerAddr: paddr, DialOptions: []grpc.DialOption{peerDial}},
	}
	if config != nil {
		config(&cfg)
	}
	srv, err := extproc.New(cfg, c.list)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := extproc.ServerOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, addr := c.net.Listen()
	g := grpc.NewServer(opts...)
	srv.Register(g)
	pg := grpc.NewServer(peer.ServerOptions(nil)...)
	peer.Register(pg, srv.ServePeer)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(ctx) })
	wg.Go(func() { _ = g.Serve(l) })
	wg.Go(func() { _ = pg.Serve(pl) })
	shipped := shippedFilter(t, extprocfilterv3.ProcessingMode_BUFFERED)
	sim, err := envoysim.New(envoysim.Config{
		ExtProcAddr: "passthrough:///" + addr, Mode: processingMode(extprocfilterv3.ProcessingMode_BUFFERED),
		MessageTimeout: 5 * time.Second, MaxMessageTimeout: 310 * time.Second, StatusOnError: http.StatusServiceUnavailable,
		RequestAttributes: shipped.GetRequestAttributes(), RequestChunkSize: 512,
		SendBodyWithoutWaitingForHeaderResponse: shipped.GetSendBodyWithoutWaitingForHeaderResponse(),
		DialOptions:                             []grpc.DialOption{dial}, UpstreamDialer: c.net.Dial,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{id: id, addr: paddr, srv: srv, sim: sim, cut: cut}
	var once sync.Once
	r.kill = func() {
		once.Do(func() {
			r.dead = true
			_ = sim.Close()
			g.Stop()
			pg.Stop()
			cancel()
			wg.Wait()
			srv.Wait()
		})
	}
	return r
}

// elect makes replica i the scheduler: every other live replica stops
// being it first, then learns of i. It returns once the new scheduler's
// settle window is over.
func (c *cluster) elect(i int) {
	c.t.Helper()
	ctx := context.Background()
	for j, r := range c.reps {
		if j != i && !r.dead {
			if err := r.srv.SetActive(ctx, false); err != nil {
				c.t.Fatal(err)
			}
		}
	}
	// An election takes a while: the fronts hear the old scheduler's last
	// word before another replica wins.
	synctest.Wait()
	if err := c.reps[i].srv.SetActive(ctx, true); err != nil {
		c.t.Fatal(err)
	}
	rec := election.Record{Identity: c.reps[i].id, PeerAddr: c.reps[i].addr}
	for _, r := range c.reps {
		if !r.dead {
			r.srv.SetLeader(rec)
		}
	}
	// The new scheduler holds submits while the fronts re-register.
	time.Sleep(extproc.DefaultSettle)
}

// send sends a request through replica i's Envoy in the background.
func (c *cluster) send(i int, req envoysim.Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		r, err := c.reps[i].sim.Do(context.Background(), req)
		ch <- result{r, err}
	}()
	return ch
}

// stats waits until every goroutine of the bubble waits, then returns
// replica i's scheduler state.
func (c *cluster) stats(i int) sched.Stats {
	c.t.Helper()
	synctest.Wait()
	st, ok := c.reps[i].srv.Stats(context.Background())
	if !ok {
		c.t.Fatalf("no stats from %s", c.reps[i].id)
	}
	return st
}

// want checks the scheduler's in-flight and queued counts.
func (c *cluster) want(what string, i int, inFlight, queued uint32) {
	c.t.Helper()
	st := c.stats(i)
	if st.InFlight[sched.PriorityDefault] != inFlight || st.QueueDepth[sched.PriorityDefault] != queued {
		c.t.Fatalf("%s: %s has %d in flight and %d queued, want %d and %d", what, c.reps[i].id,
			st.InFlight[sched.PriorityDefault], st.QueueDepth[sched.PriorityDefault], inFlight, queued)
	}
}

// ok waits for every result and checks each is a 200.
func (c *cluster) ok(chs ...<-chan result) {
	c.t.Helper()
	for i, ch := range chs {
		r := <-ch
		if r.err != nil || r.r.Status != http.StatusOK {
			c.t.Errorf("request %d: %v, status %d", i, r.err, status(r))
		}
	}
}

func status(r result) int {
	if r.r == nil {
		return 0
	}
	return r.r.Status
}

// priorityOn turns SMG's slot gate on, so that the worker's slots queue
// requests at the scheduler.
func priorityOn(c *extproc.Config) { c.Sched.Priority = priorityConfig(time.Minute) }

// One scheduler serves every front: a request through one replica holds
// the worker's only slot, and a request through the other waits for it.
func TestReplicas_OneSchedulerForAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 2, 1, priorityOn)
		c.elect(0)
		first := c.send(1, chat("through the front"))
		c.want("the front's request", 0, 1, 0)
		second := c.send(0, chat("through the scheduler's own replica"))
		c.want("the scheduler's own", 0, 1, 1)
		if st := c.stats(1); st.InFlight[sched.PriorityDefault] != 0 {
			t.Fatalf("the front schedules for itself: %+v", st.InFlight)
		}
		c.gate.Open()
		c.ok(first, second)
		c.want("idle", 0, 0, 0)
	})
}

// The scheduler dies (as with SIGKILL) with a request in flight and a
// backlog queued through the other fronts. The next scheduler is rebuilt
// from what the fronts re-register: the in-flight request keeps the slot,
// the backlog waits for it, and every request succeeds.
func TestReplicas_SchedulerKilled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, 1, priorityOn)
		c.elect(0)
		running := c.send(1, chat("running"))
		c.want("running", 0, 1, 0)
		var backlog []<-chan result
		for i := range 4 {
			backlog = append(backlog, c.send(1+i%2, chat(fmt.Sprintf("queued %d", i))))
		}
		c.want("backlog", 0, 1, 4)
		c.reps[0].kill()
		c.elect(1)
		c.want("rebuilt from the fronts", 1, 1, 4)
		c.gate.Open()
		c.ok(append(backlog, running)...)
		c.want("idle", 1, 0, 0)
	})
}

// A graceful handover (SIGTERM): the scheduler steps down before it dies,
// and its own queued requests move to the next scheduler too.
func TestReplicas_Handover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 2, 1, priorityOn)
		c.elect(0)
		running := c.send(0, chat("running"))
		c.want("running", 0, 1, 0)
		queued := []<-chan result{c.send(0, chat("queued at the scheduler")), c.send(1, chat("queued at the front"))}
		c.want("backlog", 0, 1, 2)
		c.elect(1)
		c.want("handed over", 1, 1, 2)
		c.want("the old scheduler holds nothing", 0, 0, 0)
		c.gate.Open()
		c.ok(append(queued, running)...)
		c.want("idle", 1, 0, 0)
	})
}

// A front dies: its streams die with it, and the scheduler releases its
// booking and its queued request, so the slot serves the next one.
func TestReplicas_FrontKilled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 2, 1, priorityOn)
		c.elect(0)
		lost := []<-chan result{c.send(1, chat("running at the front")), c.send(1, chat("queued at the front"))}
		c.want("the front's requests", 0, 1, 1)
		c.reps[1].kill()
		for _, ch := range lost {
			<-ch
		}
		c.want("released", 0, 0, 0)
		next := c.send(0, chat("next"))
		c.gate.Open()
		c.ok(next)
	})
}

// partition cuts the peer connections a replica dials without closing
// them, as a network that drops packets would.
type partition struct {
	mu  sync.Mutex
	cut bool
}

func (p *partition) set(cut bool) {
	p.mu.Lock()
	p.cut = cut
	p.mu.Unlock()
}

func (p *partition) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// cutConn drops what is written and what is read while its partition is
// cut.
type cutConn struct {
	net.Conn
	p *partition
}

func (c *cutConn) Write(b []byte) (int, error) {
	if c.p.isCut() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *cutConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if err != nil || !c.p.isCut() {
			return n, err
		}
	}
}

// A front cut off from the scheduler: the scheduler notices within its
// keepalive and releases the front's booking and queued request, so its
// capacity serves others meanwhile; once the partition heals the front
// links again and re-registers both, and both succeed.
func TestReplicas_FrontPartitioned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 2, 1, priorityOn)
		c.elect(0)
		running := c.send(1, chat("running at the front"))
		c.want("running", 0, 1, 0)
		queued := c.send(1, chat("queued at the front"))
		c.want("queued", 0, 1, 1)
		c.reps[1].cut.set(true)
		time.Sleep(15 * time.Second) // past the scheduler's keepalive: ping every 5 s, 5 s to answer
		c.want("the partitioned front's requests released", 0, 0, 0)
		if c.reps[1].srv.Ready() {
			t.Error("a front that cannot reach the scheduler is still ready")
		}
		c.reps[1].cut.set(false)
		time.Sleep(2 * time.Second) // the front's next dial
		c.want("re-registered after the partition", 0, 1, 1)
		if !c.reps[1].srv.Ready() {
			t.Error("the front is not ready again")
		}
		c.gate.Open()
		c.ok(running, queued)
		c.want("idle", 0, 0, 0)
	})
}
