package discovery

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/discovery/kube"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
	"github.com/tollgate/tollgate/test/envoysim"
	"github.com/tollgate/tollgate/test/kubefixture"
)

func TestEndToEnd_RoutingFollowsEndpointSlices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startStack(t)
		port0, port1 := s.worker("w0"), s.worker("w1")
		addr0, addr1 := workerIP+":"+itoa32(port0), workerIP+":"+itoa32(port1)
		tr, f := new(true), new(false)
		slot := []string{kube.AnnotationMaxRunningRequests, "1"}
		client := fake.NewClientset(kubefixture.Pod("p0", workerIP, slot...), kubefixture.Pod("p1", workerIP, slot...),
			kubefixture.Slice("vllm-0", "vllm", port0, kubefixture.Endpoint{Pod: "p0", IP: workerIP, Ready: tr}),
			kubefixture.Slice("vllm-1", "vllm", port1, kubefixture.Endpoint{Pod: "p1", IP: workerIP, Ready: tr}))
		rec := kubefixture.NewRecorder(s.srv.SetWorkers)
		src, err := kube.NewEndpointSliceSource(kube.SourceConfig{Client: client, Namespace: ns, Apply: rec.Apply, Debounce: 10 * time.Millisecond},
			kube.SliceSelection{Service: "vllm", Port: "http"})
		if err != nil {
			t.Fatal(err)
		}
		kubefixture.Run(t, src.Run)
		rec.Await(t, "llm/p0@"+addr0+" llm/p1@"+addr1)
		if !s.srv.Ready() {
			t.Fatal("server not ready with two workers")
		}

		// Requests are routed to both workers, with the EPP header and the
		// same value as envoy.lb metadata.
		seen := map[string]bool{}
		for range 8 {
			r := s.do()
			if r.Status != 200 {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
			if md := r.Metadata["envoy.lb"].GetFields()["x-gateway-destination-endpoint"].GetStringValue(); md != r.Endpoint {
				t.Errorf("envoy.lb metadata %q, routed to %q", md, r.Endpoint)
			}
			seen[r.Endpoint] = true
		}
		if !seen[addr0] || !seen[addr1] {
			t.Errorf("requests went to %v, want both workers", seen)
		}

		// Fill both slots with held requests, one per worker, then queue a
		// request pinned to p1.
		type result struct {
			name string
			resp *envoysim.Response
		}
		results := make(chan result, 3)
		var wg sync.WaitGroup
		defer wg.Wait()
		for _, w := range []string{"llm/p0", "llm/p1"} {
			wg.Go(func() { results <- result{w, s.do("X-Hold", "1", "X-Dynamo-Worker-Instance-Id", w)} })
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.gate.WaitParked(ctx, 2); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { results <- result{"queued", s.do("X-Dynamo-Worker-Instance-Id", "llm/p1")} })
		s.awaitStats("pinned request queued", func(st sched.Stats) bool { return queued(st) == 1 })

		// p1 starts terminating: it leaves the set, its queued pinned request
		// is answered 503, and its in-flight request carries on.
		s1 := kubefixture.Slice("vllm-1", "vllm", port1, kubefixture.Endpoint{Pod: "p1", IP: workerIP, Ready: f, Terminating: tr})
		if _, err := client.DiscoveryV1().EndpointSlices(ns).Update(context.Background(), s1, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.Await(t, "llm/p0@"+addr0)
		r := <-results
		if r.name != "queued" || r.resp.Status != 503 {
			t.Fatalf("%s answered %d %s, want the queued pinned request answered 503", r.name, r.resp.Status, r.resp.Body)
		}
		st := s.awaitStats("p1 removed with its request in flight", func(st sched.Stats) bool {
			rs, ok := rankOf(st, "llm/p1")
			return ok && rs.Removed && rs.ActiveRequests == 1
		})
		if st.Capacity != 1 {
			t.Errorf("capacity %d after p1 left, want 1", st.Capacity)
		}
		if r := s.do("X-Dynamo-Worker-Instance-Id", "llm/p1"); r.Status != 503 {
			t.Errorf("new request pinned to the removed worker: %d, want 503", r.Status)
		}

		// The held requests finish where they started; afterwards nothing of
		// p1 is booked any more.
		s.gate.Open()
		for range 2 {
			r := <-results
			want := addr0
			if r.name == "llm/p1" {
				want = addr1
			}
			if r.resp.Status != 200 || r.resp.Endpoint != want {
				t.Errorf("%s: status %d at %s, want 200 at %s", r.name, r.resp.Status, r.resp.Endpoint, want)
			}
		}
		s.awaitStats("p1 forgotten", func(st sched.Stats) bool {
			_, ok := rankOf(st, "llm/p1")
			p0, _ := rankOf(st, "llm/p0")
			return !ok && p0.ActiveRequests == 0
		})
		for range 3 {
			if r := s.do(); r.Status != 200 || r.Endpoint != addr0 {
				t.Errorf("after p1 left: %d at %s, want 200 at %s", r.Status, r.Endpoint, addr0)
			}
		}

		// p1 comes back.
		s1 = kubefixture.Slice("vllm-1", "vllm", port1, kubefixture.Endpoint{Pod: "p1", IP: workerIP, Ready: tr})
		if _, err := client.DiscoveryV1().EndpointSlices(ns).Update(context.Background(), s1, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.Await(t, "llm/p0@"+addr0+" llm/p1@"+addr1)
		if r := s.do("X-Dynamo-Worker-Instance-Id", "llm/p1"); r.Status != 200 || r.Endpoint != addr1 {
			t.Errorf("pinned to the returned worker: %d at %s, want 200 at %s", r.Status, r.Endpoint, addr1)
		}
		s.awaitStats("all requests ended", func(st sched.Stats) bool {
			for _, r := range st.Ranks {
				if r.ActiveRequests > 0 {
					return false
				}
			}
			return true
		})
	})
}

