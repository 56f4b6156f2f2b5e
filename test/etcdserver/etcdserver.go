// Package etcdserver runs a real single-member etcd for tests: the Debian
// etcd-server package's binary (hack/debian-packages.txt), on free
// loopback ports, in a temporary data directory. A missing binary skips
// the test, or fails it under CI=true (test/testbin).
package etcdserver

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/test/testbin"
)

// install says how to get etcd.
const install = "install the Debian package etcd-server (make deps)"

// Server is one etcd process. ClientURL is where clients reach it.
type Server struct {
	ClientURL string

	t                       *testing.T
	bin, dir, logPath, peer string
	cmd                     *exec.Cmd
}

// Start starts etcd and stops it when the test ends.
func Start(t *testing.T) *Server {
	t.Helper()
	bin := testbin.Lookup(t, "etcd", install)
	dir := t.TempDir()
	s := &Server{
		t: t, bin: bin,
		dir:       filepath.Join(dir, "data"),
		logPath:   filepath.Join(dir, "etcd.log"),
		ClientURL: "http://" + freeAddr(t),
		peer:      "http://" + freeAddr(t),
	}
	s.Restart()
	t.Cleanup(s.Kill)
	return s
}

// freeAddr returns a loopback HOST:PORT nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Restart runs etcd (again, on the same data directory and ports) and
// waits until it is healthy.
func (s *Server) Restart() {
	s.t.Helper()
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	defer logf.Close()
	s.cmd = exec.Command(s.bin,
		"--name", "default",
		"--data-dir", s.dir,
		"--listen-client-urls", s.ClientURL,
		"--advertise-client-urls", s.ClientURL,
		"--listen-peer-urls", s.peer,
		"--initial-advertise-peer-urls", s.peer,
		"--initial-cluster", "default="+s.peer,
	)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf // files: no copying goroutines
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	for {
		resp, err := hc.Get(s.ClientURL + "/health")
		if err == nil {
			var buf [256]byte
			n, _ := resp.Body.Read(buf[:])
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(buf[:n]), `"true"`) {
				hc.CloseIdleConnections()
				return
			}
		}
		if time.Now().After(deadline) {
			s.Kill()
			out, _ := os.ReadFile(s.logPath)
			s.t.Fatalf("etcd not healthy after 15s: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Signal sends sig to etcd (SIGSTOP and SIGCONT freeze and thaw it).
func (s *Server) Signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

// Kill kills etcd and reaps it.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}
