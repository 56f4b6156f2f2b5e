package zmtp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tollgate/tollgate/test/interop"
)

// The interop tests run this package against two independent ZeroMQ
// implementations: libzmq (through python3-zmq, required under CI=true)
// and go-zeromq.

// waitLimit bounds every wait of these tests, so that a broken exchange
// fails instead of hanging; nothing is timed against it.
const waitLimit = 10 * time.Second

// libzmqPeer starts testdata/libzmq_peer.py and returns its endpoint; it
// stops when the test ends.
func libzmqPeer(t *testing.T, args ...string) string {
	t.Helper()
	_, out := interop.StartScript(t, filepath.Join("testdata", "libzmq_peer.py"), args...)
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 2 || f[0] != "READY" {
		t.Fatalf("libzmq peer did not start: %q, %v", line, err)
	}
	return f[1]
}

// recvWithin receives one message of ch, failing the test after waitLimit.
func recvWithin(t *testing.T, ch <-chan *Message) *Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("the connection ended")
		}
		return m
	case <-time.After(waitLimit):
		t.Fatal("no message")
	}
	return nil
}

// checkKVMessages receives a few messages and checks them: the
// publisher's kv@ messages only, in sequence.
func checkKVMessages(t *testing.T, ch <-chan *Message, payload int) {
	t.Helper()
	var last uint64
	for i := range 5 {
		m := recvWithin(t, ch)
		if len(m.Frames) != 3 || string(m.Frames[0]) != "kv@w0@m" || len(m.Frames[1]) != 8 || len(m.Frames[2]) != payload {
			t.Fatalf("message %d: %d frames, %q", i, len(m.Frames), m.Frames[0])
		}
		seq := binary.BigEndian.Uint64(m.Frames[1])
		if i > 0 && seq != last+1 {
			t.Errorf("sequence %d after %d", seq, last)
		}
		last = seq
		m.Release()
	}
}

func TestInteropLibzmqPub(t *testing.T) {
	for _, ep := range []string{"tcp://127.0.0.1:0", "ipc://" + filepath.Join(t.TempDir(), "pub.sock")} {
		t.Run(ep[:3], func(t *testing.T) {
			endpoint := libzmqPeer(t, "pub-bind", ep, "--payload", "1000")
			s, err := DialSub(t.Context(), endpoint, []byte("kv@"), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			checkKVMessages(t, s.Messages(), 1000)
		})
	}
}

// TestInteropLibzmqPubFrameTooLarge: a libzmq frame over the limit ends
// the connection with ErrFrameTooLarge.
func TestInteropLibzmqPubFrameTooLarge(t *testing.T) {
	endpoint := libzmqPeer(t, "pub-bind", "tcp://127.0.0.1:0", "--payload", "5000")
	s, err := DialSub(t.Context(), endpoint, nil, Options{MaxFrameSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case m, ok := <-s.Messages():
		if ok {
			t.Fatalf("got a message %q", m.Frames[0])
		}
	case <-time.After(waitLimit):
		t.Fatal("the connection did not end")
	}
	if !errors.Is(s.Err(), ErrFrameTooLarge) {
		t.Errorf("error %v, want %v", s.Err(), ErrFrameTooLarge)
	}
}

// TestInteropLibzmqPubConnects: a libzmq PUB connects to the listener.
func TestInteropLibzmqPubConnects(t *testing.T) {
	for _, ep := range []string{"tcp://127.0.0.1:0", "ipc://" + filepath.Join(t.TempDir(), "sub.sock")} {
		t.Run(ep[:3], func(t *testing.T) {
			l, err := listenSub(t.Context(), ep, []byte("kv@"), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			libzmqPeer(t, "pub-connect", l.Endpoint())
			checkKVMessages(t, l.Messages(), 300)
		})
	}
}

// replay asks a ROUTER for batches from 7 on, as the KV-event subscriber
// does, and checks the answer.
func replay(t *testing.T, endpoint string) {
	t.Helper()
	d, err := DialDealer(t.Context(), endpoint, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Send(nil, binary.BigEndian.AppendUint64(nil, 7)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []uint64{7, 8, math.MaxUint64} {
		m, err := d.Recv()
		if err != nil {
			t.Fatal(err)
		}
		fr := m.Frames
		if len(fr) == 3 && len(fr[0]) == 0 {
			fr = fr[1:]
		}
		if len(fr) != 2 || len(fr[0]) != 8 || binary.BigEndian.Uint64(fr[0]) != want {
			t.Fatalf("reply %q, want sequence %d", m.Frames, want)
		}
		if want != math.MaxUint64 && string(fr[1]) != fmt.Sprintf("payload-%d", want) {
			t.Errorf("payload %q", fr[1])
		}
	}
}

func TestInteropLibzmqRouter(t *testing.T) {
	replay(t, libzmqPeer(t, "router-bind", "tcp://127.0.0.1:0"))
}

// goZeromq returns go-zeromq's options: no logging.
func goZeromq() zmq4.Option { return zmq4.WithLogger(log.New(io.Discard, "", 0)) }

// goZeromqPublish publishes like libzmq_peer.py on a go-zeromq PUB until
// the test ends.
func goZeromqPublish(t *testing.T, pub zmq4.Socket) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		<-stopped
		_ = pub.Close()
	})
	go func() {
		defer close(stopped)
		for seq := uint64(0); ; seq++ {
			_ = pub.Send(zmq4.NewMsgFrom([]byte("kv@w0@m"), binary.BigEndian.AppendUint64(nil, seq), make([]byte, 300)))
			_ = pub.Send(zmq4.NewMsgFrom([]byte("other"), []byte("x")))
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
}

func TestInteropGoZeromqPub(t *testing.T) {
	pub := zmq4.NewPub(t.Context(), goZeromq())
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	goZeromqPublish(t, pub)
	s, err := DialSub(t.Context(), "tcp://"+pub.Addr().String(), []byte("kv@"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkKVMessages(t, s.Messages(), 300)
}

func TestInteropGoZeromqPubConnects(t *testing.T) {
	l, err := listenSub(t.Context(), "tcp://127.0.0.1:0", []byte("kv@"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pub := zmq4.NewPub(t.Context(), goZeromq())
	if err := pub.Dial(l.Endpoint()); err != nil {
		t.Fatal(err)
	}
	goZeromqPublish(t, pub)
	checkKVMessages(t, l.Messages(), 300)
}

func TestInteropGoZeromqRouter(t *testing.T) {
	router := zmq4.NewRouter(t.Context(), goZeromq(), zmq4.WithID(zmq4.SocketIdentity("replay")))
	defer router.Close()
	if err := router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		msg, err := router.Recv()
		if err != nil || len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			t.Errorf("request %q, %v", msg.Frames, err)
			return
		}
		id, start := msg.Frames[0], binary.BigEndian.Uint64(msg.Frames[2])
		for _, seq := range []uint64{start, start + 1} {
			_ = router.Send(zmq4.NewMsgFrom(id, nil, binary.BigEndian.AppendUint64(nil, seq), fmt.Appendf(nil, "payload-%d", seq)))
		}
		_ = router.Send(zmq4.NewMsgFrom(id, nil, binary.BigEndian.AppendUint64(nil, math.MaxUint64), nil))
	}()
	replay(t, "tcp://"+router.Addr().String())
	<-served
}
