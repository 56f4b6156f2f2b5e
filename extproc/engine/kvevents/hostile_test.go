package kvevents_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/test/kvwire"
	"github.com/tollgate/tollgate/test/mockworker"
)

// These tests play engines tollgate does not control: peers that speak
// ZMTP with hostile sizes, or do not speak at all.

// watchdog bounds a wait that must end, so that a hang fails the test
// instead of the run; nothing is timed against it.
const watchdog = 10 * time.Second

// newManagerWith is newManager with more of the configuration.
func newManagerWith(t *testing.T, cfg kvevents.Config) *kvevents.Manager {
	t.Helper()
	cfg.BlockSize = blockSize
	if cfg.ReconnectDelay == 0 {
		cfg.ReconnectDelay = 20 * time.Millisecond
	}
	if cfg.ResyncAfter == 0 {
		cfg.ResyncAfter = time.Second
	}
	m, err := kvevents.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	return m
}

// accept returns the next connection of ch, failing the test after the
// watchdog.
func accept(t *testing.T, ch <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(watchdog):
		t.Fatal("no connection came")
	}
	return nil
}

// metric returns the value of a counter or gauge of m with the given
// labels (0 when it has no such series).
func metric(t *testing.T, m *kvevents.Manager, name string, labels map[string]string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range m.Collectors() {
		reg.MustRegister(c)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			if s.GetCounter() != nil {
				return s.GetCounter().GetValue()
			}
			return s.GetGauge().GetValue()
		}
	}
	return 0
}

// within runs f and fails the test if it does not return within the
// watchdog.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(watchdog):
		t.Fatalf("%s did not return", what)
	}
}

// zmtpPub is the engine side of a raw ZMTP 3 connection.
type zmtpPub struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

// zmtpHello is a ZMTP 3.0 greeting (NULL mechanism) and a PUB's READY.
var zmtpHello = func() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10] = 0xFF, 0x7F, 3
	copy(g[12:], "NULL")
	body := []byte("\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB")
	return append(append(g, 0x04, byte(len(body))), body...)
}()

// handshake completes a PUB's handshake on nc and reads the subscription.
func handshake(t *testing.T, nc net.Conn) *zmtpPub {
	t.Helper()
	p := &zmtpPub{t: t, nc: nc, r: bufio.NewReader(nc)}
	if _, err := nc.Write(zmtpHello); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(p.r, make([]byte, 64)); err != nil {
		t.Fatalf("reading the greeting: %v", err)
	}
	for _, what := range []string{"READY", "subscription"} {
		var hdr [2]byte
		if _, err := io.ReadFull(p.r, hdr[:]); err != nil || hdr[0]&0x02 != 0 {
			t.Fatalf("reading the %s: %x %v", what, hdr, err)
		}
		if _, err := io.ReadFull(p.r, make([]byte, hdr[1])); err != nil {
			t.Fatalf("reading the %s: %v", what, err)
		}
	}
	return p
}

// closedByTollgate waits until tollgate closes the connection.
func (p *zmtpPub) closedByTollgate() {
	p.t.Helper()
	_ = p.nc.SetReadDeadline(time.Now().Add(watchdog))
	if _, err := io.Copy(io.Discard, p.r); err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		p.t.Fatalf("tollgate did not close the connection: %v", err)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

// attacks are the hostile streams a publisher sends after its handshake:
// a frame header announcing 2^40 bytes, and 20 M empty frames flagged MORE
// (one endless message). Each returns once tollgate cut it off, reporting
// whether it did before the stream ended.
var attacks = []struct {
	name, reason string
	send         func(nc net.Conn) (cutOff bool)
}{
	{"frame of 2^40 bytes", "frame_too_large", func(nc net.Conn) bool {
		hdr := binary.BigEndian.AppendUint64([]byte{0x03}, 1<<40) // MORE|LONG
		_, _ = nc.Write(hdr)
		_, _ = nc.Write(make([]byte, 1<<20)) // the start of a body
		return true
	}},
	{"20M empty MORE frames", "too_many_frames", func(nc net.Conn) bool {
		chunk := make([]byte, 1<<16)
		for i := 0; i < len(chunk); i += 2 {
			chunk[i] = 0x01 // MORE, size 0
		}
		const frames = 20_000_000
		for sent := 0; sent < frames; sent += len(chunk) / 2 {
			if _, err := nc.Write(chunk); err != nil {
				return true
			}
		}
		return false
	}},
}

// TestDialHostilePublisher: a publisher tollgate dials sends a hostile
// stream. The connection is closed and counted, and tollgate reconnects.
func TestDialHostilePublisher(t *testing.T) {
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			m := newManager(t, "")
			m.SetWorkers([]kvevents.Endpoint{{Worker: "w0", Endpoint: "tcp://" + ln.Addr().String()}})
			_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(watchdog))
			nc, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			p := handshake(t, nc)
			if !a.send(nc) {
				t.Fatal("tollgate took the whole stream")
			}
			p.closedByTollgate()
			// The subscriber reconnects (its connection is accepted) ...
			again, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			_ = again.Close()
			// ... and has counted the first one.
			if n := metric(t, m, "tollgate_kv_events_disconnects_total", map[string]string{"worker": "w0", "reason": a.reason}); n != 1 {
				t.Errorf("%s disconnects counted: %v, want 1", a.reason, n)
			}
		})
	}
}

