package peer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/sched"
)

// TestSamplesSetEveryField keeps the round trip honest: every field of
// every message type is set in some sample.
func TestSamplesSetEveryField(t *testing.T) {
	ups, downs := allUps(), allDowns()
	for i := range reflect.TypeFor[Up]().NumField() {
		if !anySet(ups, i) {
			t.Errorf("no sample Up sets %s", reflect.TypeFor[Up]().Field(i).Name)
		}
	}
	for i := range reflect.TypeFor[Down]().NumField() {
		if !anySet(downs, i) {
			t.Errorf("no sample Down sets %s", reflect.TypeFor[Down]().Field(i).Name)
		}
	}
	everySet(t, "", reflect.ValueOf(ups[2].Request), nil)
	everySet(t, "", reflect.ValueOf(ups[2].Booking), nil)
	everySet(t, "", reflect.ValueOf(downs[2].Decision), map[string]bool{
		"Action.Fallbacks": true, "Target.Fallbacks[]": true,
	})
	everySet(t, "", reflect.ValueOf(downs[2].Decision.Target.Fallbacks[0]), map[string]bool{"Fallbacks": true})
}

func anySet[T any](msgs []*T, field int) bool {
	for _, m := range msgs {
		if !reflect.ValueOf(m).Elem().Field(field).IsZero() {
			return true
		}
	}
	return false
}

// TestRoundTrip sends every kind both ways through a real server.
func TestRoundTrip(t *testing.T) {
	ups, downs := allUps(), allDowns()
	for _, u := range ups {
		if err := u.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range downs {
		if err := d.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan []*Up, 1)
	addr := startServer(t, nil, func(s ServerStream) error {
		var rx []*Up
		defer func() { got <- rx }()
		for range ups {
			u, err := s.Recv()
			if err != nil {
				return err
			}
			rx = append(rx, u)
		}
		for _, d := range downs {
			if err := s.Send(d); err != nil {
				return err
			}
		}
		_, err := s.Recv() // until the front closes
		return err
	})
	c := dial(t, addr, nil)
	for _, u := range ups {
		if err := c.Send(u); err != nil {
			t.Fatal(err)
		}
	}
	var rx []*Down
	for range downs {
		d, err := c.Recv()
		if err != nil {
			t.Fatal(err)
		}
		rx = append(rx, d)
	}
	if diff := cmp.Diff(downs, rx); diff != "" {
		t.Errorf("downs (-sent +received):\n%s", diff)
	}
	c.Close()
	if diff := cmp.Diff(ups, recvWithin(t, got, "ups")); diff != "" {
		t.Errorf("ups (-sent +received):\n%s", diff)
	}
}

// TestInvalidUpEndsStream: the scheduler's Recv refuses an invalid message
// and the front learns InvalidArgument.
func TestInvalidUpEndsStream(t *testing.T) {
	recvErr := make(chan error, 1)
	addr := startServer(t, nil, func(s ServerStream) error {
		_, err := s.Recv()
		recvErr <- err
		if _, again := s.Recv(); !errors.Is(again, err) {
			t.Errorf("second Recv = %v, want the same %v", again, err)
		}
		return nil // the stream still ends InvalidArgument
	})
	c := dial(t, addr, nil)
	if err := c.Send(&Up{Kind: UpSubmit, ID: 1}); err != nil { // no request
		t.Fatal(err)
	}
	if err := recvWithin(t, recvErr, "server Recv"); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "peer: invalid submit message: no request") {
		t.Errorf("server Recv = %v, want InvalidArgument", err)
	}
	if _, err := c.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("client Recv = %v, want InvalidArgument", err)
	}
}

// TestInvalidDownEndsStream: the front's Recv refuses an invalid message
// and cancels the stream.
func TestInvalidDownEndsStream(t *testing.T) {
	recvErr := make(chan error, 1)
	addr := startServer(t, nil, func(s ServerStream) error {
		if err := s.Send(&Down{Kind: DownDecided, ID: 1}); err != nil { // no decision
			return err
		}
		_, err := s.Recv()
		recvErr <- err
		return err
	})
	c := dial(t, addr, nil)
	if _, err := c.Recv(); err == nil || !strings.Contains(err.Error(), "peer: invalid decided message: no decision") {
		t.Errorf("client Recv = %v, want the validation error", err)
	}
	if err := recvWithin(t, recvErr, "server Recv"); status.Code(err) != codes.Canceled {
		t.Errorf("server Recv = %v, want Canceled", err)
	}
}

