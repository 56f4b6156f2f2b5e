package zmtp

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestDealer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		endpoint, o, peers := memPub(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() {
			p := newPeer(t, <-peers)
			defer p.nc.Close()
			p.handshake("ROUTER")
			for _, want := range []string{"", "12345678"} {
				if f, err := p.frame(); err != nil || string(f) != want {
					t.Errorf("request frame %q, %v; want %q", f, err, want)
				}
			}
			p.send(nil, []byte("12345678"), []byte("payload"))
			<-t.Context().Done()
		}()
		d, err := DialDealer(ctx, endpoint, o)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if err := d.Send(nil, []byte("12345678")); err != nil {
			t.Fatal(err)
		}
		m, err := d.Recv()
		if err != nil || len(m.Frames) != 3 || string(m.Frames[2]) != "payload" {
			t.Fatalf("reply %q, %v", m.Frames, err)
		}
		// A silent ROUTER: the end of the context ends the wait.
		time.AfterFunc(time.Second, cancel)
		if _, err := d.Recv(); !errors.Is(err, ErrClosed) {
			t.Errorf("Recv after the context ended: %v", err)
		}
		if err := d.Send(nil); !errors.Is(err, ErrClosed) {
			t.Errorf("Send after the context ended: %v", err)
		}
	})
}

// TestDealerRefusesPub: a DEALER talks only to a ROUTER.
func TestDealerRefusesPub(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		endpoint, o, peers := memPub(t)
		go func() {
			p := newPeer(t, <-peers)
			defer p.nc.Close()
			p.write(greeting[:])
			p.write(appendCommand(nil, "READY", property("Socket-Type", []byte("PUB"))))
			<-t.Context().Done()
		}()
		if _, err := DialDealer(t.Context(), endpoint, o); !errors.Is(err, ErrHandshake) {
			t.Errorf("error %v, want %v", err, ErrHandshake)
		}
	})
}