// TestBindHostilePeer: a peer that reaches the bind socket sends a hostile
// stream. It loses its connection, counted; an engine connected meanwhile
// keeps publishing.
func TestBindHostilePeer(t *testing.T) {
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			m := newManager(t, "tcp://127.0.0.1:0")
			m.SetWorkers([]kvevents.Endpoint{{Worker: "w0"}})
			w := mockworker.Start(t, mockworker.Config{
				ID: "w0", Speed: 1000, BlockSize: blockSize,
				KVEvents: &mockworker.KVEventsConfig{Endpoint: m.BindEndpoint(), Connect: true,
					Topic: "kv@w0@" + mockworker.DefaultModel},
			})
			probe := 0
			waitFor(t, "the engine to connect", func() bool {
				probe++
				complete(t, w, prompt(blockSize+1, 100000+probe*blockSize))
				return m.Index().Synced("w0")
			})

			nc, err := net.Dial("tcp", m.BindEndpoint()[len("tcp://"):])
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			p := handshake(t, nc)
			if !a.send(nc) {
				t.Fatal("tollgate took the whole stream")
			}
			p.closedByTollgate()
			waitFor(t, "the disconnect counted", func() bool {
				return metric(t, m, "tollgate_kv_events_disconnects_total", map[string]string{"worker": "", "reason": a.reason}) == 1
			})

			b := prompt(3*blockSize, 5000)
			complete(t, w, b)
			waitFor(t, "the engine's next batch indexed", func() bool { n, _ := cachedOn(m, "w0", b); return n == 3*blockSize })
		})
	}
}

// silentListener accepts connections and never speaks; accepted gets each
// one.
func silentListener(t *testing.T) (endpoint string, accepted <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan net.Conn, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		close(ch)
		for c := range ch {
			_ = c.Close()
		}
	})
	return "tcp://" + ln.Addr().String(), ch
}