// TestOversizeRefused: a message over MaxMessageBytes ends the stream with
// ResourceExhausted.
func TestOversizeRefused(t *testing.T) {
	recvErr := make(chan error, 1)
	addr := startServer(t, nil, func(s ServerStream) error {
		u, err := s.Recv()
		if err == nil {
			t.Errorf("server received a %s message over the limit", u.Kind)
		}
		recvErr <- err
		return err
	})
	c := dial(t, addr, nil)
	big := &Up{Kind: UpSubmit, ID: 1, Request: &sched.Request{Model: strings.Repeat("m", MaxMessageBytes)}}
	if err := c.Send(big); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if err := recvWithin(t, recvErr, "server Recv"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("server Recv = %v, want ResourceExhausted", err)
	}
	if _, err := c.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("client Recv = %v, want ResourceExhausted", err)
	}
}

// TestOversizeRefusedByPrefix: a message announcing 1 GiB is refused by
// its length prefix alone: the server answers ResourceExhausted at once,
// without waiting for (or allocating) the rest.
func TestOversizeRefusedByPrefix(t *testing.T) {
	recvErr := make(chan error, 1)
	addr := startServer(t, nil, func(s ServerStream) error {
		_, err := s.Recv()
		recvErr <- err
		return err
	})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", connectMethod}, {":authority", addr},
		{"content-type", "application/grpc+" + codecName}, {"te", "trailers"},
	} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	prefix := make([]byte, 5, 16)
	binary.BigEndian.PutUint32(prefix[1:], 1<<30)
	if err := errors.Join(
		fr.WriteSettings(),
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hdr.Bytes(), EndHeaders: true}),
		fr.WriteData(1, false, append(prefix, `{"k":2`...)),
	); err != nil {
		t.Fatal(err)
	}
	for code := ""; code == ""; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no grpc-status: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" {
					code = hf.Value
				}
			}
			if code != "" && code != "8" {
				t.Errorf("grpc-status %s, want 8 (ResourceExhausted)", code)
			}
		}
	}
	if err := recvWithin(t, recvErr, "server Recv"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("server Recv = %v, want ResourceExhausted", err)
	}
}

// TestCloseEndsServerRecv: Close ends the scheduler's Recv promptly.
func TestCloseEndsServerRecv(t *testing.T) {
	hello := make(chan struct{}, 1)
	recvErr := make(chan error, 1)
	addr := startServer(t, nil, func(s ServerStream) error {
		if _, err := s.Recv(); err != nil {
			return err
		}
		hello <- struct{}{}
		_, err := s.Recv()
		recvErr <- err
		return err
	})
	c := dial(t, addr, nil)
	if err := c.Send(&Up{Kind: UpHello, Front: "f"}); err != nil {
		t.Fatal(err)
	}
	recvWithin(t, hello, "hello")
	start := time.Now()
	c.Close()
	if err := recvWithin(t, recvErr, "server Recv after Close"); err == nil {
		t.Error("server Recv after Close = nil")
	}
	t.Logf("server Recv ended %v after Close", time.Since(start))
	if _, err := c.Recv(); err == nil {
		t.Error("client Recv after Close = nil")
	}
}

// TestDialContext: ctx bounds the opening only.
func TestDialContext(t *testing.T) {
	addr := startServer(t, nil, func(s ServerStream) error {
		for {
			u, err := s.Recv()
			if err != nil {
				return err
			}
			if err := s.Send(&Down{Kind: DownWelcome, Scheduler: u.Front}); err != nil {
				return err
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	c, err := Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cancel()
	if err := c.Send(&Up{Kind: UpHello, Front: "f"}); err != nil {
		t.Fatal(err)
	}
	if d, err := c.Recv(); err != nil || d.Scheduler != "f" {
		t.Fatalf("Recv after the dial context ended = %+v, %v", d, err)
	}

	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	if c, err := Dial(done, addr, nil); err == nil {
		c.Close()
		t.Error("Dial with a done context succeeded")
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	_ = lis.Close()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := Dial(ctx, closed, nil); err == nil {
		c.Close()
		t.Error("Dial to a closed port succeeded")
	} else if !strings.HasPrefix(err.Error(), "peer: ") {
		t.Errorf("Dial error %q lacks the peer: prefix", err)
	}
}
