package envoysim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// holdForever receives the request headers, reports that on held, and waits
// for the stream to end, reporting how on ended. With ignoreEOF it keeps
// waiting after a half-close until its context ends, and reports how long
// that took (run it in a testing/synctest bubble for an exact figure).
func holdForever(held chan<- struct{}, ended chan<- string, ignoreEOF bool) processFunc {
	return func(s stream) error {
		if _, err := s.Recv(); err != nil {
			return err
		}
		held <- struct{}{}
		_, err := s.Recv()
		how := endOf(s, err)
		if how == "eof" && ignoreEOF {
			start := time.Now()
			<-s.Context().Done()
			how = fmt.Sprintf("eof, then reset after %v", time.Since(start))
		}
		ended <- how
		return nil
	}
}

// A client that goes away while the request is held: by default the stream
// is reset and the server's context is cancelled.
func TestDisconnectWhileHeld_Reset(t *testing.T) {
	held, ended := make(chan struct{}, 1), make(chan string, 1)
	sim := newSim(t, headersOnly(), holdForever(held, ended, false))
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		waitFor(t, held, "request held")
		cancel()
	}()
	_, err := sim.Do(ctx, Request{})
	if !errors.Is(err, ErrDisconnected) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrDisconnected wrapping context.Canceled", err)
	}
	if got := waitFor(t, ended, "server stream end"); got != "cancelled" {
		t.Errorf("server saw %s, want cancelled", got)
	}
	if n := sim.Stats().DownstreamDisconnects; n != 1 {
		t.Errorf("downstream disconnects = %d", n)
	}
}

// With graceful close the server sees io.EOF and may end the stream itself.
func TestDisconnectWhileHeld_HalfClose(t *testing.T) {
	held, ended := make(chan struct{}, 1), make(chan string, 1)
	cfg := headersOnly()
	cfg.Close = CloseGraceful
	sim := newSim(t, cfg, holdForever(held, ended, false))
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		waitFor(t, held, "request held")
		cancel()
	}()
	if _, err := sim.Do(ctx, Request{}); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("err = %v, want ErrDisconnected", err)
	}
	if got := waitFor(t, ended, "server stream end"); got != "eof" {
		t.Errorf("server saw %s, want eof", got)
	}
}

// A server that ignores the half-close is reset after the remote close
// timeout.
func TestHalfClose_ResetAfterRemoteCloseTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		held, ended := make(chan struct{}, 1), make(chan string, 1)
		cfg := headersOnly()
		cfg.RemoteCloseTimeout = 100 * time.Millisecond
		sim := newSim(t, cfg, holdForever(held, ended, true))
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			waitFor(t, held, "request held")
			cancel()
		}()
		// Per-request style: graceful although the Sim resets by default.
		if _, err := sim.Do(ctx, Request{Close: CloseGraceful}); !errors.Is(err, ErrDisconnected) {
			t.Fatalf("err = %v, want ErrDisconnected", err)
		}
		if got := waitFor(t, ended, "server stream end"); got != "eof, then reset after 100ms" {
			t.Errorf("server saw %q, want eof, then reset after the remote close timeout of 100ms", got)
		}
	})
}

