package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HoldConfig configures RunHold.
type HoldConfig struct {
	// ExtProcAddr is tollgate's ext_proc address.
	ExtProcAddr string
	// MetricsURL is the base URL of tollgate's metrics listener.
	MetricsURL string
	// UpstreamURL is the base URL of the Upstream the requests reach.
	UpstreamURL string
	// PID is tollgate's process id, for its resident memory.
	PID int
	// PprofURL, when set, is a base URL serving /debug/pprof/ for the same
	// process; goroutines are counted from it when /metrics has no
	// go_goroutines.
	PprofURL string
	// QueueMetric is the gauge, summed over its series, that counts queued
	// requests; empty means smg_scheduler_queue_depth.
	QueueMetric string
	// Held is the number of requests to hold in tollgate's queue.
	Held int
	// Running is the number of requests parked at the worker first: the
	// worker's slots as tollgate counts them, so that every later request
	// queues.
	Running int
	// Conns is the number of gRPC connections; 0 means 8.
	Conns int
	// BodyBytes is the request body size; 0 means 2048.
	BodyBytes int
	// Warmup is the number of requests sent, and answered, before the base
	// memory is read; 0 means 512.
	Warmup int
	// HeapProfile, when set with PprofURL, is a file that receives the
	// server's heap profile (after a forced collection) while the requests
	// are held, once memory and goroutines have been read.
	HeapProfile string
	// MessageTimeout is the filter's message_timeout; tollgate's
	// --envoy-message-timeout must match it. 0 means 1 s.
	MessageTimeout time.Duration
}

// HoldResult is what RunHold measured. Memory and goroutine deltas are
// against the base (the server after the warm-up with the Running requests
// parked at the worker and nothing queued), divided by Held: the cost of a
// held request alone, not of the running ones in front of it.
type HoldResult struct {
	Held              int     `json:"held"`
	BaseRSS           uint64  `json:"base_rss_bytes"`
	HeldRSS           uint64  `json:"held_rss_bytes"`
	RSSPerHeld        float64 `json:"rss_per_held_bytes"`
	BaseGoroutines    int     `json:"base_goroutines"` // -1: not exposed
	HeldGoroutines    int     `json:"held_goroutines"` // -1: not exposed
	GoroutinesPerHeld float64 `json:"goroutines_per_held"`
	GoroutineSource   string  `json:"goroutine_source"`
	// StackPerHeld and HeapPerHeld split the memory per held request into
	// goroutine stacks and heap spans in use (runtime.MemStats StackInuse
	// and HeapInuse, from pprof); 0 without PprofURL.
	StackPerHeld float64 `json:"stack_per_held_bytes,omitempty"`
	HeapPerHeld  float64 `json:"heap_per_held_bytes,omitempty"`

	Fill          time.Duration `json:"fill_ns"`
	Drain         time.Duration `json:"drain_ns"`
	DrainPerHeld  time.Duration `json:"drain_per_held_ns"`
	Errors        int           `json:"errors"`
	FirstError    string        `json:"first_error,omitempty"`
	EarlyFinishes int           `json:"early_finishes"`
}

// Pacing of the fill: requests go out in batches, and the next batch waits
// until tollgate has queued the last one, so that no request's Envoy
// message timer runs out before tollgate has seen it.
const (
	holdBatch    = 200
	holdPoll     = 20 * time.Millisecond
	holdDeadline = 2 * time.Minute
)

// RunHold parks Running requests at the worker, queues Held more behind
// them in tollgate, reads tollgate's memory and goroutines, then releases
// the worker and times the drain until every request has its response.
func RunHold(ctx context.Context, cfg HoldConfig) (*HoldResult, error) {
	if cfg.Held <= 0 || cfg.Running <= 0 {
		return nil, fmt.Errorf("bench: hold needs positive held and running counts, got %d and %d", cfg.Held, cfg.Running)
	}
	cfg.QueueMetric = orDefault(cfg.QueueMetric, "smg_scheduler_queue_depth")
	cl, err := NewClient(cfg.ExtProcAddr, ModeBuffered, orDefault(cfg.Conns, 8), orDefault(cfg.BodyBytes, 2048), cfg.MessageTimeout)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	h := &holder{cfg: cfg, cl: cl, http: &http.Client{Timeout: 10 * time.Second}}
	ctx, cancel := context.WithTimeout(ctx, holdDeadline)
	defer cancel()
	defer h.wg.Wait()
	defer cancel() // on an early return, ends the requests still out
	return h.run(ctx)
}