func TestEndToEnd_InferencePool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startStack(t)
		port0, port1 := s.worker("w0"), s.worker("w1")
		addr0, addr1 := workerIP+":"+itoa32(port0), workerIP+":"+itoa32(port1)
		client := fake.NewClientset(kubefixture.Pod("vllm-0", workerIP))
		dyn := kubefixture.NewDynamic(kubefixture.InferencePool("pool", int64(port0), int64(port1)))
		src, err := kube.NewPoolSource(kube.SourceConfig{Client: client, Namespace: ns, Apply: s.srv.SetWorkers, Debounce: 10 * time.Millisecond}, dyn, "pool")
		if err != nil {
			t.Fatal(err)
		}
		kubefixture.Run(t, src.Run)
		kubefixture.Settle()
		if !s.srv.Ready() {
			t.Fatal("server not ready")
		}

		// One pod, two target ports: two workers, both used.
		seen := map[string]bool{}
		for range 8 {
			r := s.do()
			if r.Status != 200 {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
			seen[r.Endpoint] = true
		}
		if !seen[addr0] || !seen[addr1] {
			t.Errorf("requests went to %v, want both ports", seen)
		}
		if r := s.do("X-Dynamo-Worker-Instance-Id", "llm/vllm-0:"+itoa32(port1)); r.Status != 200 || r.Endpoint != addr1 {
			t.Errorf("pin to a port worker: %d at %s, want 200 at %s", r.Status, r.Endpoint, addr1)
		}

		// The pod stops being ready: no worker is left, and requests get 503.
		nr := kubefixture.Pod("vllm-0", workerIP)
		nr.Status.Conditions[0].Status = corev1.ConditionFalse
		if _, err := client.CoreV1().Pods(ns).Update(context.Background(), nr, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		kubefixture.Settle()
		if s.srv.Ready() {
			t.Fatal("server still ready without workers")
		}
		if r := s.do(); r.Status != 503 {
			t.Errorf("without workers: %d, want 503", r.Status)
		}
	})
}

