//go:build unix

package enginemetrics

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/test/bench"
	"github.com/tollgate/tollgate/test/mockworker"
)

// endpointsEnv makes TestHelperEndpoints serve that many engine endpoints
// for BenchmarkScrape_Fleet, in a process of their own so that the
// benchmark's CPU time is the scraper's alone.
const endpointsEnv = "TOLLGATE_BENCH_ENGINE_ENDPOINTS"

// exposition is a mockworker engine's /metrics in vLLM naming, with a few
// requests' worth of histogram samples.
func exposition(tb testing.TB) []byte {
	tb.Helper()
	w, err := mockworker.New(mockworker.Config{Speed: 1000})
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	for range 3 {
		body := `{"model":"mock-model","prompt":[1,2,3,4,5,6,7,8],"max_tokens":4}`
		rec := httptest.NewRecorder()
		w.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body)))
	}
	rec := httptest.NewRecorder()
	w.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.Bytes()
}

// TestHelperEndpoints is not a test: run by BenchmarkScrape_Fleet with
// endpointsEnv set, it serves that many endpoints, prints their addresses
// and serves until its stdin closes.
func TestHelperEndpoints(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(endpointsEnv))
	if n <= 0 {
		t.Skip("helper process for BenchmarkScrape_Fleet")
	}
	body := exposition(t)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(body)
	})
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		addrs = append(addrs, l.Addr().String())
	}
	fmt.Printf("ADDRS %s\n", strings.Join(addrs, ","))
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the benchmark closes stdin
}

// BenchmarkParse parses one engine exposition.
func BenchmarkParse(b *testing.B) {
	body := exposition(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(bytes.NewReader(body)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScrape_Fleet runs the scraper against 256 endpoints served by a
// helper process, each iteration for scrapeWindow of wall time, and reports
// the scraper's CPU time (this process, user + system) per worker per
// second, at the default interval and at the peers' 50 ms for comparison.
func BenchmarkScrape_Fleet(b *testing.B) {
	const workers = 256
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperEndpoints$", "-test.v")
	cmd.Env = append(os.Environ(), endpointsEnv+"="+strconv.Itoa(workers))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	var addrs []string
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "ADDRS "); ok {
			addrs = strings.Split(rest, ",")
			break
		}
	}
	if len(addrs) != workers {
		b.Fatalf("helper served %d endpoints, want %d", len(addrs), workers)
	}
	targets := make([]Target, workers)
	for i, a := range addrs {
		targets[i] = Target{Worker: "w" + strconv.Itoa(i), URL: DefaultURL(a)}
	}
	for _, interval := range []time.Duration{DefaultInterval, 50 * time.Millisecond} {
		b.Run(fmt.Sprintf("workers=%d/interval=%s", workers, interval), func(b *testing.B) {
			var cpu, wall time.Duration
			var loads, failed int
			for b.Loop() {
				s := New(Config{Interval: interval, Timeout: DefaultTimeout}, func(r Round) {
					loads += len(r.Loads)
					for _, res := range r.Results {
						if res.Err != nil {
							failed++
						}
					}
				})
				s.SetTargets(targets)
				ctx, cancel := contextWithTimeout(scrapeWindow)
				c0, t0 := bench.SelfCPU(), time.Now()
				s.Run(ctx)
				cpu += bench.SelfCPU() - c0
				wall += time.Since(t0)
				cancel()
			}
			perWorkerSecond := cpu.Seconds() / (float64(workers) * wall.Seconds())
			b.ReportMetric(perWorkerSecond*1e6, "cpu-µs/worker/s")
			b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
			b.ReportMetric(float64(loads)/wall.Seconds(), "loads/s")
			b.ReportMetric(float64(failed), "failures")
		})
	}
}

// scrapeWindow is how long each benchmark iteration scrapes.
const scrapeWindow = 5 * time.Second

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
