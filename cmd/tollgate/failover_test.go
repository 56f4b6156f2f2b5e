package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"

	"github.com/tollgate/tollgate/test/apiserver"
	"github.com/tollgate/tollgate/test/envoysim"
	"github.com/tollgate/tollgate/test/etcdserver"
	"github.com/tollgate/tollgate/test/loopback"
	"github.com/tollgate/tollgate/test/mockworker"
	"github.com/tollgate/tollgate/test/poll"
	"github.com/tollgate/tollgate/test/testbin"
)

// asMain, set in a child's environment, makes the test binary run main:
// the failover tests run tollgate replicas as real processes, to kill them.
const asMain = "TOLLGATE_TEST_RUN_MAIN"

// replicaProc is one tollgate replica running as a child process.
type replicaProc struct {
	id                  string
	grpc, metrics, peer string
	cmd                 *exec.Cmd
	done                chan struct{}
	sim                 *envoysim.Sim
}

// fleetTest is a failover test's world: one held mock worker with two
// slots, a workers file, a priority config without reservations, and the
// election backend's flags.
type fleetTest struct {
	t        *testing.T
	dir      string
	gate     *mockworker.Gate
	election []string
	reps     []*replicaProc
}

func newFleetTest(t *testing.T, election []string) *fleetTest {
	t.Helper()
	f := &fleetTest{t: t, dir: t.TempDir(), gate: mockworker.NewGate(), election: election}
	w := mockworker.Start(t, mockworker.Config{ID: "w0", Model: "llama", Speed: 1000, DefaultMaxTokens: 4,
		Hold: func(ctx context.Context, r mockworker.RequestInfo) error { return f.gate.Wait(ctx, r) }})
	t.Cleanup(f.gate.Open)
	f.write("workers.yaml", fmt.Sprintf("workers:\n  - id: w0\n    address: %s\n    model: llama\n    max_running_requests: 2\n", w.Addr()))
	var classes strings.Builder
	classes.WriteString("classes:\n")
	for _, c := range []string{"system", "interactive", "default", "bulk"} {
		fmt.Fprintf(&classes, "  %s:\n    reserved_floor: 0\n    reserved_per_slot: 0\n    queue_size: 100\n    queue_timeout_secs: 120\n    starvation_threshold_secs: 60\n    can_preempt: false\n", c)
	}
	f.write("priority.yaml", classes.String())
	return f
}

func (f *fleetTest) write(name, content string) {
	if err := os.WriteFile(filepath.Join(f.dir, name), []byte(content), 0o600); err != nil {
		f.t.Fatal(err)
	}
}

// start runs replica id as a child process, with an Envoy in front of it.
func (f *fleetTest) start(id string) *replicaProc { return f.startWith(id, nil) }

