package extproc

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestServer_BufferedTrailersWithoutBodyOutsideAdmission: the probe's
// stream over real gRPC. In BUFFERED mode the headers of a request outside
// admission are answered at once; when trailers follow with no body, only
// the trailers reply is left and it cannot set the route, so a CONTINUE let
// a client-sent x-gateway-destination-endpoint through where no filter
// strips it. tollgate answers with an immediate 400 instead.
func TestServer_BufferedTrailersWithoutBodyOutsideAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startServer(t, Config{}, oneWorker)
		p := proto{req: modeBuffered, resp: modeStreamed}
		cs := ts.open()
		cs.send(reqHeaders(p, "GET", "/v1/models", false, headerDestination, "127.0.0.1:1"))
		if k := cs.recvKinds(1); k[0] != "req_headers" {
			t.Fatalf("headers reply %v", k)
		}
		cs.send(reqTrailers())
		r := cs.recv().GetImmediateResponse()
		if r.GetStatus().GetCode() != http.StatusBadRequest || !strings.Contains(string(r.GetBody()), "trailers and no body") {
			t.Fatalf("trailers without a body: %v", r)
		}
	})
}

// TestServer_StreamEndsCountedByCode: oversized and undecodable messages
// used to end the stream inside gRPC with no metric; every ending is now
// counted by its gRPC code.
func TestServer_StreamEndsCountedByCode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{MaxBodyBytes: 1 << 10}
		ts := startServer(t, cfg, oneWorker)
		p := proto{req: modeBuffered, resp: modeStreamed}

		big := ts.open() // over the gRPC receive limit: ResourceExhausted
		big.send(reqHeaders(p, "POST", "/v1/completions", false), reqBody(strings.Repeat("x", 2<<20), true))
		if err := endSkippingReplies(t, big); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("oversized: %v", err)
		}
		flood := ts.open() // refused by the header limits before decoding
		flood.send(headersMessage(100_000, 0, 0))
		if err := endSkippingReplies(t, flood); status.Code(err) != codes.Internal {
			t.Fatalf("flood: %v", err)
		}
		ok := ts.open()
		ok.send(reqHeaders(p, "GET", "/v1/models", true))
		ok.recvKinds(1)
		ok.finish()

		want := map[string]float64{"ResourceExhausted": 1, "Internal": 1, "OK": 1}
		synctest.Wait()
		for code, n := range want {
			if testutil.ToFloat64(ts.srv.ends.total.WithLabelValues(code)) != n {
				c, _ := testutil.CollectAndFormat(ts.srv.ends.total, expfmt.TypeTextPlain, "tollgate_extproc_streams_total")
				t.Fatalf("tollgate_extproc_streams_total{code=%q} = %v, want %v:\n%s", code, testutil.ToFloat64(ts.srv.ends.total.WithLabelValues(code)), n, c)
			}
		}
	})
}

func TestStreamEnds_LogIsRateLimited(t *testing.T) {
	var logs bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := newStreamEnds(prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&logs, nil)), func() time.Time { return now })
	bad := status.Error(codes.ResourceExhausted, "too big")
	e.ended(1, nil)
	e.ended(2, bad)
	e.ended(3, bad)
	now = now.Add(abnormalLogInterval / 2)
	e.ended(4, bad)
	now = now.Add(abnormalLogInterval)
	e.ended(5, bad)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "request=2") || !strings.Contains(lines[1], "request=5") ||
		!strings.Contains(lines[1], "suppressed_since_last=2") || !strings.Contains(lines[0], "code=ResourceExhausted") {
		t.Fatalf("logs:\n%s", logs.String())
	}
	if got := testutil.ToFloat64(e.total.WithLabelValues("ResourceExhausted")); got != 4 {
		t.Errorf("counted %v", got)
	}
}

// endSkippingReplies waits for the server to end the stream, ignoring the
// replies before.
func endSkippingReplies(t *testing.T, c *clientStream) error {
	t.Helper()
	for {
		select {
		case r := <-c.in:
			if r.err != nil {
				return r.err
			}
		case <-time.After(5 * time.Second):
			t.Fatal("stream not ended within 5 s")
		}
	}
}

// waitActive checks, once the bubble is idle, that n Process streams are
// open.
func waitActive(t *testing.T, s *Server, n int64) {
	t.Helper()
	synctest.Wait()
	if got := s.active.Load(); got != n {
		t.Fatalf("%d streams open, want %d", got, n)
	}
}

// TestServer_IdleStreamsAndStreamCap: a stream that never sends used to
// stay open for good (and hold Drain for the whole shutdown timeout), and
// nothing bounded the number of open streams.
func TestServer_IdleStreamsAndStreamCap(t *testing.T) {
	// The server ends the Recv of a silent stream by cancelling the
	// stream's context (tapStream): gRPC then sends Canceled to the peer,
	// and the server counts and logs the real reason.
	t.Run("no first message", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ts := startServer(t, Config{FirstMessageTimeout: 50 * time.Millisecond}, oneWorker)
			if err := ts.open().end(); status.Code(err) != codes.Canceled {
				t.Fatalf("idle stream: %v", err)
			}
			waitActive(t, ts.srv, 0)
			if got := testutil.ToFloat64(ts.srv.ends.total.WithLabelValues(codes.DeadlineExceeded.String())); got != 1 {
				t.Errorf("%v streams ended DeadlineExceeded, want 1", got)
			}
		})
	})
	t.Run("concurrent stream cap", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ts := startServer(t, Config{MaxConcurrentStreams: 2}, oneWorker)
			a, b := ts.open(), ts.open()
			waitActive(t, ts.srv, 2)
			if err := ts.open().end(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "more than 2 concurrent") {
				t.Fatalf("third stream: %v", err)
			}
			a.cancel()
			b.cancel()
			waitActive(t, ts.srv, 0)
			c := ts.open()
			c.send(reqHeaders(proto{req: modeBuffered}, "GET", "/v1/models", true))
			c.recvKinds(1)
			c.finish()
		})
	})
	t.Run("drain ends streams that sent nothing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ts := startServer(t, Config{DrainDelay: -1, ShutdownTimeout: time.Hour, FirstMessageTimeout: time.Hour}, oneWorker)
			idle := ts.open()
			waitActive(t, ts.srv, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := ts.srv.Drain(ctx); err != nil {
				t.Fatalf("Drain: %v", err)
			}
			if err := idle.end(); status.Code(err) != codes.Canceled {
				t.Fatalf("idle stream: %v", err)
			}
			if got := testutil.ToFloat64(ts.srv.ends.total.WithLabelValues(codes.Unavailable.String())); got != 1 {
				t.Errorf("%v streams ended Unavailable, want 1", got)
			}
		})
	})
}
