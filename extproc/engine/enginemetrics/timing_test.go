package enginemetrics

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// roundTripper answers requests in memory, so the scraper runs inside a
// synctest bubble with its fake clock.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestScraper_Timing checks the schedule with a fake clock: every target
// is read at once on start, then every interval within the jitter; a
// target that does not answer fails at exactly the timeout, and its
// neighbour's readings keep arriving on time.
func TestScraper_Timing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var (
			mu    sync.Mutex
			reads = map[string][]time.Duration{}
		)
		client := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			reads[r.URL.Host] = append(reads[r.URL.Host], time.Since(start))
			mu.Unlock()
			if r.URL.Host == "slow" {
				<-r.Context().Done()
				return nil, r.Context().Err()
			}
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(goodBody)), Request: r}, nil
		})}
		var rounds []Round
		s := New(Config{Client: client}, func(r Round) { rounds = append(rounds, r) })
		s.SetTargets([]Target{{Worker: "fast", URL: "http://fast/metrics"}, {Worker: "slow", URL: "http://slow/metrics"}})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		time.Sleep(2050 * time.Millisecond)
		cancel()
		<-done

		fast := reads["fast"]
		if len(fast) < 4 || fast[0] != 0 {
			t.Fatalf("fast read at %v; want at start and about every %v", fast, DefaultInterval)
		}
		lo := time.Duration(float64(DefaultInterval) * (1 - DefaultJitter))
		hi := time.Duration(float64(DefaultInterval) * (1 + DefaultJitter))
		for i := 1; i < len(fast); i++ {
			if gap := fast[i] - fast[i-1]; gap < lo || gap > hi {
				t.Errorf("fast read %d after %v; want within [%v, %v]", i, gap, lo, hi)
			}
		}
		// slow: at 0, fails at the timeout, then waits an interval.
		slow := reads["slow"]
		if len(slow) < 2 || slow[0] != 0 || slow[1] < DefaultTimeout+lo || slow[1] > DefaultTimeout+hi {
			t.Errorf("slow read at %v; want at 0 and one interval after its %v timeout", slow, DefaultTimeout)
		}
		var timeouts, loads int
		var first time.Duration = -1
		for _, r := range rounds {
			loads += len(r.Loads)
			if len(r.Loads) > 0 && first < 0 {
				first = r.At.Sub(start)
			}
			for _, res := range r.Results {
				if res.Worker == "slow" {
					if res.Reason != ReasonTimeout || res.Duration != DefaultTimeout {
						t.Errorf("slow result %v after %v; want a timeout after %v", res.Reason, res.Duration, DefaultTimeout)
					}
					timeouts++
				}
			}
		}
		// Every fast reading made before the last round was handed over
		// (a read completes at the instant it starts: the transport is in
		// memory; one at the very instant of the last round may miss it).
		handed := 0
		for _, at := range fast {
			if at < rounds[len(rounds)-1].At.Sub(start) {
				handed++
			}
		}
		if loads < handed || loads > len(fast) || handed < 3 || timeouts < 2 {
			t.Errorf("%d loads for %d fast reads handed over (%d made), %d slow timeouts", loads, handed, len(fast), timeouts)
		}
		if first < 0 || first > DefaultInterval/5 {
			t.Errorf("first reading handed over at %v; want within a fifth of an interval", first)
		}
	})
}

// TestScraper_RemovedMidScrape: a worker removed while its scrape hangs
// has the scrape cancelled and reports nothing more; the others go on.
func TestScraper_RemovedMidScrape(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started := make(chan struct{}, 1)
		client := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.URL.Host == "leaving" {
				select {
				case started <- struct{}{}:
				default:
				}
				<-r.Context().Done()
				return nil, r.Context().Err()
			}
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(goodBody)), Request: r}, nil
		})}
		var mu sync.Mutex
		results := map[string]int{}
		s := New(Config{Client: client, Timeout: time.Minute, Interval: time.Second}, func(r Round) {
			mu.Lock()
			defer mu.Unlock()
			for _, res := range r.Results {
				results[res.Worker]++
			}
		})
		stay := Target{Worker: "stay", URL: "http://stay/metrics"}
		s.SetTargets([]Target{stay, {Worker: "leaving", URL: "http://leaving/metrics"}})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		<-started
		s.SetTargets([]Target{stay})
		synctest.Wait() // the leaving worker's loop has returned
		time.Sleep(3 * time.Second)
		cancel()
		<-done
		if results["leaving"] != 0 || results["stay"] < 3 {
			t.Errorf("results %v; want none from the removed worker, one a second from the other", results)
		}
	})
}
