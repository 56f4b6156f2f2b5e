package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/test/bench"
	"github.com/tollgate/tollgate/test/envoysim"
)

// startNull serves the null ext_proc server on loopback and returns its
// address.
func startNull(t *testing.T, endpoint string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, newServer(endpoint))
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(l) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return l.Addr().String()
}

// recorder is an upstream that keeps the bodies it received.
type recorder struct {
	mu     sync.Mutex
	bodies [][]byte
	up     *bench.Upstream
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.bodies = append(r.bodies, b)
	r.mu.Unlock()
	req.Body = io.NopCloser(bytes.NewReader(b))
	r.up.ServeHTTP(w, req)
}

func TestNullRoutesEveryMode(t *testing.T) {
	rec := &recorder{up: bench.NewUpstream()}
	up := httptest.NewServer(rec)
	t.Cleanup(up.Close)
	endpoint := strings.TrimPrefix(up.URL, "http://")
	addr := startNull(t, endpoint)
	body, err := bench.CompletionBodies(1, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []bench.Mode{bench.ModeBuffered, bench.ModeDuplex} {
		for _, chunk := range []int{0, 500} {
			sim, err := envoysim.New(envoysim.Config{ExtProcAddr: addr, Mode: mode.ProcessingMode(), RequestChunkSize: chunk})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res, err := sim.Do(ctx, envoysim.Request{Method: http.MethodPost, Path: "/v1/completions", Body: body[0],
				Header: http.Header{"X-Gateway-Destination-Endpoint": {"10.9.9.9:1"}}})
			cancel()
			if err != nil {
				t.Fatalf("%s chunk %d: %v", mode, chunk, err)
			}
			if res.Status != http.StatusOK || res.LocalReply {
				t.Fatalf("%s chunk %d: status %d local %v (%s)", mode, chunk, res.Status, res.LocalReply, res.Details)
			}
			if res.Endpoint != endpoint {
				t.Errorf("%s chunk %d: routed to %q, want %q", mode, chunk, res.Endpoint, endpoint)
			}
			if got := res.Metadata["envoy.lb"].GetFields()[destinationHeader].GetStringValue(); got != endpoint {
				t.Errorf("%s chunk %d: envoy.lb metadata %q, want %q", mode, chunk, got, endpoint)
			}
			if !bytes.Contains(res.Body, []byte(`"completion_tokens":1`)) {
				t.Errorf("%s chunk %d: response body %q", mode, chunk, res.Body)
			}
			st := sim.Stats()
			if st.SpuriousMsgsReceived != 0 || st.MessageTimeouts != 0 || st.StreamsFailed != 0 {
				t.Errorf("%s chunk %d: simulator stats %+v", mode, chunk, st)
			}
			if err := sim.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.bodies) != 4 {
		t.Fatalf("upstream saw %d requests, want 4", len(rec.bodies))
	}
	for i, b := range rec.bodies {
		if !bytes.Equal(b, body[0]) {
			t.Errorf("request %d reached the upstream with a %d-byte body, want the %d bytes sent", i, len(b), len(body[0]))
		}
	}
}

func TestNullRoutesRequestsWithoutBody(t *testing.T) {
	up := httptest.NewServer(bench.NewUpstream())
	t.Cleanup(up.Close)
	endpoint := strings.TrimPrefix(up.URL, "http://")
	sim, err := envoysim.New(envoysim.Config{ExtProcAddr: startNull(t, endpoint), Mode: bench.ModeBuffered.ProcessingMode()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	res, err := sim.Do(context.Background(), envoysim.Request{Method: http.MethodGet, Path: "/v1/models"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != http.StatusOK || res.Endpoint != endpoint {
		t.Fatalf("GET: status %d endpoint %q (%s), want 200 via %s", res.Status, res.Endpoint, res.Details, endpoint)
	}
}

func TestRunRejectsBadEndpoint(t *testing.T) {
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"--endpoint", "worker:8000"}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "not a literal IP:port") {
		t.Fatalf("run: %v, want an endpoint error", err)
	}
}

func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"--endpoint", "127.0.0.1:9"}, pw); _ = pw.Close() }()
	line, err := readLine(pr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(line, `"msg":"serving"`) || !strings.Contains(line, `"grpc":"127.0.0.1:`) {
		t.Fatalf("first log line %q, want the serving line", line)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
}

func readLine(r io.Reader) (string, error) {
	var b []byte
	one := make([]byte, 1)
	for {
		if _, err := r.Read(one); err != nil {
			return string(b), err
		}
		if one[0] == '\n' {
			return string(b), nil
		}
		b = append(b, one[0])
	}
}
