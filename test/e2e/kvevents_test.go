package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/prefix"
	"github.com/tollgate/tollgate/test/interop"
	"github.com/tollgate/tollgate/test/mockworker"
)

// kvCacheBlocks is the mock engines' cache size with KV events: small, so
// that a test can make an engine evict.
const kvCacheBlocks = 48

const bs = sched.DefaultBlockSize

// ids returns n token ids from start.
func ids(n, start int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

func cat(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// tokenCompletion is a completion request whose prompt is token ids.
func tokenCompletion(prompt []int) []byte {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": 1})
	return body
}

// direct sends a prompt straight to a worker, behind tollgate's back: only
// the worker's KV events can tell tollgate about it.
func direct(t *testing.T, w *mockworker.Worker, prompt []int) {
	t.Helper()
	resp, err := http.Post(w.URL()+"/v1/completions", "application/json", bytes.NewReader(tokenCompletion(prompt)))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("direct completion: %s", resp.Status)
	}
}

// eventsCached is what tollgate's exact index says worker holds of prompt:
// the engines' events alone, without tollgate's own routing.
func (s *stack) eventsCached(worker string, prompt []int) uint64 {
	u := make([]uint32, len(prompt))
	for i, v := range prompt {
		u[i] = uint32(v)
	}
	found, _ := s.kv.Index().Lookup(prefix.HashTokens(s.kv.Index().SeedFor(model), u, bs, nil), bs, nil, nil, nil)
	for _, c := range found {
		if c.Worker == worker {
			return c.Tokens
		}
	}
	return 0
}

// waitFor waits until cond, a condition on tollgate's event index, holds:
// it checks cond again at every change of the index.
func (s *stack) waitFor(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		changed := s.kv.Index().Changed()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			s.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitForMetric polls tollgate's metrics until series is at least atLeast: a
// counter can move after the index change a test waits for (a replay is
// counted when its end arrives, after the batches it applied).
func (s *stack) waitForMetric(series string, atLeast float64) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.metricValue(series) < atLeast {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out waiting for %s >= %v (it is %v)", series, atLeast, s.metricValue(series))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitSynced makes a publisher send probe(i), i = 0, 1, ..., until
// tollgate's index is in sync with worker. A ZeroMQ publisher drops what it
// sends before the subscriber's connection is up, and nothing reports that
// connection: after each probe it waits for the index to change, and probes
// again when 20 ms pass without a change.
func (s *stack) awaitSynced(worker string, probe func(i int)) {
	s.t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for i := 0; ; i++ {
		changed := s.kv.Index().Changed()
		if s.kv.Index().Synced(worker) {
			return
		}
		probe(i)
		retry := time.NewTimer(20 * time.Millisecond)
		select {
		case <-changed:
		case <-retry.C:
		case <-deadline.C:
			s.t.Fatalf("timed out waiting for %s's events to sync", worker)
		}
		retry.Stop()
	}
}

// syncAll waits until tollgate is in sync with every worker's stream.
func (s *stack) syncAll() {
	s.t.Helper()
	for i, w := range s.workers {
		s.awaitSynced(w.Config().ID, func(probe int) { direct(s.t, w, ids(bs+1, 1_000_000+i*100_000+(probe+1)*bs)) })
	}
}

// metricValue reads one sample of tollgate's /metrics, series written as
// name or name{labels}; 0 when there is none.
func (s *stack) metricValue(series string) float64 {
	name, labels, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
	line := s.metric(name, labels)
	f, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
	return f
}

// route sends prompt through tollgate and returns the worker it reached
// and the cached tokens the worker reported.
func (s *stack) route(prompt []int) (worker string, cached int) {
	s.t.Helper()
	r := s.do(post("/v1/completions", tokenCompletion(prompt)))
	expectStatus(s.t, r, http.StatusOK, "")
	var v struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(r.Body, &v); err != nil {
		s.t.Fatalf("body %q: %v", r.Body, err)
	}
	for _, w := range s.workers {
		if w.Addr() == r.Endpoint {
			return w.Config().ID, v.Usage.Details.Cached
		}
	}
	s.t.Fatalf("routed to unknown endpoint %q", r.Endpoint)
	return "", 0
}

const eventsSum = `tollgate_prefix_cached_tokens_sum{source="events"}`

// TestKVEventsPriceAndRoute: a prefix a worker holds by its own events
// (tollgate never routed it) prices the request and routes it there; after
// the engine evicts it (BlockRemoved) or restarts it does not; a lost batch
// is recovered by replay.
func TestKVEventsPriceAndRoute(t *testing.T) {
	s := newStack(t, options{workers: 3, kvEvents: true})
	s.syncAll()
	id := func(i int) string { return s.workers[i].Config().ID }

	// w1 holds P (8 blocks), learnt only from its events.
	p := ids(8*bs, 1)
	direct(t, s.workers[1], p)
	s.waitFor("P indexed on w1", func() bool { return s.eventsCached(id(1), p) == 8*bs })
	before := s.metricValue(eventsSum)
	w, cached := s.route(cat(p, ids(5, 500)))
	if w != id(1) || cached != 8*bs {
		t.Fatalf("P+5 went to %s with %d cached tokens, want %s with %d", w, cached, id(1), 8*bs)
	}
	if got := s.metricValue(eventsSum) - before; got != 8*bs {
		t.Errorf("priced with %v cached tokens from events, want %d", got, 8*bs)
	}

	// w2 holds P too; w1 evicts it: BlockRemoved moves P's requests to w2.
	direct(t, s.workers[2], p)
	s.waitFor("P indexed on w2", func() bool { return s.eventsCached(id(2), p) == 8*bs })
	for i := range 6 {
		direct(t, s.workers[1], ids(8*bs+1, 10_000+i*1000))
	}
	s.waitFor("P evicted from w1", func() bool { return s.eventsCached(id(1), p) == 0 })
	if w, cached = s.route(cat(p, ids(5, 600))); w != id(2) || cached != 8*bs {
		t.Fatalf("after w1 evicted P: went to %s with %d cached, want %s with %d", w, cached, id(2), 8*bs)
	}

	// w2 restarts (its sequence goes back to 0); w0 gets P: P's requests
	// move to w0.
	s.workers[2].RestartEngine()
	s.waitFor("w2 cleared", func() bool { return s.eventsCached(id(2), p) == 0 && s.kv.Index().Synced(id(2)) })
	direct(t, s.workers[0], p)
	s.waitFor("P indexed on w0", func() bool { return s.eventsCached(id(0), p) == 8*bs })
	if w, cached = s.route(cat(p, ids(5, 700))); w != id(0) || cached != 8*bs {
		t.Fatalf("after w2 restarted: went to %s with %d cached, want %s with %d", w, cached, id(0), 8*bs)
	}
	if got := s.metricValue(`tollgate_kv_events_restarts_total{worker="` + id(2) + `"}`); got != 1 {
		t.Errorf("restarts of w2: %v, want 1", got)
	}

	// w1's batch holding Q is lost; the next batch reveals the gap and the
	// replay socket fills it: Q's requests go to w1.
	q := ids(6*bs, 50_000)
	s.workers[1].DropKVBatches(1)
	direct(t, s.workers[1], q)
	direct(t, s.workers[1], ids(2*bs, 60_000))
	s.waitFor("Q replayed on w1", func() bool { return s.eventsCached(id(1), q) == 6*bs })
	if w, cached = s.route(cat(q, ids(5, 800))); w != id(1) || cached != 6*bs {
		t.Fatalf("after the replay: went to %s with %d cached, want %s with %d", w, cached, id(1), 6*bs)
	}
	s.waitForMetric(`tollgate_kv_events_replays_total{result="ok",worker="`+id(1)+`"}`, 1)
	if got := s.metricValue(`tollgate_kv_events_gaps_total{worker="` + id(1) + `"}`); got != 1 {
		t.Errorf("gaps of w1: %v, want 1", got)
	}
}

// TestKVEventsPythonPublisher: worker w1's events come from the independent
// Python publisher (libzmq, msgpack) in vLLM's newest shape, w0 has none
// and is priced by the approximate index. A prefix the publisher reports
// routes to w1; after its BlockRemoved, or its restart, the prefix goes to
// w0, which holds it by tollgate's own routing; a lost batch is replayed.
func TestKVEventsPythonPublisher(t *testing.T) {
	pub := interop.StartPublisher(t, "kv@w1@"+model, bs, "--shape", "map", "--hashes", "bytes")
	s := newStack(t, options{workers: 2, kvEndpoints: map[int][2]string{1: {pub.Pub, pub.Replay}}})
	s.awaitSynced("w1", func(probe int) {
		pub.Do(map[string]any{"op": "store", "tokens": ids(bs, 1_000_000+(probe+1)*bs)})
	})
	if s.kv.Index().Synced("w0") {
		t.Fatal("w0 has no event stream but counts as in sync")
	}

	p := ids(8*bs, 1)
	pub.Do(map[string]any{"op": "store", "tokens": p})
	s.waitFor("P indexed on w1", func() bool { return s.eventsCached("w1", p) == 8*bs })
	before := s.metricValue(eventsSum)
	if w, _ := s.route(cat(p, ids(5, 500))); w != "w1" {
		t.Fatalf("P went to %s, want w1 (by its events)", w)
	}
	if got := s.metricValue(eventsSum) - before; got != 8*bs {
		t.Errorf("priced with %v cached tokens from events, want %d", got, 8*bs)
	}

	// w0 learns P the approximate way: a request pinned there.
	r := s.do(post("/v1/completions", tokenCompletion(cat(p, ids(5, 600))), "x-dynamo-worker-instance-id", "w0"))
	expectStatus(t, r, http.StatusOK, "")

	pub.Do(map[string]any{"op": "remove", "tokens": p})
	s.waitFor("P removed from w1", func() bool { return s.eventsCached("w1", p) == 0 })
	if w, _ := s.route(cat(p, ids(5, 700))); w != "w0" {
		t.Fatalf("after BlockRemoved P went to %s, want w0", w)
	}

	pub.Do(map[string]any{"op": "store", "tokens": p})
	s.waitFor("P indexed on w1 again", func() bool { return s.eventsCached("w1", p) == 8*bs })
	pub.Do(map[string]any{"op": "restart"})
	s.waitFor("w1's restart seen", func() bool { return s.eventsCached("w1", p) == 0 && s.kv.Index().Synced("w1") })
	if w, _ := s.route(cat(p, ids(5, 800))); w != "w0" {
		t.Fatalf("after w1's restart P went to %s, want w0", w)
	}

	q := ids(6*bs, 50_000)
	pub.Do(map[string]any{"op": "drop", "n": 1})
	pub.Do(map[string]any{"op": "store", "tokens": q})
	pub.Do(map[string]any{"op": "store", "tokens": ids(bs, 60_000)})
	s.waitFor("Q replayed on w1", func() bool { return s.eventsCached("w1", q) == 6*bs })
	if w, _ := s.route(cat(q, ids(5, 900))); w != "w1" {
		t.Fatalf("after the replay Q went to %s, want w1", w)
	}
}
