// Package loopback hands out loopback addresses for the servers that tests
// and benchmarks start, often as other processes.
package loopback

import (
	"fmt"
	"net"
	"sync"
)

var (
	mu    sync.Mutex
	given = map[string]bool{} // every address FreeAddr returned
)

// FreeAddr returns a 127.0.0.1:PORT that nothing listened on a moment ago
// and that this process has not handed out before, so two servers started
// from here never get the same port: the kernel may give a port it just
// released to the next listener on port 0. Another process can still take
// the port before the server binds it.
func FreeAddr() (string, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := l.Addr().String()
		_ = l.Close()
		mu.Lock()
		seen := given[addr]
		given[addr] = true
		mu.Unlock()
		if !seen {
			return addr, nil
		}
	}
	return "", fmt.Errorf("loopback: 100 ports in a row were ones handed out before")
}
