package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/test/mockworker"
)

// pdRoles is a fleet of one decode worker (w0) and two prefill workers.
var pdRoles = map[int]mockworker.Role{0: mockworker.RoleDecode, 1: mockworker.RolePrefill, 2: mockworker.RolePrefill}

// longPrompt is a prompt of about 2,000 tokens, far past the split
// threshold of 512 uncached tokens; tag makes it unique.
func longPrompt(tag string) string { return tag + strings.Repeat(" the quick brown fox", 500) }

// decodeRecords returns the requests the decode worker w0 served (not the
// prefill halves it ran as a peer).
func (s *stack) decodeRecords() []mockworker.Record {
	var out []mockworker.Record
	for _, r := range s.workers[0].Records() {
		if !r.RemoteDecode {
			out = append(out, r)
		}
	}
	return out
}

// A long uncached prompt is split: the decode worker is the destination
// and its sidecar calls the prefill worker tollgate named. The same prompt
// again finds its prefix on the decode worker and is served whole, and so
// is a short one.
func TestPD_SplitLongUncachedOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStack(t, options{workers: 3, roles: pdRoles})
		long := chat(longPrompt("a"))
		expectStatus(t, s.do(long), http.StatusOK, "")
		expectStatus(t, s.do(long), http.StatusOK, "")
		expectStatus(t, s.do(chat("short")), http.StatusOK, "")
		recs := s.decodeRecords()
		if len(recs) != 3 {
			t.Fatalf("decode worker served %d requests, want all 3", len(recs))
		}
		prefillAddrs := map[string]bool{s.workers[1].Addr(): true, s.workers[2].Addr(): true}
		if !recs[0].RemotePrefill || !prefillAddrs[recs[0].PrefillPeer] {
			t.Errorf("first long prompt: remote prefill %v from %q", recs[0].RemotePrefill, recs[0].PrefillPeer)
		}
		if recs[1].PrefillPeer != "" || recs[1].CachedTokens == 0 {
			t.Errorf("repeat: split to %q with %d cached; want whole, cached on the decode worker", recs[1].PrefillPeer, recs[1].CachedTokens)
		}
		if recs[2].PrefillPeer != "" {
			t.Errorf("short prompt split to %q", recs[2].PrefillPeer)
		}
		if served := s.workers[1].Stats().PrefillServed + s.workers[2].Stats().PrefillServed; served != 1 {
			t.Errorf("prefill workers served %d prefills, want 1", served)
		}
		s.waitStats("one split", func(st sched.Stats) bool { return st.Splits == 1 })
	})
}

// A client's x-prefiller-host-port never reaches a worker: tollgate
// removes it from a whole request and replaces it in a split one.
func TestPD_ClientHeaderNeverReachesAWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStack(t, options{workers: 3, roles: pdRoles})
		const aimed = "203.0.113.9:8000"
		expectStatus(t, s.do(chat("short", "X-Prefiller-Host-Port", aimed)), http.StatusOK, "")
		expectStatus(t, s.do(chat(longPrompt("b"), "X-Prefiller-Host-Port", aimed)), http.StatusOK, "")
		for _, r := range s.decodeRecords() {
			if r.PrefillPeer == aimed || r.Header.Get("X-Prefiller-Host-Port") == aimed {
				t.Errorf("the client's prefiller reached the decode worker: %+v", r.RequestInfo)
			}
		}
		if st := s.workers[0].Stats(); st.PrefillFailures != 0 || st.PrefillCalls != 1 {
			t.Errorf("decode worker stats %+v, want one prefill call to a worker of the fleet", st)
		}
	})
}

// Prefills in flight spread over the prefill workers, the prefill-only
// workers are never a destination, and both halves' bookings are released
// when the requests end, by completion or by a client reset.
func TestPD_SpreadAndRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		atPrefill := func(r mockworker.RequestInfo) bool { return r.RemoteDecode }
		s := newStack(t, options{workers: 3, roles: pdRoles, hold: atPrefill})
		first := s.async(context.Background(), chat(longPrompt("c")))
		s.parked(1)
		ctx, reset := context.WithCancel(context.Background())
		second := s.async(ctx, chat(longPrompt("d")))
		s.parked(2)
		for i := 1; i <= 2; i++ {
			n := 0
			for _, r := range s.workers[i].Records() {
				if r.RemoteDecode {
					n++
				}
			}
			if n != 1 {
				t.Errorf("prefill worker w%d holds %d prefills, want 1 each", i, n)
			}
		}
		reset()
		if res := s.await(second); res.err == nil {
			t.Errorf("reset client got %d", res.r.Status)
		}
		s.gate.Open()
		expectStatus(t, s.await(first).r, http.StatusOK, "")
		for i := 1; i <= 2; i++ {
			for _, r := range s.workers[i].Records() {
				if !r.RemoteDecode {
					t.Errorf("prefill worker w%d was a destination: %+v", i, r.RequestInfo)
				}
			}
		}
		s.waitIdle() // no prefill tokens, blocks or requests booked anywhere
	})
}

// Both halves' bookings are released when a split request is preempted
// while its prefill runs, and when Envoy answers it itself because its
// decode worker cannot be reached.
func TestPD_ReleaseOnPreemptionAndLocalReply(t *testing.T) {
	t.Run("preempted during its prefill", inBubble(func(t *testing.T) {
		bulkPrefill := func(r mockworker.RequestInfo) bool { return r.RemoteDecode && r.Header.Get("X-Smg-Priority") == "bulk" }
		s := newStack(t, options{workers: 3, roles: pdRoles, maxRunning: 1, hold: bulkPrefill, config: func(c *extproc.Config) {
			c.Sched.Priority = priorityConfig(30 * time.Second)
			c.Tenancy = &intake.Tenancy{DefaultMaxClass: "system"}
		}})
		victim := s.async(context.Background(), completion(longPrompt("e"), "X-Smg-Priority", "bulk"))
		s.parked(1)
		expectStatus(t, s.do(chat(longPrompt("f"), "X-Smg-Priority", "interactive")), http.StatusOK, "")
		res := s.await(victim)
		if res.err != nil {
			t.Fatal(res.err)
		}
		expectStatus(t, res.r, http.StatusServiceUnavailable, "scheduler_preempted")
		s.gate.Open()
		s.waitIdle()
	}))
	t.Run("decode worker unreachable", inBubble(func(t *testing.T) {
		s := newStack(t, options{workers: 3, roles: pdRoles, deadWorkers: []int{0}})
		r := s.do(chat(longPrompt("g")))
		expectStatus(t, r, http.StatusServiceUnavailable, "")
		if !strings.HasPrefix(string(r.Body), "upstream connect error") {
			t.Errorf("client got %q, want Envoy's own 503", r.Body)
		}
		s.waitStats("split once", func(st sched.Stats) bool { return st.Splits == 1 })
		s.waitIdle()
	}))
}
