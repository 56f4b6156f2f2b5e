package interop

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/sched/prefix"
)

const (
	blockSize = 16
	model     = "llama"
)

func ids(n, start int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

func cached(m *kvevents.Manager, prompt []int) uint64 {
	u := make([]uint32, len(prompt))
	for i, v := range prompt {
		u[i] = uint32(v)
	}
	found, _ := m.Index().Lookup(prefix.HashTokens(m.Index().SeedFor(model), u, blockSize, nil), blockSize, nil, nil, nil)
	for _, c := range found {
		if c.Worker == "w0" {
			return c.Tokens
		}
	}
	return 0
}

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

// TestPythonPublisher: stores, removals, a gap recovered through the
// replay socket, a restart and a clear, in every wire shape.
func TestPythonPublisher(t *testing.T) {
	for _, args := range [][]string{
		{"--shape", "array", "--hashes", "int"},
		{"--shape", "map", "--hashes", "bytes", "--rank", "0"},
		{"--shape", "array", "--flavor", "sglang"},
		{"--shape", "map", "--flavor", "sglang"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			p := StartPublisher(t, "kv@w0@"+model, blockSize, args...)
			m, err := kvevents.New(kvevents.Config{BlockSize: blockSize, ReconnectDelay: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = m.Run(ctx)
			}()
			t.Cleanup(func() {
				cancel()
				<-done
			})
			m.SetWorkers([]kvevents.Endpoint{{Worker: "w0", Endpoint: p.Pub, Replay: p.Replay}})

			// Batches sent before the subscription took hold are fetched
			// through the replay socket as soon as a later one arrives.
			probe := 0
			waitFor(t, "in sync", func() bool {
				probe++
				p.Do(map[string]any{"op": "store", "tokens": ids(blockSize, 1_000_000+probe*blockSize)})
				return m.Index().Synced("w0")
			})

			a := ids(8*blockSize+3, 1)
			p.Do(map[string]any{"op": "store", "tokens": a})
			waitFor(t, "a stored", func() bool { return cached(m, a) == 8*blockSize })
			// Extend a by two blocks: a BlockStored chained to a's last block.
			a2 := append(ids(8*blockSize, 1), ids(2*blockSize, 7000)...)
			p.Do(map[string]any{"op": "store", "tokens": a2})
			waitFor(t, "a2 stored", func() bool { return cached(m, a2) == 10*blockSize })
			// Remove a's blocks: a2's two further blocks stay, unreachable.
			p.Do(map[string]any{"op": "remove", "tokens": ids(8*blockSize, 1)[:8*blockSize]})
			waitFor(t, "a removed", func() bool { return cached(m, a2) == 0 })

			// A lost batch comes back through the replay socket.
			b := ids(5*blockSize, 20_000)
			p.Do(map[string]any{"op": "drop", "n": 1})
			p.Do(map[string]any{"op": "store", "tokens": b})
			p.Do(map[string]any{"op": "store", "tokens": ids(blockSize, 30_000)})
			waitFor(t, "b replayed", func() bool { return cached(m, b) == 5*blockSize })

			// A restart clears everything the engine held.
			p.Do(map[string]any{"op": "restart"})
			waitFor(t, "restart seen", func() bool { return cached(m, b) == 0 && m.Index().Synced("w0") })
			c := ids(3*blockSize, 40_000)
			p.Do(map[string]any{"op": "store", "tokens": c})
			waitFor(t, "c stored after the restart", func() bool { return cached(m, c) == 3*blockSize })
			p.Do(map[string]any{"op": "clear"})
			waitFor(t, "cleared", func() bool { return cached(m, c) == 0 })
			if n := m.Index().StreamLen("w0", 0); n != 0 {
				t.Errorf("%d blocks left after AllBlocksCleared", n)
			}
		})
	}
}