func TestEndToEnd_LeaderFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := startStack(t), startStack(t)
		b.gate = a.gate
		port := a.worker("w0")
		addr := workerIP + ":" + itoa32(port)
		var partitioned atomic.Bool // a's writes to the Lease fail while set
		client := kubefixture.LeaseClient(&partitioned)
		for _, o := range []runtime.Object{kubefixture.Pod("p0", workerIP, kube.AnnotationMaxRunningRequests, "1"),
			kubefixture.Slice("vllm-0", "vllm", port, kubefixture.Endpoint{Pod: "p0", IP: workerIP, Ready: new(true)})} {
			if err := client.Tracker().Add(o); err != nil {
				t.Fatal(err)
			}
		}
		run := func(s *stack, id string) {
			src, err := kube.NewEndpointSliceSource(kube.SourceConfig{Client: client, Namespace: ns, Apply: s.srv.SetWorkers, Debounce: 10 * time.Millisecond},
				kube.SliceSelection{Service: "vllm"})
			if err != nil {
				t.Fatal(err)
			}
			kubefixture.Run(t, src.Run)
			el, err := kube.NewElector(kube.LeaderConfig{Client: client, Namespace: ns, Name: "tollgate", Identity: id, Activator: s.srv,
				LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = el.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
		}
		run(a, "a")
		kubefixture.Eventually(t, 3*time.Second, "a leads and is ready", a.srv.Ready)
		run(b, "b")

		// The standby keeps a warm worker view but is not ready and sheds.
		kubefixture.Settle()
		b.awaitStats("standby knows the worker", func(st sched.Stats) bool { return st.Capacity == 1 })
		time.Sleep(200 * time.Millisecond)
		if b.srv.Ready() {
			t.Fatal("the standby reports ready")
		}
		if r := b.do(); r.Status != 503 || r.Header.Get("Retry-After") == "" {
			t.Errorf("standby answered %d (Retry-After %q), want 503 with Retry-After", r.Status, r.Header.Get("Retry-After"))
		}

		// The leader holds the only slot and queues another request.
		results := make(chan *envoysim.Response, 2)
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { results <- a.do("X-Hold", "1") })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.gate.WaitParked(ctx, 1); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { results <- a.do() })
		a.awaitStats("a request queued on the leader", func(st sched.Stats) bool { return queued(st) == 1 })

		// The leader stops renewing: it fails readiness and sheds its queue
		// at once; the standby takes over and is the only one ready.
		partitioned.Store(true)
		if r := <-results; r.Status != 503 || r.Header.Get("Retry-After") == "" {
			t.Errorf("queued request on the old leader: %d (Retry-After %q), want 503 with Retry-After", r.Status, r.Header.Get("Retry-After"))
		}
		if a.srv.Ready() {
			t.Error("the old leader still reports ready")
		}
		kubefixture.Eventually(t, 3*time.Second, "b takes over", b.srv.Ready)
		if a.srv.Ready() {
			t.Error("both replicas ready")
		}
		if r := b.do(); r.Status != 200 || r.Endpoint != addr {
			t.Errorf("new leader answered %d at %s, want 200 at %s", r.Status, r.Endpoint, addr)
		}

		// The old leader's admitted request finishes normally.
		a.gate.Open()
		if r := <-results; r.Status != 200 {
			t.Errorf("in-flight request on the old leader: %d, want 200", r.Status)
		}
		if r := a.do(); r.Status != 503 {
			t.Errorf("old leader answered %d after failover, want 503", r.Status)
		}
	})
}

