package envoysim

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Timer test durations. Every timer test runs in a testing/synctest bubble
// with in-memory connections: time is fake and moves only when every
// goroutine waits, so a timer fires at its exact instant and the tests
// assert exact durations. base stands in for Envoy's 200 ms message timeout
// where the timer is expected to fire; slowBase is a timer an override
// beats, and holdPast answers after slowBase.
const (
	base     = 100 * time.Millisecond
	slowBase = 250 * time.Millisecond
	holdPast = 2 * slowBase
)

// hold answers the request headers after delay, sending the given messages
// first (overrides, typically). It reports how its stream ended on ended.
func hold(route string, delay time.Duration, ended chan<- string, first ...*extprocv3.ProcessingResponse) processFunc {
	return func(s stream) error {
		if _, err := s.Recv(); err != nil {
			return err
		}
		for _, m := range first {
			if err := s.Send(m); err != nil {
				return err
			}
		}
		select {
		case <-time.After(delay):
		case <-s.Context().Done():
		}
		_ = s.Send(headersReply(setHeader(DefaultDestinationHeader, route)))
		_, err := s.Recv()
		if ended != nil {
			ended <- endOf(s, err)
		}
		return nil
	}
}

// RequestMessageTimeout: no answer within message_timeout gives 504 and
// resets the stream.
func TestRequestMessageTimeout_504(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addr, _ := recordingMemBackend(t)
		ended := make(chan string, 1)
		cfg := headersOnly()
		cfg.MessageTimeout = base
		sim := newSim(t, cfg, hold(addr, time.Second, ended))
		start := time.Now()
		resp, err := sim.Do(t.Context(), Request{})
		wantStatus(t, resp, err, http.StatusGatewayTimeout)
		if elapsed := time.Since(start); elapsed != base {
			t.Errorf("504 after %v, want the %v timer", elapsed, base)
		}
		if resp.Details != "ext_proc_error_per-message_timeout_exceeded" || sim.Stats().MessageTimeouts != 1 {
			t.Errorf("details %q stats %+v", resp.Details, sim.Stats())
		}
		if got := waitFor(t, ended, "server stream end"); got != "cancelled" {
			t.Errorf("server saw %s, want the stream reset", got)
		}
	})
}

// With failure_mode_allow a timeout lets the request continue unmodified.
func TestRequestMessageTimeout_FailureModeAllow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addr, _ := recordingMemBackend(t)
		cfg := headersOnly()
		cfg.MessageTimeout = base
		cfg.FailureModeAllow = true
		sim := newSim(t, cfg, hold("10.0.0.1:1", time.Second, nil))
		resp, err := sim.Do(t.Context(), Request{Header: http.Header{DefaultDestinationHeader: {addr}}})
		wantStatus(t, resp, err, http.StatusOK)
		if st := sim.Stats(); st.MessageTimeouts != 1 || st.FailureModeAllowed != 1 {
			t.Errorf("stats %+v", st)
		}
	})
}

// RequestMessageNewTimeoutNoMutation: an accepted override holds the request
// past the base timer.
func TestOverride_Accepted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addr, _ := recordingMemBackend(t)
		cfg := headersOnly()
		cfg.MessageTimeout = slowBase
		cfg.MaxMessageTimeout = 5 * time.Second
		sim := newSim(t, cfg, hold(addr, holdPast, nil, override(2*time.Second)))
		start := time.Now()
		resp, err := sim.Do(t.Context(), Request{})
		wantStatus(t, resp, err, http.StatusOK)
		if elapsed := time.Since(start); elapsed != holdPast {
			t.Errorf("answered after %v, want the server's %v", elapsed, holdPast)
		}
		if st := sim.Stats(); st.OverrideMessageTimeoutReceived != 1 || st.OverrideMessageTimeoutIgnored != 0 {
			t.Errorf("stats %+v, want one accepted override", st)
		}
	})
}

// RequestMessageNoMutationMultipleNewTimeout: only the first override per
// message counts; a second, shorter one is ignored.
func TestOverride_OnlyFirstCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addr, _ := recordingMemBackend(t)
		cfg := headersOnly()
		cfg.MessageTimeout = slowBase
		cfg.MaxMessageTimeout = 5 * time.Second
		sim := newSim(t, cfg, hold(addr, holdPast, nil, override(2*time.Second), override(time.Millisecond)))
		resp, err := sim.Do(t.Context(), Request{})
		wantStatus(t, resp, err, http.StatusOK)
		if st := sim.Stats(); st.OverrideMessageTimeoutReceived != 1 || st.OverrideMessageTimeoutIgnored != 1 {
			t.Errorf("stats %+v, want one accepted and one ignored override", st)
		}
	})
}

