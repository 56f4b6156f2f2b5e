package kvevents_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/sched/prefix"
	"github.com/tollgate/tollgate/test/kvwire"
	"github.com/tollgate/tollgate/test/mockworker"
)

const blockSize = 16

// prompt returns n token ids starting at start.
func prompt(n, start int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = start + i
	}
	return ids
}

func hashes(ids []int) []uint64 {
	u := make([]uint32, len(ids))
	for i, id := range ids {
		u[i] = uint32(id)
	}
	return prefix.HashTokens("", u, blockSize, nil) // base-model blocks: the empty seed
}

// complete sends a token-id prompt to the worker and waits for the answer.
func complete(t *testing.T, w *mockworker.Worker, ids []int) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": mockworker.DefaultModel, "prompt": ids, "max_tokens": 1})
	resp, err := http.Post(w.URL()+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("completion: %s", resp.Status)
	}
}

// cachedOn looks ids up for worker.
func cachedOn(m *kvevents.Manager, worker string, ids []int) (uint64, bool) {
	found, _ := m.Index().Lookup(hashes(ids), blockSize, nil, nil, nil)
	for _, c := range found {
		if c.Worker == worker {
			return c.Tokens, true
		}
	}
	return 0, m.Index().Synced(worker)
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func startWorker(t *testing.T, enc kvwire.Encoding, cacheBlocks int) *mockworker.Worker {
	return mockworker.Start(t, mockworker.Config{
		ID: "w0", Speed: 1000, BlockSize: blockSize, CacheBlocks: cacheBlocks,
		KVEvents: &mockworker.KVEventsConfig{
			Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0",
			Topic: "kv@w0@" + mockworker.DefaultModel, Encoding: enc,
		},
	})
}

func newManager(t *testing.T, bind string) *kvevents.Manager {
	// A bound socket may miss an engine's first batch (the subscription
	// races it) and has no replay: a short resync bound keeps the test fast.
	m, err := kvevents.New(kvevents.Config{BlockSize: blockSize, ReconnectDelay: 20 * time.Millisecond, Bind: bind,
		ResyncAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	return m
}

// run runs m until stop is called or the test ends; stop returns once Run
// has.
func run(t *testing.T, m *kvevents.Manager) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(stop)
	return stop
}

// TestLoopbackDial runs the subscriber against mockworker's publisher over
// loopback ZMQ: stores, evictions, a gap recovered by replay and a restart.
func TestLoopbackDial(t *testing.T) {
	for _, enc := range []kvwire.Encoding{{Shape: kvwire.ShapeArray}, {Shape: kvwire.ShapeMap, ByteHashes: true}} {
		t.Run(fmt.Sprintf("shape%d-bytes%v", enc.Shape, enc.ByteHashes), func(t *testing.T) {
			w := startWorker(t, enc, 64)
			pub, replay := w.KVEventEndpoints()
			m := newManager(t, "")
			m.SetWorkers([]kvevents.Endpoint{{Worker: "w0", Endpoint: pub, Replay: replay}})

			// The first batch (sequence 0) syncs the worker.
			a := prompt(8*blockSize, 1)
			probe := 0
			waitFor(t, "the subscriber to connect", func() bool {
				probe++
				complete(t, w, prompt(blockSize+1, 100000+probe*blockSize))
				return m.Index().Synced("w0")
			})
			complete(t, w, a)
			waitFor(t, "prompt a indexed", func() bool { n, _ := cachedOn(m, "w0", a); return n == 8*blockSize })

			// A lost batch is recovered by replay.
			w.DropKVBatches(1)
			b := append(prompt(4*blockSize, 1), prompt(4*blockSize, 5000)...) // shares 4 blocks with a
			c := prompt(3*blockSize, 9000)
			complete(t, w, b)
			complete(t, w, c) // its batch reveals the gap
			// The replay applies b's batch, then c's: wait for both.
			waitFor(t, "the lost batch replayed", func() bool {
				nb, _ := cachedOn(m, "w0", b)
				nc, _ := cachedOn(m, "w0", c)
				return nb == 8*blockSize && nc == 3*blockSize
			})

			// Evictions: the cache holds 64 blocks; 60 new ones evict a.
			for i := range 6 {
				complete(t, w, prompt(10*blockSize, 20000+i*1000))
			}
			waitFor(t, "a evicted", func() bool { n, _ := cachedOn(m, "w0", a); return n < 8*blockSize })
			if got, want := m.Index().StreamLen("w0", 0), w.Stats().CachedBlocks; got != want {
				t.Errorf("index holds %d blocks of w0, the engine %d", got, want)
			}

			// A restart clears the worker.
			w.RestartEngine()
			waitFor(t, "the restart seen", func() bool { n, synced := cachedOn(m, "w0", c); return n == 0 && synced })
			if got := m.Index().StreamLen("w0", 0); got != 0 {
				t.Errorf("after restart the index holds %d blocks of w0", got)
			}
		})
	}
}

// TestLoopbackBind runs bind mode: the engine connects to tollgate's SUB
// socket and names itself in the topic kv@<worker>@<model>.
func TestLoopbackBind(t *testing.T) {
	m := newManager(t, "tcp://127.0.0.1:0")
	m.SetWorkers([]kvevents.Endpoint{{Worker: "w0"}})
	w := mockworker.Start(t, mockworker.Config{
		ID: "w0", Speed: 1000, BlockSize: blockSize,
		KVEvents: &mockworker.KVEventsConfig{
			Endpoint: m.BindEndpoint(), Connect: true,
			Topic: "kv@w0@" + mockworker.DefaultModel, Encoding: kvwire.Encoding{Shape: kvwire.ShapeMap},
		},
	})
	a := prompt(5*blockSize, 1)
	probe := 0
	waitFor(t, "the engine to connect", func() bool {
		probe++
		complete(t, w, prompt(blockSize+1, 100000+probe*blockSize))
		return m.Index().Synced("w0")
	})
	complete(t, w, a)
	waitFor(t, "prompt a indexed", func() bool { n, _ := cachedOn(m, "w0", a); return n == 5*blockSize })
}

// TestLoopbackDataParallel: a worker of two DP ranks is two streams, on the
// endpoint's port plus the rank. Rank 0's engine is silent, so its stream
// comes into sync only through the resync bound; the worker is priced by
// events from then on, with rank 1's blocks.
func TestLoopbackDataParallel(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	rank := uint32(1)
	base := fmt.Sprintf("tcp://127.0.0.1:%d", port-1)
	w := mockworker.Start(t, mockworker.Config{
		ID: "w0", Speed: 1000, BlockSize: blockSize,
		KVEvents: &mockworker.KVEventsConfig{Endpoint: base, DPRank: &rank, Encoding: kvwire.Encoding{Shape: kvwire.ShapeMap}},
	})
	if pub, _ := w.KVEventEndpoints(); pub != fmt.Sprintf("tcp://127.0.0.1:%d", port) {
		t.Fatalf("rank 1 published on %s, want port %d", pub, port)
	}
	m, err := kvevents.New(kvevents.Config{BlockSize: blockSize, ReconnectDelay: 20 * time.Millisecond, ResyncAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	m.SetWorkers([]kvevents.Endpoint{{Worker: "w0", Endpoint: base, DPSize: 2}})
	a := prompt(4*blockSize, 1)
	probe := 0
	waitFor(t, "rank 1 indexing", func() bool {
		probe++
		complete(t, w, prompt(blockSize+1, 100000+probe*blockSize))
		return m.Index().StreamLen("w0", 1) > 0
	})
	complete(t, w, a)
	waitFor(t, "both ranks in sync and a indexed on rank 1", func() bool { n, _ := cachedOn(m, "w0", a); return n == 4*blockSize })
	if n := m.Index().StreamLen("w0", 0); n != 0 {
		t.Errorf("silent rank 0 holds %d blocks", n)
	}
}

// TestLoopbackReconnect: the engine process goes away and a new one binds
// the same port; the subscriber reconnects, sees the sequence start again
// and drops what the old process had cached.
func TestLoopbackReconnect(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "tcp://" + l.Addr().String()
	_ = l.Close()
	start := func() *mockworker.Worker {
		w, err := mockworker.New(mockworker.Config{ID: "w0", Speed: 1000, BlockSize: blockSize,
			KVEvents: &mockworker.KVEventsConfig{Endpoint: endpoint}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Listen("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		return w
	}
	w := start()
	m := newManager(t, "")
	m.SetWorkers([]kvevents.Endpoint{{Worker: "w0", Endpoint: endpoint}})
	// Probes until one stored after the stream is in sync is indexed.
	probe := 0
	live := func(w *mockworker.Worker) {
		waitFor(t, "the stream live", func() bool {
			probe++
			p := prompt(blockSize+1, 100000+probe*blockSize)
			synced := m.Index().Synced("w0")
			complete(t, w, p)
			time.Sleep(20 * time.Millisecond)
			n, _ := cachedOn(m, "w0", p)
			return synced && n == blockSize
		})
	}
	live(w)
	a := prompt(4*blockSize, 1)
	complete(t, w, a)
	waitFor(t, "a indexed", func() bool { n, _ := cachedOn(m, "w0", a); return n == 4*blockSize })
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	w = start()
	t.Cleanup(func() { _ = w.Close() })
	live(w)
	if n, _ := cachedOn(m, "w0", a); n != 0 {
		t.Errorf("the old process's blocks still count: %d tokens of a", n)
	}
	b := prompt(2*blockSize, 5000)
	complete(t, w, b)
	waitFor(t, "b indexed", func() bool { n, _ := cachedOn(m, "w0", b); return n == 2*blockSize })
}