// holder is one RunHold.
type holder struct {
	cfg  HoldConfig
	cl   *Client
	http *http.Client

	wg       sync.WaitGroup
	finished atomic.Int64
	mu       sync.Mutex // guards errs and first
	errs     int
	first    error
}

func (h *holder) run(ctx context.Context) (*HoldResult, error) {
	if err := h.warmup(ctx); err != nil {
		return nil, err
	}
	if err := h.post(ctx, "/bench/hold?n="+strconv.Itoa(h.cfg.Running)); err != nil {
		return nil, err
	}
	h.launch(ctx, h.cfg.Running)
	if err := h.waitParked(ctx); err != nil {
		return nil, err
	}
	// The base: the running requests' streams are open, no request is
	// queued, so that the deltas count held requests alone.
	time.Sleep(500 * time.Millisecond)
	r := &HoldResult{Held: h.cfg.Held}
	var err error
	if r.BaseRSS, err = ProcRSS(h.cfg.PID); err != nil {
		return nil, err
	}
	r.BaseGoroutines, r.GoroutineSource = h.goroutines(ctx)
	baseStack, baseHeap := h.memStats(ctx)
	fillStart := time.Now()
	for sent := 0; sent < h.cfg.Held; {
		n := min(holdBatch, h.cfg.Held-sent)
		h.launch(ctx, n)
		sent += n
		if err := h.waitQueued(ctx, sent); err != nil {
			return nil, err
		}
	}
	r.Fill = time.Since(fillStart)
	time.Sleep(time.Second) // let the overrides and the last reads settle
	if r.HeldRSS, err = ProcRSS(h.cfg.PID); err != nil {
		return nil, err
	}
	r.HeldGoroutines, _ = h.goroutines(ctx)
	if stack, heap := h.memStats(ctx); stack > 0 && baseStack > 0 {
		r.StackPerHeld = (stack - baseStack) / float64(h.cfg.Held)
		r.HeapPerHeld = (heap - baseHeap) / float64(h.cfg.Held)
	}
	r.EarlyFinishes = int(h.finished.Load())
	if h.cfg.HeapProfile != "" && h.cfg.PprofURL != "" {
		prof, err := h.get(ctx, h.cfg.PprofURL+"/debug/pprof/heap?gc=1")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(h.cfg.HeapProfile, []byte(prof), 0o644); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}

	drainStart := time.Now()
	if err := h.post(ctx, "/bench/release"); err != nil {
		return nil, err
	}
	h.wg.Wait()
	r.Drain = time.Since(drainStart)
	r.DrainPerHeld = r.Drain / time.Duration(h.cfg.Held)
	r.RSSPerHeld = (float64(r.HeldRSS) - float64(r.BaseRSS)) / float64(h.cfg.Held)
	if r.BaseGoroutines >= 0 && r.HeldGoroutines >= 0 {
		r.GoroutinesPerHeld = float64(r.HeldGoroutines-r.BaseGoroutines) / float64(h.cfg.Held)
	}
	r.Errors = h.errs
	if h.first != nil {
		r.FirstError = h.first.Error()
	}
	return r, ctx.Err()
}

