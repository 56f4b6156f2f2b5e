package enginemetrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

const goodBody = "vllm:num_requests_waiting{engine=\"0\"} 2\nvllm:num_requests_running{engine=\"0\"} 1\n"

// TestScraper_FaultsAreCountedAndNeverBlock runs a healthy worker beside
// one that hangs past the timeout, one answering 500, one sending garbage
// and one that disappears mid-body: the healthy worker's loads keep
// arriving every round, and each fault is counted under its reason.
func TestScraper_FaultsAreCountedAndNeverBlock(t *testing.T) {
	handlers := map[string]http.HandlerFunc{
		"good": func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(goodBody)) },
		"hang": func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
		"500":  func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) },
		"junk": func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>not metrics{{{\n")) },
		"gone": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "1000")
			_, _ = w.Write([]byte("vllm:num_requests_wai"))
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		},
	}
	var targets []Target
	for id, h := range handlers {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		targets = append(targets, Target{Worker: id, URL: srv.URL + "/metrics"})
	}
	var (
		mu     sync.Mutex
		rounds []Round
	)
	got := make(chan struct{}, 1)
	s := New(Config{Interval: 60 * time.Millisecond, Timeout: 40 * time.Millisecond, MaxInFlight: 2}, func(r Round) {
		mu.Lock()
		rounds = append(rounds, r)
		mu.Unlock()
		select {
		case got <- struct{}{}:
		default:
		}
	})
	s.SetTargets(targets)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	goodLoads := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range rounds {
			for _, l := range r.Loads {
				if l.Worker == "good" {
					n++
				}
				if l.Worker != "good" {
					t.Errorf("load from failing worker %s", l.Worker)
				}
			}
		}
		return n
	}
	deadline := time.After(10 * time.Second)
	for goodLoads() < 3 || failures(s, "hang", ReasonTimeout).value() < 1 {
		select {
		case <-got:
		case <-deadline:
			t.Fatalf("no progress: %d good loads", goodLoads())
		}
	}
	cancel()
	<-done
	for id, reason := range map[string]Reason{"hang": ReasonTimeout, "500": ReasonStatus, "junk": ReasonParse, "gone": ReasonBody} {
		if n := failures(s, id, reason).value(); n < 1 {
			t.Errorf("%s: %s failures = %v, want >= 1", id, reason, n)
		}
	}
	if n := failures(s, "good", ReasonParse).value(); n != 0 {
		t.Errorf("good worker failures = %v", n)
	}
	// A removed worker's series go away.
	s.SetTargets(targets[:0])
	if n := testutil.CollectAndCount(s, "tollgate_engine_scrapes_total"); n != 0 {
		t.Errorf("%d scrape series after removing every target", n)
	}
}

// failures returns a collector of one worker's failure counter.
func failures(s *Scraper, worker string, reason Reason) *filtered {
	return &filtered{s: s, worker: worker, reason: string(reason)}
}

// filtered reads one failure series from the scraper's stats.
type filtered struct {
	s              *Scraper
	worker, reason string
}

func (f *filtered) value() float64 {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	if w := f.s.stats.workers[f.worker]; w != nil {
		return float64(w.failures[Reason(f.reason)])
	}
	return 0
}

func TestResolveURL(t *testing.T) {
	tests := []struct{ give, want string }{
		{"", "http://10.0.0.7:8000/metrics"},
		{"/custom", "http://10.0.0.7:8000/custom"},
		{":9400", "http://10.0.0.7:9400/metrics"},
		{":9400/m", "http://10.0.0.7:9400/m"},
		{"https://x.example/metrics", "https://x.example/metrics"},
	}
	for _, tt := range tests {
		got, err := ResolveURL("10.0.0.7:8000", tt.give)
		if err != nil || got != tt.want {
			t.Errorf("ResolveURL(%q) = %q, %v; want %q", tt.give, got, err, tt.want)
		}
	}
	for _, bad := range []string{"ftp://x/metrics", "metrics", "http://"} {
		if _, err := ResolveURL("10.0.0.7:8000", bad); err == nil || !strings.Contains(err.Error(), "metrics url") {
			t.Errorf("ResolveURL(%q) accepted or unclear: %v", bad, err)
		}
	}
}