// RequestMessageNewTimeoutNegativeTest / OutOfBounds: rejected overrides
// leave the base timer running, so the request gets 504.
func TestOverride_Rejected(t *testing.T) {
	tests := []struct {
		name     string
		max      time.Duration
		override *extprocv3.ProcessingResponse
	}{
		{"zero", time.Second, override(0)},
		{"below 1ms", time.Second, override(500 * time.Microsecond)},
		{"above max", 100 * time.Millisecond, override(200 * time.Millisecond)},
		{"max unset", 0, override(500 * time.Millisecond)},
		{"negative", time.Second, override(-time.Second)},
		{"invalid duration", time.Second, &extprocv3.ProcessingResponse{
			OverrideMessageTimeout: &durationpb.Duration{Seconds: 1, Nanos: -5}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := headersOnly()
				cfg.MessageTimeout = base
				cfg.MaxMessageTimeout = tt.max
				sim := newSim(t, cfg, hold("127.0.0.1:1", 4*base, nil, tt.override))
				start := time.Now()
				resp, err := sim.Do(t.Context(), Request{})
				wantStatus(t, resp, err, http.StatusGatewayTimeout)
				if elapsed := time.Since(start); elapsed != base {
					t.Errorf("504 after %v, want the base timer of %v", elapsed, base)
				}
				if st := sim.Stats(); st.OverrideMessageTimeoutIgnored != 1 || st.OverrideMessageTimeoutReceived != 0 {
					t.Errorf("stats %+v, want one ignored override", st)
				}
			})
		})
	}
}

// The new timer counts from the override's receipt and replaces the base
// one, even when it is shorter.
func TestOverride_ShorterTimerFires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := headersOnly()
		cfg.MessageTimeout = 2 * time.Second
		cfg.MaxMessageTimeout = 2 * time.Second
		sim := newSim(t, cfg, hold("127.0.0.1:1", 3*time.Second, nil, override(base)))
		start := time.Now()
		resp, err := sim.Do(t.Context(), Request{})
		wantStatus(t, resp, err, http.StatusGatewayTimeout)
		if elapsed := time.Since(start); elapsed != base {
			t.Errorf("504 after %v, want the %v override", elapsed, base)
		}
	})
}

// Each message gets a fresh timer and a fresh override allowance: in
// BUFFERED mode the server may extend both the headers and the body message.
func TestOverride_FreshAllowancePerMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addr, _ := recordingMemBackend(t)
		cfg := Config{Mode: mode(bodyBuffered, false, bodyNone), MessageTimeout: slowBase, MaxMessageTimeout: 5 * time.Second}
		sim := newSim(t, cfg, func(s stream) error {
			for _, reply := range []*extprocv3.ProcessingResponse{
				headersReply(),
				{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
					Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
						SetHeaders: []*corev3.HeaderValueOption{setHeader(DefaultDestinationHeader, addr)}}}}}},
			} {
				if _, err := s.Recv(); err != nil {
					return err
				}
				_ = s.Send(override(2 * time.Second))
				time.Sleep(holdPast)
				_ = s.Send(reply)
			}
			_, err := s.Recv()
			return err
		})
		resp, err := sim.Do(t.Context(), Request{Method: http.MethodPost, Body: []byte(`{"model":"m"}`)})
		wantStatus(t, resp, err, http.StatusOK)
		if st := sim.Stats(); st.OverrideMessageTimeoutReceived != 2 {
			t.Errorf("stats %+v, want two accepted overrides", st)
		}
	})
}

// FULL_DUPLEX_STREAMED has no message timer at all, so an override is
// ignored and a slow server never times out.
func TestFullDuplex_NoTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addr, _ := recordingMemBackend(t)
		cfg := Config{Mode: mode(bodyFullDuplex, false, bodyNone), MessageTimeout: base, MaxMessageTimeout: time.Second}
		cfg.Mode.RequestTrailerMode = sendMode
		sim := newSim(t, cfg, hold(addr, 3*base, nil, override(100*time.Millisecond)))
		resp, err := sim.Do(t.Context(), Request{})
		wantStatus(t, resp, err, http.StatusOK)
		if st := sim.Stats(); st.MessageTimeouts != 0 || st.OverrideMessageTimeoutIgnored != 1 {
			t.Errorf("stats %+v, want no timeout and an ignored override", st)
		}
	})
}

// ResponseMessageTimeout: the response direction has its own timer.
func TestResponseMessageTimeout_504(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addr, _ := recordingMemBackend(t)
		cfg := Config{Mode: mode(bodyNone, true, bodyNone), MessageTimeout: base}
		sim := newSim(t, cfg, func(s stream) error {
			m, _ := s.Recv()
			_ = s.Send(continueFor(m, addr))
			_, _ = s.Recv() // response_headers, never answered
			<-s.Context().Done()
			return nil
		})
		resp, err := sim.Do(t.Context(), Request{})
		wantStatus(t, resp, err, http.StatusGatewayTimeout)
		if resp.Endpoint != addr {
			t.Errorf("endpoint %q, want %q", resp.Endpoint, addr)
		}
	})
}