// startWith is start with the arguments changed by edit.
func (f *fleetTest) startWith(id string, edit func([]string) []string) *replicaProc {
	t := f.t
	t.Helper()
	p := &replicaProc{id: id, grpc: freeAddr(t), metrics: freeAddr(t), peer: freeAddr(t), done: make(chan struct{})}
	args := append([]string{"serve",
		"--workers", filepath.Join(f.dir, "workers.yaml"),
		"--priority-scheduler-enabled", "--priority-scheduler-config", filepath.Join(f.dir, "priority.yaml"),
		"--grpc-addr", p.grpc, "--metrics-addr", p.metrics,
		"--leader-elect", "--peer-addr", p.peer, "--leader-elect-identity", id,
		"--leader-elect-lease-duration=2s", "--leader-elect-renew-deadline=1500ms", "--leader-elect-retry-period=200ms",
		"--drain-delay=0s", "--shutdown-timeout=20s",
	}, f.election...)
	if edit != nil {
		args = edit(args)
	}
	p.cmd = exec.Command(os.Args[0], args...)
	p.cmd.Env = append(os.Environ(), asMain+"=1")
	logf, err := os.Create(filepath.Join(f.dir, id+".log"))
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() || os.Getenv("TOLLGATE_TEST_LOGS") != "" {
			out, _ := os.ReadFile(filepath.Join(f.dir, id+".log"))
			t.Logf("%s's log:\n%s", id, out)
		}
	})
	sim, err := envoysim.New(envoysim.Config{
		ExtProcAddr: p.grpc, Mode: &extprocfilterv3.ProcessingMode{
			RequestHeaderMode: extprocfilterv3.ProcessingMode_SEND, ResponseHeaderMode: extprocfilterv3.ProcessingMode_SEND,
			RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED, ResponseBodyMode: extprocfilterv3.ProcessingMode_STREAMED,
			RequestTrailerMode: extprocfilterv3.ProcessingMode_SKIP, ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
		},
		MessageTimeout: time.Second, MaxMessageTimeout: 310 * time.Second, // the shipped envoy.yaml's StatusOnError: http.StatusServiceUnavailable,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	p.sim = sim
	f.reps = append(f.reps, p)
	return p
}

// metric reads one unlabelled sample of p's /metrics (or with the given
// label text, e.g. `class="default"`), -1 when absent or unreachable.
func (p *replicaProc) metric(name, labels string) float64 {
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	want := name + " "
	if labels != "" {
		want = name + "{" + labels + "} "
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	return -1
}

// await polls cond every 20 ms for up to d and returns how long it took.
func await(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return poll.Until(t, d, 20*time.Millisecond, what, cond)
}

// scheduler waits until exactly one live replica schedules and every
// other one is linked to it, and returns it.
func (f *fleetTest) scheduler(live []*replicaProc) *replicaProc {
	var s *replicaProc
	await(f.t, 30*time.Second, "one scheduler, every front linked", func() bool {
		s = nil
		for _, p := range live {
			select {
			case <-p.done:
				f.t.Fatalf("%s exited", p.id)
			default:
			}
			switch {
			case p.metric("tollgate_leader", "") == 1 && s == nil:
				s = p
			case p.metric("tollgate_peer_linked", "") != 1:
				return false
			}
		}
		return s != nil
	})
	return s
}

type outcome struct {
	status int
	err    error
}

// send sends a chat through p's Envoy in the background.
func send(p *replicaProc, content string, out chan<- outcome) {
	body, _ := json.Marshal(map[string]any{"model": "llama", "messages": []map[string]string{{"role": "user", "content": content}}})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		r, err := p.sim.Do(ctx, envoysim.Request{Method: http.MethodPost, Path: "/v1/chat/completions",
			Header: http.Header{"Content-Type": {"application/json"}}, Body: body})
		if err != nil {
			out <- outcome{err: err}
			return
		}
		out <- outcome{status: r.Status}
	}()
}

// failover runs the experiment: two requests hold the worker's two slots
// and six wait, all sent through the fronts, then the scheduler gets sig
// and two more arrive. Every request must succeed; the admission pause is
// from the signal to the first completion of a request that was queued
// (the old scheduler may still dispatch one while it resigns after a
// SIGTERM).
func failover(t *testing.T, election []string, sig syscall.Signal) {
	f := newFleetTest(t, election)
	var reps []*replicaProc
	for i := range 3 {
		reps = append(reps, f.start(fmt.Sprintf("r%d", i)))
	}
	sch := f.scheduler(reps)
	var fronts []*replicaProc
	for _, p := range reps {
		if p != sch {
			fronts = append(fronts, p)
		}
	}
	running := make(chan outcome, 2)
	for i := range 2 {
		send(fronts[i], fmt.Sprintf("running %d", i), running)
	}
	await(t, 10*time.Second, "two requests at the worker", func() bool { return len(f.gate.Parked()) == 2 })
	queued := make(chan outcome, 8)
	for i := range 6 {
		send(fronts[i%2], fmt.Sprintf("queued %d", i), queued)
	}
	await(t, 10*time.Second, "six queued at the scheduler", func() bool {
		return sch.metric("smg_scheduler_queue_depth", `class="default"`) == 6
	})
	killed := time.Now()
	if err := sch.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	// Two more arrive while there may be no scheduler: the fronts hold
	// them past Envoy's one-second message timeout.
	for i := range 2 {
		send(fronts[i], fmt.Sprintf("during the handover %d", i), queued)
	}
	f.gate.Open()
	lost := 0
	var pause time.Duration
	for range 8 {
		o := <-queued
		if pause == 0 {
			pause = time.Since(killed)
		}
		if o.err != nil || o.status != http.StatusOK {
			lost++
			t.Errorf("queued request: status %d, %v", o.status, o.err)
		}
	}
	for range 2 {
		if o := <-running; o.err != nil || o.status != http.StatusOK {
			lost++
			t.Errorf("running request: status %d, %v", o.status, o.err)
		}
	}
	next := f.scheduler(fronts)
	var frontPause []string
	for _, p := range fronts {
		if n := p.metric("tollgate_peer_admission_pause_seconds_count", ""); n > 0 {
			sum := p.metric("tollgate_peer_admission_pause_seconds_sum", "")
			frontPause = append(frontPause, fmt.Sprintf("%s %v", p.id, time.Duration(sum/n*float64(time.Second)).Round(time.Millisecond)))
		}
	}
	t.Logf("%v to the scheduler %s: %d of 10 requests lost, first queued completion %v after the signal, fronts without a scheduler for %v, new scheduler %s",
		sig, sch.id, lost, pause.Round(time.Millisecond), frontPause, next.id)
	resumed := 0.0
	for _, p := range fronts {
		resumed += max(0, p.metric("tollgate_peer_reregistered_requests_total", `state="queued"`))
	}
	t.Logf("queued requests re-registered with %s: %v", next.id, resumed)
	// At least the six the dead scheduler held (an arrival sent to it
	// before its front saw it die counts too).
	if sig == syscall.SIGKILL && resumed < 6 {
		t.Errorf("the fronts re-registered %v queued requests, want at least the 6 the dead scheduler held", resumed)
	}
	select {
	case <-sch.done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s still running 30 s after %v", sch.id, sig)
	}
}

func etcdElection(t *testing.T) []string {
	return []string{"--leader-elect-backend", "etcd", "--etcd-endpoints", etcdserver.Start(t).ClientURL}
}

func kubeElection(t *testing.T) []string {
	apiserverBin, etcdBin := apiserver.Binaries()
	testbin.File(t, apiserverBin, apiserver.Install)
	testbin.File(t, etcdBin, apiserver.Install)
	log, err := os.Create(filepath.Join(t.TempDir(), "apiserver.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	c, err := apiserver.Start(log, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	kc, err := c.AdminKubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--leader-elect-backend", "kube", "--kubeconfig", kc, "--leader-elect-namespace", "default"}
}

// The scheduler is killed (SIGKILL) or rolled (SIGTERM) with a backlog
// queued through the other replicas, under each election backend: no
// request is lost.
func TestFailover_Etcd(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { failover(t, etcdElection(t), sig) })
	}
}