// TestSilentEndpoint: an endpoint that accepts TCP and never speaks ZMTP
// (a hung engine, an HTTP port given by mistake) neither blocks a worker
// set update nor the end of Run, and its handshakes time out, counted.
func TestSilentEndpoint(t *testing.T) {
	endpoint, accepted := silentListener(t)
	m, err := kvevents.New(kvevents.Config{BlockSize: blockSize, ReconnectDelay: 10 * time.Millisecond,
		HandshakeTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, m)
	within(t, "SetWorkers", func() { m.SetWorkers([]kvevents.Endpoint{{Worker: "w0", Endpoint: endpoint}}) })
	accept(t, accepted) // the subscriber is in its handshake, for an hour
	within(t, "SetWorkers that stops the subscriber", func() { m.SetWorkers(nil) })
	within(t, "SetWorkers that starts it again", func() { m.SetWorkers([]kvevents.Endpoint{{Worker: "w0", Endpoint: endpoint}}) })
	accept(t, accepted)
	within(t, "the end of Run", stop)

	// With a short handshake timeout: each attempt is closed and counted.
	m = newManagerWith(t, kvevents.Config{HandshakeTimeout: 50 * time.Millisecond})
	m.SetWorkers([]kvevents.Endpoint{{Worker: "w0", Endpoint: endpoint}})
	for range 3 {
		accept(t, accepted)
	}
	waitFor(t, "handshake timeouts counted", func() bool {
		return metric(t, m, "tollgate_kv_events_disconnects_total", map[string]string{"worker": "w0", "reason": "handshake_timeout"}) >= 2
	})
}

// TestSilentReplayEndpoint: a replay socket that never answers ends within
// the replay timeout; the stream then resyncs without it.
func TestSilentReplayEndpoint(t *testing.T) {
	replay, _ := silentListener(t)
	w := startWorker(t, kvwire.Encoding{}, 64)
	pub, _ := w.KVEventEndpoints()
	complete(t, w, prompt(blockSize, 1)) // unsent: a subscriber joins mid-stream
	m := newManagerWith(t, kvevents.Config{ReplayTimeout: 300 * time.Millisecond, HandshakeTimeout: time.Hour})
	m.SetWorkers([]kvevents.Endpoint{{Worker: "w0", Endpoint: pub, Replay: replay}})
	probe := 0
	waitFor(t, "a failed replay", func() bool {
		probe++
		complete(t, w, prompt(blockSize+1, 100000+probe*blockSize))
		return metric(t, m, "tollgate_kv_events_replays_total", map[string]string{"worker": "w0", "result": "failed"}) > 0
	})
	waitFor(t, "the bounded resync", func() bool { return m.Index().Synced("w0") })
}

// TestRemovedWorkerForgotten: a worker left out of the set is forgotten by
// the index once its subscriber has stopped.
func TestRemovedWorkerForgotten(t *testing.T) {
	w := startWorker(t, kvwire.Encoding{}, 64)
	pub, replay := w.KVEventEndpoints()
	m := newManager(t, "")
	m.SetWorkers([]kvevents.Endpoint{{Worker: "w0", Endpoint: pub, Replay: replay}})
	probe := 0
	waitFor(t, "w0 indexed", func() bool {
		probe++
		complete(t, w, prompt(blockSize+1, 100000+probe*blockSize))
		return m.Index().Synced("w0") && m.Index().StreamLen("w0", 0) > 0
	})
	m.SetWorkers(nil)
	waitFor(t, "w0 forgotten", func() bool { return !m.Index().Synced("w0") && m.Index().StreamLen("w0", 0) == 0 })
}

// TestBindRanksBounded: in bind mode the DP ranks a payload names are
// bounded by the worker's known ranks, or MaxUnknownRanks when its DP size
// is unknown; batches of other ranks are dropped and counted.
func TestBindRanksBounded(t *testing.T) {
	m := newManager(t, "tcp://127.0.0.1:0")
	m.SetWorkers([]kvevents.Endpoint{{Worker: "w0"}, {Worker: "w1", DPStart: 4, DPSize: 2}})
	nc, err := net.Dial("tcp", m.BindEndpoint()[len("tcp://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	p := handshake(t, nc)
	send := func(worker string, rank uint32, seq uint64) {
		t.Helper()
		b := kvevents.Batch{Rank: rank, HasRank: true, Events: []kvevents.Event{{
			Kind: kvevents.KindStored, Hashes: []uint64{uint64(rank) + 1}, BlockSize: blockSize,
			Tokens: []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		}}}
		var msg []byte
		for i, f := range [][]byte{[]byte("kv@" + worker + "@m"), binary.BigEndian.AppendUint64(nil, seq), kvwire.Encode(&b, kvwire.Encoding{})} {
			flags := byte(0x02) // LONG
			if i < 2 {
				flags |= 0x01 // MORE
			}
			msg = binary.BigEndian.AppendUint64(append(msg, flags), uint64(len(f)))
			msg = append(msg, f...)
		}
		if _, err := p.nc.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	for rank := range uint32(100) {
		send("w0", rank, 0)
	}
	for rank := range uint32(10) {
		send("w1", rank, 0)
	}
	waitFor(t, "every batch handled", func() bool {
		return metric(t, m, "tollgate_kv_events_rank_rejected_total", map[string]string{"worker": "w0"}) == 100-kvevents.MaxUnknownRanks &&
			metric(t, m, "tollgate_kv_events_rank_rejected_total", map[string]string{"worker": "w1"}) == 8 &&
			m.Index().StreamLen("w1", 5) == 1
	})
	for rank := range uint32(100) {
		if got, want := m.Index().StreamLen("w0", rank), rank < kvevents.MaxUnknownRanks; (got == 1) != want {
			t.Errorf("w0 rank %d holds %d blocks", rank, got)
		}
	}
	for rank := range uint32(10) {
		if got, want := m.Index().StreamLen("w1", rank), rank == 4 || rank == 5; (got == 1) != want {
			t.Errorf("w1 rank %d holds %d blocks", rank, got)
		}
	}
}

// TestBindConnectionsBounded: bind mode holds at most MaxBindConnections
// connections; the excess is closed at once and counted.
func TestBindConnectionsBounded(t *testing.T) {
	m := newManagerWith(t, kvevents.Config{Bind: "tcp://127.0.0.1:0", MaxBindConnections: 2})
	addr := m.BindEndpoint()[len("tcp://"):]
	for range 2 {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		handshake(t, nc)
	}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	p := &zmtpPub{t: t, nc: nc, r: bufio.NewReader(nc)}
	p.closedByTollgate()
	// The listener counts the refusal after closing the connection.
	waitFor(t, "the refused connection counted", func() bool {
		return metric(t, m, "tollgate_kv_events_disconnects_total", map[string]string{"worker": "", "reason": "too_many_connections"}) == 1
	})
}