// warmup sends the warm-up requests, 32 at a time, and fails on any error.
func (h *holder) warmup(ctx context.Context) error {
	n := orDefault(h.cfg.Warmup, 512)
	var next atomic.Int64
	errc := make(chan error, 32)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				res, err := h.cl.Do(ctx)
				if err := outcome(res, err); err != nil {
					errc <- fmt.Errorf("bench: warm-up request: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// launch starts n requests that record their outcome when they end.
func (h *holder) launch(ctx context.Context, n int) {
	for range n {
		h.wg.Go(func() {
			res, err := h.cl.Do(ctx)
			h.finished.Add(1)
			if err := outcome(res, err); err != nil {
				h.mu.Lock()
				h.errs++
				if h.first == nil {
					h.first = err
				}
				h.mu.Unlock()
			}
		})
	}
}

// waitParked waits until the worker has parked Running requests.
func (h *holder) waitParked(ctx context.Context) error {
	return h.until(ctx, "the worker to park its running requests", func() (bool, error) {
		var v struct{ Parked int }
		if err := h.getJSON(ctx, h.cfg.UpstreamURL+"/bench/parked", &v); err != nil {
			return false, err
		}
		return v.Parked >= h.cfg.Running, nil
	})
}

// waitQueued waits until tollgate's queue holds at least n requests.
func (h *holder) waitQueued(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	return h.until(ctx, fmt.Sprintf("%d queued requests", n), func() (bool, error) {
		q, err := h.metric(ctx, h.cfg.QueueMetric)
		return q >= float64(n), err
	})
}

// until polls cond until it holds, an early finish shows that requests
// are not being held, or ctx ends.
func (h *holder) until(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if f := h.finished.Load(); f > 0 {
			h.mu.Lock()
			defer h.mu.Unlock()
			st := h.cl.Stats()
			return fmt.Errorf("bench: waiting for %s: %d requests ended while they should be held (first error: %v; "+
				"simulator: %d streams, %d message timeouts, %d overrides accepted, %d ignored)",
				what, f, h.first, st.StreamsStarted, st.MessageTimeouts, st.OverrideMessageTimeoutReceived, st.OverrideMessageTimeoutIgnored)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: waiting for %s: %w", what, ctx.Err())
		case <-time.After(holdPoll):
		}
	}
}

// metric scrapes tollgate's /metrics and sums the series of name.
func (h *holder) metric(ctx context.Context, name string) (float64, error) {
	text, err := h.get(ctx, h.cfg.MetricsURL+"/metrics")
	if err != nil {
		return 0, err
	}
	samples, err := ParsePromText(text)
	if err != nil {
		return 0, err
	}
	v, ok := SumSamples(samples, name)
	if !ok {
		return 0, fmt.Errorf("bench: tollgate's /metrics has no %s", name)
	}
	return v, nil
}

// goroutines counts the server's goroutines: go_goroutines from /metrics,
// else the pprof goroutine profile, else -1.
func (h *holder) goroutines(ctx context.Context) (int, string) {
	if v, err := h.metric(ctx, "go_goroutines"); err == nil {
		return int(v), "go_goroutines"
	}
	if h.cfg.PprofURL == "" {
		return -1, "not exposed"
	}
	text, err := h.get(ctx, h.cfg.PprofURL+"/debug/pprof/goroutine?debug=1")
	if err != nil {
		return -1, "not exposed"
	}
	first, _, _ := strings.Cut(text, "\n")
	n, err := strconv.Atoi(strings.TrimPrefix(first, "goroutine profile: total "))
	if err != nil {
		return -1, "not exposed"
	}
	return n, "pprof"
}

// memStats returns StackInuse and HeapInuse of the server from the pprof
// heap profile's MemStats comment lines, or zeros without pprof.
func (h *holder) memStats(ctx context.Context) (stack, heap float64) {
	if h.cfg.PprofURL == "" {
		return 0, 0
	}
	text, err := h.get(ctx, h.cfg.PprofURL+"/debug/pprof/heap?debug=1")
	if err != nil {
		return 0, 0
	}
	return memStatsLines(text)
}

// memStatsLines reads "# Stack = inuse / sys" and "# HeapInuse = n" of a
// debug=1 heap profile.
func memStatsLines(text string) (stack, heap float64) {
	for l := range strings.SplitSeq(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(l, "# "), " = ")
		if !ok {
			continue
		}
		first, _, _ := strings.Cut(v, " ")
		n, err := strconv.ParseFloat(first, 64)
		if err != nil {
			continue
		}
		switch k {
		case "Stack":
			stack = n
		case "HeapInuse":
			heap = n
		}
	}
	return stack, heap
}

func (h *holder) get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	return h.do(req)
}

func (h *holder) getJSON(ctx context.Context, url string, v any) error {
	text, err := h.get(ctx, url)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(text), v); err != nil {
		return fmt.Errorf("bench: %s: %w", url, err)
	}
	return nil
}

func (h *holder) post(ctx context.Context, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.cfg.UpstreamURL+path, nil)
	if err != nil {
		return err
	}
	_, err = h.do(req)
	return err
}

func (h *holder) do(req *http.Request) (string, error) {
	resp, err := h.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, bufio.NewReader(resp.Body)); err != nil {
		return "", fmt.Errorf("bench: %s: %w", req.URL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("bench: %s %s: HTTP %d: %s", req.Method, req.URL, resp.StatusCode, strings.TrimSpace(b.String()))
	}
	return b.String(), nil
}
