package kube

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/tollgate/tollgate/extproc/fleet"
)

func TestMain(m *testing.M) {
	klog.SetSlogLogger(slog.New(slog.DiscardHandler)) // client-go's own logs
	goleak.VerifyTestMain(m)
}

const ns = "llm"

// recorder is a SourceConfig.Apply that keeps every set it was given and
// optionally passes it on.
type recorder struct {
	next func([]fleet.Worker) error

	mu   sync.Mutex
	sets [][]fleet.Worker
	// changed is closed and replaced on every call.
	changed chan struct{}
}

func newRecorder(next func([]fleet.Worker) error) *recorder {
	if next == nil {
		next = fleet.ValidateWorkers
	}
	return &recorder{next: next, changed: make(chan struct{})}
}

func (r *recorder) apply(ws []fleet.Worker) error {
	err := r.next(ws)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.sets = append(r.sets, slices.Clone(ws))
	}
	close(r.changed)
	r.changed = make(chan struct{})
	return err
}

// calls returns how many sets were applied.
func (r *recorder) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sets)
}

// last returns the last applied set and whether there is one.
func (r *recorder) last() ([]fleet.Worker, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sets) == 0 {
		return nil, false
	}
	return r.sets[len(r.sets)-1], true
}

// await waits until the last applied set, summarized, equals want.
func (r *recorder) await(t *testing.T, want string) []fleet.Worker {
	t.Helper()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		ws, ok := r.last()
		if ok && summary(ws) == want {
			return ws
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("worker set is %q, want %q", summary(ws), want)
		}
	}
}

// settle lets a source inside a testing/synctest bubble finish with what it
// was sent: every goroutine waits, then the fake clock passes any debounce
// (a second is far more than the tests use) and everything settles again.
// Run in a bubble only.
func settle() {
	synctest.Wait()
	time.Sleep(time.Second)
	synctest.Wait()
}

// summary renders a worker set as "id@address ..." for compact checks.
func summary(ws []fleet.Worker) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = w.ID + "@" + w.Address
	}
	return strings.Join(parts, " ")
}

// runWorkerSource runs src until the test ends and checks that Run returns.
func runWorkerSource(t *testing.T, src *Source) {
	t.Helper()
	runRun(t, src.Run)
}

// logBuffer is a slog handler target that tests can read.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// count returns how many log lines contain s.
func (l *logBuffer) count(s string) int { return strings.Count(l.String(), s) }

// await waits until the log holds s: a source logs its problems after the
// apply returns.
func (l *logBuffer) await(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(l.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("log lacks %q:\n%s", s, l)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pod returns a Running, Ready pod with ip and annotations as key, value
// pairs.
func pod(name, ip string, kv ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name),
			Labels: map[string]string{"app": "vllm"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if len(kv) > 0 {
		p.Annotations = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
	return p
}

// ep is one endpoint for slice.
type ep struct {
	pod         string
	ip          string
	ready       *bool
	terminating *bool
}

func ptr[T any](v T) *T { return &v }

// slice returns an EndpointSlice of service with one port named "http".
func slice(name, service string, port int32, eps ...ep) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: service, "app": "vllm"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(port)}},
	}
	for _, e := range eps {
		d := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Terminating: e.terminating}}
		if e.pod != "" {
			d.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: e.pod, UID: types.UID("uid-" + e.pod)}
		}
		if strings.Contains(e.ip, ":") {
			es.AddressType = discoveryv1.AddressTypeIPv6
		}
		es.Endpoints = append(es.Endpoints, d)
	}
	return es
}

var now = metav1.Now()

func podCondition(typ corev1.PodConditionType) corev1.PodCondition {
	return corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue}
}

// runRun runs a source's Run until the test ends, or until the
// returned stop is called; stop waits for Run to return, so everything
// the source logged is written by then.
func runRun(t *testing.T, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