// End to end: InferenceObjectives of the pool set the class of requests
// that name them in the objective header, the flags win, the tenant clamp
// still applies, and a changed priority takes effect without a restart.
func TestEndToEnd_ObjectiveClasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tenants, err := policy.NewTenants(policy.TenantOptions{TrustHeader: true})
		if err != nil {
			t.Fatal(err)
		}
		file := policy.DefaultPriorityFile()
		file.Tenants["header:red"] = sched.PriorityDefault // red may ask for default at most
		explicit := policy.Objectives{"pinned": sched.PrioritySystem}
		s := startStackWith(t, extproc.Config{
			Sched:      sched.Config{Priority: priorityConfig()},
			Tenancy:    &intake.Tenancy{Tenants: tenants, PriorityFile: file, DefaultMaxClass: "system"},
			Objectives: explicit,
		})
		port := s.worker("w0")
		client := fake.NewClientset(kubefixture.Pod("vllm-0", workerIP, kube.AnnotationMaxRunningRequests, "1"))
		dyn := kubefixture.NewDynamic(kubefixture.InferencePool("pool", int64(port)),
			kubefixture.InferenceObjective("chat", "pool", new(int64(7))),
			kubefixture.InferenceObjective("batch", "pool", new(int64(-2))),
			kubefixture.InferenceObjective("pinned", "pool", new(int64(-5))))
		workers, err := kube.NewPoolSource(kube.SourceConfig{Client: client, Namespace: ns, Apply: s.srv.SetWorkers, Debounce: 10 * time.Millisecond}, dyn, "pool")
		if err != nil {
			t.Fatal(err)
		}
		rec, logs := kubefixture.PassObjectiveRecorder(s.srv.SetObjectives), &kubefixture.LogBuffer{}
		objectives, err := kube.NewObjectiveSource(kube.ObjectiveConfig{Namespace: ns, Pool: "pool", Debounce: 10 * time.Millisecond,
			Apply: rec.Apply, Logger: logs.Logger()}, dyn)
		if err != nil {
			t.Fatal(err)
		}
		kubefixture.Run(t, workers.Run)
		kubefixture.Run(t, objectives.Run)
		kubefixture.Eventually(t, 5*time.Second, "the server ready", s.srv.Ready)
		rec.AwaitFound(t, policy.Objectives{"chat": sched.PriorityInteractive, "batch": sched.PriorityBulk, "pinned": sched.PriorityBulk})
		// The server's answer: the flag shadows pinned.
		kubefixture.Eventually(t, 5*time.Second, "the shadowed object logged", func() bool {
			return logs.Count(`subject="InferenceObjective llm/pinned" problem="spec.priority -5 (class bulk) ignored: --objective-class maps pinned to system"`) == 1
		})

		// Hold the only slot; each request after it queues in its class.
		results := make(chan int, 8)
		var wg sync.WaitGroup
		defer wg.Wait()
		defer s.gate.Open()
		wg.Go(func() { results <- s.do("X-Hold", "1").Status })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.gate.WaitParked(ctx, 1); err != nil {
			t.Fatal(err)
		}
		queuedIn := func(what string, want sched.Priority, headers ...string) {
			t.Helper()
			before, _ := s.srv.Stats(context.Background())
			wg.Go(func() { results <- s.do(headers...).Status })
			s.awaitStats(what, func(st sched.Stats) bool { return st.QueueDepth[want] == before.QueueDepth[want]+1 })
		}
		queuedIn("chat → interactive", sched.PriorityInteractive, "x-smg-tenant-id", "blue", "x-llm-d-inference-objective", "chat")
		queuedIn("batch → bulk", sched.PriorityBulk, "x-smg-tenant-id", "blue", "x-gateway-inference-objective", "batch")
		queuedIn("the flag wins: pinned → system", sched.PrioritySystem, "x-smg-tenant-id", "blue", "x-llm-d-inference-objective", "pinned")
		queuedIn("red is clamped: chat → default", sched.PriorityDefault, "x-smg-tenant-id", "red", "x-llm-d-inference-objective", "chat")

		// chat's priority drops below zero: new requests naming it are bulk.
		if _, err := dyn.Resource(kube.InferenceObjectiveGVR).Namespace(ns).Update(context.Background(),
			kubefixture.InferenceObjective("chat", "pool", new(int64(-1))), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.AwaitFound(t, policy.Objectives{"chat": sched.PriorityBulk, "batch": sched.PriorityBulk, "pinned": sched.PriorityBulk})
		queuedIn("chat → bulk after the update", sched.PriorityBulk, "x-smg-tenant-id", "blue", "x-llm-d-inference-objective", "chat")

		s.gate.Open()
		for range 6 {
			if st := <-results; st != 200 {
				t.Errorf("status %d, want 200", st)
			}
		}
	})
}
