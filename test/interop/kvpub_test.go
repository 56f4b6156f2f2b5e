// Package interop runs tollgate's KV-event subscriber against an
// independent publisher written in Python with libzmq (python3-zmq) and
// python3-msgpack, over loopback.
package interop

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/extproc/kvevents"
	"github.com/tollgate/tollgate/sched/prefix"
)

const (
	blockSize = 16
	model     = "llama"
)

// python returns an interpreter that has zmq and msgpack: Debian's first
// (python3-zmq, python3-msgpack), then whatever python3 is on PATH. Without
// one the test fails under CI=true and is skipped elsewhere.
func python(t *testing.T) string {
	t.Helper()
	for _, c := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(c)
		if err != nil {
			continue
		}
		if exec.Command(path, "-c", "import zmq, msgpack").Run() == nil {
			return path
		}
	}
	msg := "python3 with zmq and msgpack not found: install the Debian packages python3-zmq and python3-msgpack (hack/deps.sh)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// publisher is the running Python script.
type publisher struct {
	t       *testing.T
	in      io.WriteCloser
	out     *bufio.Scanner
	pub     string
	replay  string
	command *exec.Cmd
}

func startPublisher(t *testing.T, args ...string) *publisher {
	t.Helper()
	cmd := exec.Command(python(t), append([]string{"vllm_kv_publisher.py", "--block-size", fmt.Sprint(blockSize),
		"--topic", "kv@w0@" + model}, args...)...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &publisher{t: t, in: in, out: bufio.NewScanner(out), command: cmd}
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Wait()
	})
	f := strings.Fields(p.line())
	if len(f) != 3 || f[0] != "READY" {
		t.Fatalf("publisher did not start: %q", f)
	}
	p.pub, p.replay = f[1], f[2]
	return p
}

func (p *publisher) line() string {
	p.t.Helper()
	if !p.out.Scan() {
		p.t.Fatalf("publisher exited: %v", p.out.Err())
	}
	return p.out.Text()
}

// do sends one command and checks it succeeded.
func (p *publisher) do(cmd map[string]any) {
	p.t.Helper()
	b, _ := json.Marshal(cmd)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.t.Fatal(err)
	}
	if l := p.line(); !strings.HasPrefix(l, "OK") {
		p.t.Fatalf("%s: %s", b, l)
	}
}

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
	for _, c := range m.Lookup(time.Now(), prefix.HashTokens(model, u, blockSize, nil), blockSize, nil) {
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
			p := startPublisher(t, args...)
			m, err := kvevents.New(kvevents.Config{BlockSize: blockSize, ReconnectDelay: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(m.Close)
			m.SetWorkers([]kvevents.Endpoint{{Worker: "w0", Model: model, Endpoint: p.pub, Replay: p.replay}})

			// Batches sent before the subscription took hold are fetched
			// through the replay socket as soon as a later one arrives.
			probe := 0
			waitFor(t, "in sync", func() bool {
				probe++
				p.do(map[string]any{"op": "store", "tokens": ids(blockSize, 1_000_000+probe*blockSize)})
				return m.Index().Synced("w0")
			})

			a := ids(8*blockSize+3, 1)
			p.do(map[string]any{"op": "store", "tokens": a})
			waitFor(t, "a stored", func() bool { return cached(m, a) == 8*blockSize })
			// Extend a by two blocks: a BlockStored chained to a's last block.
			a2 := append(ids(8*blockSize, 1), ids(2*blockSize, 7000)...)
			p.do(map[string]any{"op": "store", "tokens": a2})
			waitFor(t, "a2 stored", func() bool { return cached(m, a2) == 10*blockSize })
			// Remove a's blocks: a2's two further blocks stay, unreachable.
			p.do(map[string]any{"op": "remove", "tokens": ids(8*blockSize, 1)[:8*blockSize]})
			waitFor(t, "a removed", func() bool { return cached(m, a2) == 0 })

			// A lost batch comes back through the replay socket.
			b := ids(5*blockSize, 20_000)
			p.do(map[string]any{"op": "drop", "n": 1})
			p.do(map[string]any{"op": "store", "tokens": b})
			p.do(map[string]any{"op": "store", "tokens": ids(blockSize, 30_000)})
			waitFor(t, "b replayed", func() bool { return cached(m, b) == 5*blockSize })

			// A restart clears everything the engine held.
			p.do(map[string]any{"op": "restart"})
			waitFor(t, "restart seen", func() bool { return cached(m, b) == 0 && m.Index().Synced("w0") })
			c := ids(3*blockSize, 40_000)
			p.do(map[string]any{"op": "store", "tokens": c})
			waitFor(t, "c stored after the restart", func() bool { return cached(m, c) == 3*blockSize })
			p.do(map[string]any{"op": "clear"})
			waitFor(t, "cleared", func() bool { return cached(m, c) == 0 })
			if n := m.Index().StreamLen("w0", 0); n != 0 {
				t.Errorf("%d blocks left after AllBlocksCleared", n)
			}
		})
	}
}
