package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// child is a server process started by the run: it is ready once it logged
// its JSON "serving" line on stderr, whose string fields are its addresses.
// Everything it writes on stderr goes to its log file.
type child struct {
	name  string
	cmd   *exec.Cmd
	addrs map[string]string
	log   string
	done  chan struct{} // closed when the process has exited
	err   error         // the exit error, once done is closed
}

// startupTimeout bounds how long a child may take to log "serving".
const startupTimeout = 60 * time.Second

// startChild starts argv with its stderr logged to logDir/name.log and waits
// until it is serving.
func startChild(ctx context.Context, name, logDir string, argv []string) (*child, error) {
	return startChildEnv(ctx, name, logDir, argv, nil)
}

// startChildEnv is startChild with env added to the process's environment.
func startChildEnv(ctx context.Context, name, logDir string, argv, env []string) (*child, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = f
	pr, err := cmd.StderrPipe()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	ready := make(chan map[string]string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		notify := ready
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			_, _ = fmt.Fprintln(f, line)
			if notify != nil && strings.Contains(line, `"msg":"serving"`) {
				if m, ok := servingAddrs(line); ok {
					notify <- m
					notify = nil
				}
			}
		}
		_, _ = io.Copy(f, pr)
	}()
	go func() {
		<-copied
		c.err = cmd.Wait()
		_ = f.Close()
		close(c.done)
	}()
	t := time.NewTimer(startupTimeout)
	defer t.Stop()
	select {
	case c.addrs = <-ready:
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("%s exited before serving (%w); see %s:\n%s", name, c.err, logPath, tail(logPath))
	case <-t.C:
		return nil, errors.Join(fmt.Errorf("%s did not log its serving line within %v; see %s", name, startupTimeout, logPath), c.stop())
	case <-ctx.Done():
		return nil, errors.Join(ctx.Err(), c.stop())
	}
}

// servingAddrs returns the string fields of a JSON log line.
func servingAddrs(line string) (map[string]string, bool) {
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		return nil, false
	}
	out := map[string]string{}
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out, true
}

// addr returns the address the child logged under key.
func (c *child) addr(key string) (string, error) {
	a, ok := c.addrs[key]
	if !ok || a == "" {
		return "", fmt.Errorf("%s logged no %q address", c.name, key)
	}
	return a, nil
}

// pid returns the child's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// stop ends the child with SIGTERM, then SIGKILL after a grace period, and
// waits for it. It reports an exit that was not caused by the signals.
func (c *child) stop() error {
	select {
	case <-c.done:
		return fmt.Errorf("%s had already exited: %w; see %s", c.name, c.err, c.log)
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(15 * time.Second)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s ignored SIGTERM and was killed; see %s", c.name, c.log)
	}
	if c.err != nil {
		// Death by the signal itself is a normal end; an exit status is not.
		if ee, ok := errors.AsType[*exec.ExitError](c.err); !ok || ee.Exited() {
			return fmt.Errorf("%s exited with %w; see %s", c.name, c.err, c.log)
		}
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

// runJSON runs argv, logs its stderr to logDir/name.log and decodes its
// stdout into v.
func runJSON(ctx context.Context, name, logDir string, argv []string, v any) error {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stderr = f
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s: %w; see %s:\n%s", name, err, logPath, tail(logPath))
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("%s: decoding its output %q: %w", name, out, err)
	}
	return nil
}
