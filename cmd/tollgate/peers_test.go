package main

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// silentListener accepts TCP connections and never speaks: a hung engine,
// or an HTTP port given as a KV-event endpoint. It holds what it accepted
// until the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// TestServe_SilentKVEndpointStopsNothing: an endpoint that accepts TCP and
// never completes the ZMTP handshake must not hold back a worker-set change
// (which restarts that worker's subscriber) nor the exit, which stays
// within --drain-delay + --shutdown-timeout plus exitMargin.
func TestServe_SilentKVEndpointStopsNothing(t *testing.T) {
	a, b := silentListener(t), silentListener(t)
	file := writeFile(t, "workers.yaml", fmt.Sprintf("workers:\n  - id: w1\n    address: 127.0.0.1:18001\n    kv_events_endpoint: tcp://%s\n", a))
	sv := startServe(t, "--workers", file, "--kv-events", "--drain-delay", "0", "--shutdown-timeout", "1s")
	time.Sleep(200 * time.Millisecond) // the subscriber is in its handshake

	// w1's endpoint changes, and w2 joins: the change must apply although
	// w1's old subscriber waits on a peer that never answers.
	next := fmt.Sprintf("workers:\n  - id: w1\n    address: 127.0.0.1:18001\n    kv_events_endpoint: tcp://%s\n  - id: w2\n    address: 127.0.0.1:18002\n", b)
	if err := os.WriteFile(file, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	applied := false
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && !applied; time.Sleep(50 * time.Millisecond) {
		applied = strings.Contains(httpGet(t, "http://"+sv.metrics+"/metrics"), "\ntollgate_workers 2\n")
	}
	if !applied {
		t.Fatal("the workers file change did not apply within 10 s")
	}

	start := time.Now()
	sv.stop()
	budget := time.Second + exitMargin
	select {
	case err := <-sv.done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
		t.Logf("serve returned %v after the stop (budget %v)", time.Since(start).Round(time.Millisecond), budget)
	case <-time.After(budget + 5*time.Second):
		t.Fatalf("serve still running %v after the stop; budget %v", budget+5*time.Second, budget)
	}
}
