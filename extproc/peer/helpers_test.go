package peer

import (
	"context"
	"crypto/tls"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/sched"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer serves the channel on 127.0.0.1 with serve until the test
// ends, and returns its address.
func startServer(tb testing.TB, tc *tls.Config, serve func(ServerStream) error) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer(ServerOptions(tc)...)
	Register(g, serve)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	tb.Cleanup(func() {
		g.Stop()
		<-done
	})
	return lis.Addr().String()
}

// dial opens a stream to addr, closed when the test ends.
func dial(tb testing.TB, addr string, tc *tls.Config) ClientStream {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, tc)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// recvWithin waits up to 5s for a value on ch.
func recvWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s within 5s", what)
		panic("unreachable")
	}
}

var arrival = time.Date(2025, 3, 1, 12, 30, 45, 123456789, time.FixedZone("x", 3600))

// sampleRequest sets every field of a request.
func sampleRequest(cached, allowed int) *sched.Request {
	r := &sched.Request{
		ID:                7,
		Model:             "llama-3-70b",
		Class:             "interactive-chat",
		Priority:          sched.PriorityInteractive,
		StrictPriority:    3,
		HasStrictPriority: true,
		PriorityJump:      1.5,
		ISL:               2048,
		Pin:               &sched.Pin{Worker: "w-pinned", Rank: 2, HasRank: true},
		RequiredTaints:    []string{"gpu=h200", "zone=a"},
		Tenant:            "tenant-a",
		Arrival:           arrival,
		FairnessKey:       "user-42",
		Resumed:           true,
	}
	for i := range cached {
		r.Cached = append(r.Cached, sched.CachedTokens{Worker: "worker-" + string(rune('a'+i)), Tokens: uint64(64 * (i + 1))})
	}
	for i := range allowed {
		r.AllowedWorkers = append(r.AllowedWorkers, "worker-"+string(rune('a'+i)))
	}
	return r
}

// sampleAction sets every field of a dispatch but Fallbacks.
func sampleAction() sched.Action {
	return sched.Action{
		Kind: sched.ActionDispatch, ID: 7, Worker: "worker-b", Rank: 1,
		Outcome: sched.OutcomeAdmitted, Priority: sched.PriorityInteractive, By: sched.PrioritySystem,
		Model: "llama-3-70b", PolicyClass: "interactive-chat", Queued: true, Wait: 1500 * time.Millisecond,
		LimitKind: sched.LimitCachedTokens, LimitCurrent: 10, LimitValue: 20, Message: "why not",
		Stage: sched.StageDispatch, SLO: 2 * time.Second, Overdue: time.Millisecond, RetryAfter: 3 * time.Second,
		Preemptible: true, ISL: 2048, Cached: 1024, Uncached: 1024,
		Prefill: sched.RankRef{Worker: "worker-p", Rank: 3},
	}
}

// sampleTarget sets every field of a target with two fallbacks.
func sampleTarget() fleet.Target {
	return fleet.Target{
		Worker: "worker-b", Address: "10.0.0.2:8000", Rank: 1, MultiRank: true, Prefiller: "10.0.0.9:8000",
		Fallbacks: []fleet.Target{
			{Worker: "worker-c", Address: "10.0.0.3:8000", Rank: 1, MultiRank: true, Prefiller: "10.0.0.8:8000"},
			{Worker: "worker-d", Address: "10.0.0.4:8000"},
		},
	}
}

// allUps has one message of each kind.
func allUps() []*Up {
	return []*Up{
		{Kind: UpHello, Front: "tollgate-0.tollgate.ns.svc"},
		{Kind: UpSubmit, ID: 1, Request: sampleRequest(8, 16)},
		{Kind: UpAdopt, ID: 2, Request: sampleRequest(2, 2), Booking: &sched.Booking{
			Worker: "worker-b", Rank: 1, Prefill: sched.RankRef{Worker: "worker-p", Rank: 3}, FirstToken: true,
		}},
		{Kind: UpRelease, ID: 3},
		{Kind: UpFirstToken, ID: 4},
		{Kind: UpServed, ID: 5, Worker: "worker-c", Rank: 2},
		{Kind: UpUsage, ID: 6, Prompt: 2048, Completion: 512},
		{Kind: UpSynced},
	}
}

// allDowns has one message of each kind.
func allDowns() []*Down {
	return []*Down{
		{Kind: DownWelcome, Scheduler: "tollgate-1"},
		{Kind: DownQueued, ID: 1},
		{Kind: DownDecided, ID: 2, Decision: &Decision{Action: sampleAction(), Target: sampleTarget(), UnknownModel: true}},
		{Kind: DownPreempted, ID: 3},
		{Kind: DownFronts, Fronts: []string{"tollgate-0", "tollgate-2"}},
	}
}

// everySet fails when a field of v (recursively, in every element) is
// zero, except the paths in skip ("Action.Fallbacks").
func everySet(t *testing.T, path string, v reflect.Value, skip map[string]bool) {
	t.Helper()
	if skip[path] {
		return
	}
	if v.IsZero() {
		t.Errorf("sample leaves %s zero: the round trip does not cover it", path)
		return
	}
	switch {
	case v.Kind() == reflect.Pointer:
		everySet(t, path, v.Elem(), skip)
	case v.Kind() == reflect.Slice:
		for i := range v.Len() {
			everySet(t, path+"[]", v.Index(i), skip)
		}
	case v.Kind() == reflect.Struct && v.Type() != reflect.TypeFor[time.Time]():
		for i := range v.NumField() {
			p := strings.TrimPrefix(path+"."+v.Type().Field(i).Name, ".")
			everySet(t, p, v.Field(i), skip)
		}
	}
}