// Parallel with TestServe_WrongPeerAddr, which only waits: the API
// server starts while that test's replica waits out its peer check.
func TestFailover_Kube(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { failover(t, kubeElection(t), sig) })
	}
}

// freeAddr returns a loopback HOST:PORT nothing listens on
// (loopback.FreeAddr).
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := loopback.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// A replica whose --peer-addr does not reach its own peer listener (here
// an address of no host) refuses to start: elected, no other replica
// could reach it.
func TestServe_WrongPeerAddr(t *testing.T) {
	t.Parallel() // waits out the replica's 10 s peer check
	f := newFleetTest(t, etcdElection(t))
	_, port, _ := net.SplitHostPort(freeAddr(t))
	p := f.startWith("bad", func(args []string) []string {
		for i, a := range args {
			if a == "--peer-addr" {
				args[i+1] = "192.0.2.1:" + port // TEST-NET-1: no host answers
			}
		}
		return args
	})
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("a replica with a wrong --peer-addr is still running")
	}
	out, _ := os.ReadFile(filepath.Join(f.dir, "bad.log"))
	if !strings.Contains(string(out), "--peer-addr 192.0.2.1:"+port+" does not reach this replica") || p.cmd.ProcessState.ExitCode() == 0 {
		t.Fatalf("exit %d, log:\n%s", p.cmd.ProcessState.ExitCode(), out)
	}
}