// DisconnectAt can end the request at a precise stage: after the routing
// decision but before forwarding, or while the response streams (the
// upstream request is cancelled too).
func TestDisconnectAt(t *testing.T) {
	t.Run("before forwarding", func(t *testing.T) {
		addr, seen := recordingBackend(t)
		sim := newSim(t, headersOnly(), serveAll(nil, addr))
		_, err := sim.Do(t.Context(), Request{DisconnectAt: func(s Stage) bool { return s == StageUpstreamRequest }})
		if !errors.Is(err, ErrDisconnected) || !errors.Is(err, errHookDisconnect) {
			t.Fatalf("err = %v", err)
		}
		if n := len(seen()); n != 0 {
			t.Errorf("upstream got %d requests, want none", n)
		}
	})
	t.Run("during the response", func(t *testing.T) {
		upstreamGone := make(chan struct{})
		addr := backend(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("data: first\n\n"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			close(upstreamGone)
		})
		ended := make(chan string, 1)
		sim := newSim(t, Config{Mode: mode(bodyNone, true, bodyStreamed)}, func(s stream) error {
			for {
				m, err := s.Recv()
				if err != nil {
					ended <- endOf(s, err)
					return nil
				}
				_ = s.Send(continueFor(m, addr))
			}
		})
		_, err := sim.Do(t.Context(), Request{DisconnectAt: func(s Stage) bool { return s == StageResponseBody }})
		if !errors.Is(err, ErrDisconnected) {
			t.Fatalf("err = %v", err)
		}
		waitFor(t, upstreamGone, "upstream request cancelled")
		if got := waitFor(t, ended, "server stream end"); got != "cancelled" {
			t.Errorf("server saw %s", got)
		}
	})
}

// StageResponseCommitted comes once the response headers reached the
// client; a client leaving there gets nothing more.
func TestDisconnectAtResponseCommitted(t *testing.T) {
	addr, _ := recordingBackend(t)
	var stages []Stage
	sim := newSim(t, headersOnly(), serveAll(nil, addr))
	resp, err := sim.Do(t.Context(), Request{DisconnectAt: func(s Stage) bool { stages = append(stages, s); return false }})
	wantStatus(t, resp, err, http.StatusOK)
	if i := slices.Index(stages, StageResponseCommitted); i < 0 || slices.Index(stages, StageResponseBody) < i {
		t.Errorf("stages %v", stages)
	}
	_, err = sim.Do(t.Context(), Request{DisconnectAt: func(s Stage) bool { return s == StageResponseCommitted }})
	if !errors.Is(err, ErrDisconnected) {
		t.Fatalf("err = %v", err)
	}
}

// After the final reply the stream closes in the configured style: reset by
// default, half-close with graceful close.
func TestStreamCloseAfterFinalReply(t *testing.T) {
	for _, tt := range []struct {
		style CloseStyle
		want  string
	}{
		{CloseDefault, "cancelled"},
		{CloseGraceful, "eof"},
	} {
		t.Run(tt.style.String(), func(t *testing.T) {
			addr, _ := recordingBackend(t)
			ended := make(chan string, 1)
			cfg := headersOnly()
			cfg.Close = tt.style
			sim := newSim(t, cfg, func(s stream) error {
				_, _ = s.Recv()
				_ = s.Send(headersReply(setHeader(DefaultDestinationHeader, addr)))
				_, err := s.Recv()
				ended <- endOf(s, err)
				return nil
			})
			resp, err := sim.Do(t.Context(), Request{})
			wantStatus(t, resp, err, http.StatusOK)
			if got := waitFor(t, ended, "server stream end"); got != tt.want {
				t.Errorf("server saw %s, want %s", got, tt.want)
			}
		})
	}
}

// Concurrent requests share one connection, each on its own stream.
func TestConcurrentRequests(t *testing.T) {
	addr, seen := recordingBackend(t)
	sim := newSim(t, headersOnly(), serveAll(nil, addr))
	const n = 20
	errs := make(chan error, n)
	for range n {
		go func() {
			resp, err := sim.Do(t.Context(), Request{})
			if err == nil && resp.Status != http.StatusOK {
				err = fmt.Errorf("status %d", resp.Status)
			}
			errs <- err
		}()
	}
	for range n {
		if err := waitFor(t, errs, "request"); err != nil {
			t.Error(err)
		}
	}
	if st := sim.Stats(); st.StreamsStarted != n || len(seen()) != n {
		t.Errorf("stats %+v upstream %d", st, len(seen()))
	}
}

// Do after Close fails.
func TestDoAfterClose(t *testing.T) {
	sim := newSim(t, headersOnly(), serveAll(nil, ""))
	if err := sim.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Do(t.Context(), Request{}); !errors.Is(err, ErrClosed) {
		t.Errorf("err = %v, want ErrClosed", err)
	}
}
