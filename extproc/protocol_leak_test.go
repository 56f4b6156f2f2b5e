package extproc

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/sched"
)

// TestExchange_ProtocolErrorWhileQueuedCancels checks that a queued request
// whose stream ends on a protocol error leaves the scheduler: the stream loop
// closes the exchange after the error, and that close must report Cancel
// exactly once, or the queue entry (and, once dispatched, its booking) leaks.
func TestExchange_ProtocolErrorWhileQueuedCancels(t *testing.T) {
	x, env, _ := newTestExchange(t, testConfig(nil))
	feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
	tell(x, t0, queued)
	s := x.message(t0, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false))
	if !s.end || status.Code(s.err) != codes.FailedPrecondition {
		t.Fatalf("second request headers while queued: %v", s.err)
	}
	x.close(t0.Add(time.Second), s.err)
	x.close(t0.Add(time.Second), errClientGone)
	if diff := cmp.Diff([]note{{evRelease, 7}}, env.notes, cmp.AllowUnexported(note{})); diff != "" {
		t.Errorf("notes (-want +got):\n%s", diff)
	}
}

// TestServer_ProtocolErrorWhileQueuedFreesTheQueue checks the same end to end.
// A queued stream still receives (that is how Envoy's own local reply
// reaches it), so the out-of-place message fails the stream at once and
// frees its queue place; nothing stays booked.
func TestServer_ProtocolErrorWhileQueuedFreesTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startServer(t, Config{Sched: sched.Config{Priority: testPriority()}}, oneWorker)
		p := proto{req: modeBuffered, resp: modeStreamed}
		a := ts.open()
		a.send(reqHeaders(p, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
		if got := a.recvKinds(2); !cmp.Equal([]string{"req_headers", "req_body+route"}, got) {
			t.Fatalf("a: %v", got)
		}
		b := ts.open()
		b.send(reqHeaders(p, "POST", "/v1/chat/completions", false), reqBody(chatBody, true))
		b.recvKinds(2) // headers, override
		ts.waitStats("b queued", func(s sched.Stats) bool { return s.QueueDepth[sched.PriorityDefault] == 1 })
		b.send(reqHeaders(p, "POST", "/v1/chat/completions", false)) // out of place while the request is queued
		if err := b.end(); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("b end %v, want FailedPrecondition", err)
		}
		ts.waitStats("b left the queue", func(s sched.Stats) bool { return s.QueueDepth[sched.PriorityDefault] == 0 })
		a.finish()
		ts.waitIdle()
	})
}
