// Package etcdserver runs a real single-member etcd for the tests and the
// benchmark: the Debian etcd-server package's binary
// (hack/debian-packages.txt), on free loopback ports. Start is the tests'
// entry (a missing binary skips the test, or fails it under CI=true, as
// test/testbin does); New and Run serve a program.
package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/test/loopback"
	"github.com/tollgate/tollgate/test/testbin"
)

// Install says how to get etcd.
const Install = "install the Debian package etcd-server (make deps)"

// healthTimeout bounds how long etcd may take to report healthy.
const healthTimeout = 15 * time.Second

// Server is one etcd member. ClientURL is where clients reach it.
type Server struct {
	ClientURL string

	bin, dir, logPath, peerURL string
	cmd                        *exec.Cmd
	done                       chan struct{}
	t                          *testing.T // set by Start
}

// New prepares a member of bin with its data in dataDir and its output in
// logPath, on free loopback ports; Run starts it.
func New(bin, dataDir, logPath string) (*Server, error) {
	client, err := loopback.FreeAddr()
	if err != nil {
		return nil, err
	}
	peer, err := loopback.FreeAddr()
	if err != nil {
		return nil, err
	}
	return &Server{ClientURL: "http://" + client, bin: bin, dir: dataDir, logPath: logPath, peerURL: "http://" + peer}, nil
}

// Start starts etcd for a test and kills it when the test ends.
func Start(t *testing.T) *Server {
	t.Helper()
	bin := testbin.Lookup(t, "etcd", Install)
	dir := t.TempDir()
	s, err := New(bin, filepath.Join(dir, "data"), filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	s.t = t
	s.Restart()
	t.Cleanup(s.Kill)
	return s
}

// Restart runs a test's etcd again, on the same data directory and ports,
// failing the test when it does not become healthy.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.Run(context.Background()); err != nil {
		s.t.Fatal(err)
	}
}

// Run starts etcd and waits, at most 15 s or until ctx ends, until its
// /health says it is healthy; an etcd that exits first is an error.
func (s *Server) Run(ctx context.Context) error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	s.cmd = exec.Command(s.bin,
		"--name", "default",
		"--data-dir", s.dir,
		"--listen-client-urls", s.ClientURL,
		"--advertise-client-urls", s.ClientURL,
		"--listen-peer-urls", s.peerURL,
		"--initial-advertise-peer-urls", s.peerURL,
		"--initial-cluster", "default="+s.peerURL,
	)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf // a file: no copying goroutines
	if err := s.cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("etcdserver: starting %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	s.done = done
	go func() {
		_ = s.cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	deadline := time.Now().Add(healthTimeout)
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	for {
		herr := healthy(ctx, hc, s.ClientURL)
		if herr == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("etcdserver: etcd exited before it was healthy; see %s:\n%s", s.logPath, tail(s.logPath))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Kill()
			return errors.Join(ctx.Err(), fmt.Errorf("etcdserver: etcd not healthy after %v (%w); see %s:\n%s", healthTimeout, herr, s.logPath, tail(s.logPath)))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// healthy reports why etcd's /health does not answer {"health":"true"}.
func healthy(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"true"`) {
		return fmt.Errorf("/health: HTTP %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// tail returns the last lines of a log file.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-10):], "\n")
}

// Signal sends sig to etcd (SIGSTOP and SIGCONT freeze and thaw it).
func (s *Server) Signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

// Kill kills etcd and reaps it.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// Stop ends etcd with SIGTERM, then SIGKILL after 10 s; an etcd that had
// exited already is an error.
func (s *Server) Stop() error {
	if s.cmd == nil {
		return nil
	}
	select {
	case <-s.done:
		s.cmd = nil
		return fmt.Errorf("etcdserver: etcd had already exited; see %s", s.logPath)
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		s.Kill()
	}
	s.cmd = nil
	return nil
}
