// Package interop drives an independent KV-event publisher, written in
// Python with libzmq (python3-zmq) and python3-msgpack, for interop tests of
// tollgate's subscriber over loopback.
package interop

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Python returns an interpreter that has zmq and msgpack: Debian's first
// (python3-zmq, python3-msgpack), then whatever python3 is on PATH. Without
// one the test fails under CI=true and is skipped elsewhere.
func Python(t testing.TB) string {
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

// Publisher is the running Python script.
type Publisher struct {
	// Pub and Replay are its bound endpoints.
	Pub, Replay string

	t   testing.TB
	in  io.WriteCloser
	out *bufio.Scanner
}

// StartScript runs a Python script with args, its standard input and output
// piped to the test; it stops (its input closed) when the test ends.
func StartScript(t testing.TB, script string, args ...string) (io.WriteCloser, io.Reader) {
	t.Helper()
	cmd := exec.Command(Python(t), append([]string{script}, args...)...)
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
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Wait()
	})
	return in, out
}

// StartPublisher starts the script with a topic, a block size and further
// arguments (see its usage); it stops when the test ends.
func StartPublisher(t testing.TB, topic string, blockSize int, args ...string) *Publisher {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "vllm_kv_publisher.py")
	in, out := StartScript(t, script, append([]string{"--block-size", fmt.Sprint(blockSize), "--topic", topic}, args...)...)
	p := &Publisher{t: t, in: in, out: bufio.NewScanner(out)}
	f := strings.Fields(p.line())
	if len(f) != 3 || f[0] != "READY" {
		t.Fatalf("publisher did not start: %q", f)
	}
	p.Pub, p.Replay = f[1], f[2]
	return p
}

func (p *Publisher) line() string {
	p.t.Helper()
	if !p.out.Scan() {
		p.t.Fatalf("publisher exited: %v", p.out.Err())
	}
	return p.out.Text()
}

// Do sends one command and checks it succeeded.
func (p *Publisher) Do(cmd map[string]any) {
	p.t.Helper()
	b, _ := json.Marshal(cmd)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.t.Fatal(err)
	}
	if l := p.line(); !strings.HasPrefix(l, "OK") {
		p.t.Fatalf("%s: %s", b, l)
	}
}
