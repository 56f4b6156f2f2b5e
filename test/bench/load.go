package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"

	"github.com/tollgate/tollgate/test/envoysim"
)

// Mode is the ext_proc processing mode of a benchmark run, as the shipped
// Envoy configurations set it.
type Mode string

const (
	// ModeBuffered is envoy/envoy.yaml: request headers SEND, request body
	// BUFFERED, response headers SEND, response body STREAMED.
	ModeBuffered Mode = "buffered"
	// ModeDuplex is envoy/envoy-full-duplex.yaml: the request body
	// FULL_DUPLEX_STREAMED with request trailers SEND, the response as in
	// ModeBuffered.
	ModeDuplex Mode = "duplex"
)

// ParseMode parses a Mode name.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeBuffered, ModeDuplex:
		return m, nil
	}
	return "", fmt.Errorf("bench: unknown mode %q (want buffered or duplex)", s)
}

// ProcessingMode returns the filter's processing_mode for m.
func (m Mode) ProcessingMode() *extprocfilterv3.ProcessingMode {
	pm := &extprocfilterv3.ProcessingMode{
		RequestHeaderMode:  extprocfilterv3.ProcessingMode_SEND,
		RequestBodyMode:    extprocfilterv3.ProcessingMode_BUFFERED,
		RequestTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
		ResponseHeaderMode: extprocfilterv3.ProcessingMode_SEND,
		ResponseBodyMode:   extprocfilterv3.ProcessingMode_STREAMED,
	}
	if m == ModeDuplex {
		pm.RequestBodyMode = extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
		pm.RequestTrailerMode = extprocfilterv3.ProcessingMode_SEND
	}
	return pm
}

// The shipped Envoy configurations' ext_proc timers.
const (
	envoyMessageTimeout    = time.Second
	envoyMaxMessageTimeout = 310 * time.Second
)

// Client is a pool of simulated Envoys (one gRPC connection each, as Envoy
// keeps one per worker thread) in front of one ext_proc server, sending
// pre-built completion requests in turn.
type Client struct {
	sims   []*envoysim.Sim
	bodies [][]byte
	mu     sync.Mutex
	next   int
}

// NewClient connects conns simulated Envoys in mode m to the ext_proc
// server at addr, with bodies of bodyBytes bytes. messageTimeout is the
// filter's message_timeout; 0 means the shipped configurations' 1 s.
func NewClient(addr string, m Mode, conns, bodyBytes int, messageTimeout time.Duration) (*Client, error) {
	bodies, err := CompletionBodies(1024, bodyBytes)
	if err != nil {
		return nil, err
	}
	c := &Client{bodies: bodies}
	for range max(conns, 1) {
		s, err := envoysim.New(envoysim.Config{
			ExtProcAddr:       addr,
			Mode:              m.ProcessingMode(),
			MessageTimeout:    orDefault(messageTimeout, envoyMessageTimeout),
			MaxMessageTimeout: envoyMaxMessageTimeout,
		})
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c.sims = append(c.sims, s)
	}
	return c, nil
}

// Close closes every simulated Envoy.
func (c *Client) Close() error {
	var errs []error
	for _, s := range c.sims {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// Stats sums the counters of every simulated Envoy.
func (c *Client) Stats() envoysim.Stats {
	var t envoysim.Stats
	for _, s := range c.sims {
		st := s.Stats()
		t.StreamsStarted += st.StreamsStarted
		t.MessageTimeouts += st.MessageTimeouts
		t.OverrideMessageTimeoutReceived += st.OverrideMessageTimeoutReceived
		t.OverrideMessageTimeoutIgnored += st.OverrideMessageTimeoutIgnored
		t.SpuriousMsgsReceived += st.SpuriousMsgsReceived
		t.StreamsFailed += st.StreamsFailed
		t.LocalReplies += st.LocalReplies
	}
	return t
}

// Do sends the next completion request through the next simulated Envoy.
func (c *Client) Do(ctx context.Context) (*envoysim.Response, error) {
	c.mu.Lock()
	i := c.next
	c.next++
	c.mu.Unlock()
	body := c.bodies[i%len(c.bodies)]
	return c.sims[i%len(c.sims)].Do(ctx, envoysim.Request{
		Method: http.MethodPost,
		Path:   "/v1/completions",
		Host:   "gateway.bench",
		Header: http.Header{
			"Content-Type":   {"application/json"},
			"Content-Length": {strconv.Itoa(len(body))},
		},
		Body: body,
	})
}

// outcome describes a finished request; err is nil for an HTTP 200.
func outcome(res *envoysim.Response, err error) error {
	switch {
	case err != nil:
		return err
	case res.Status != http.StatusOK:
		return fmt.Errorf("HTTP %d (%s)", res.Status, res.Details)
	}
	return nil
}

// LoadConfig configures RunLoad.
type LoadConfig struct {
	// ExtProcAddr is the ext_proc server, "IP:port".
	ExtProcAddr string
	// Mode is the processing mode.
	Mode Mode
	// Concurrency is the number of requests kept in flight (closed loop).
	Concurrency int
	// Conns is the number of gRPC connections; 0 means 1.
	Conns int
	// BodyBytes is the request body size; 0 means 2048.
	BodyBytes int
	// Warmup runs the same load, unmeasured, before Duration.
	Warmup time.Duration
	// Duration is the measured window.
	Duration time.Duration
}

// LoadResult is one measured window. Latencies are of requests completed in
// the window; Total is the whole exchange as the client sees it, Decision
// the end of request processing (the routing decision, plus the echoed
// body in FULL_DUPLEX_STREAMED mode), both from the request headers.
type LoadResult struct {
	Mode        Mode `json:"mode"`
	Concurrency int  `json:"concurrency"`
	Requests    int  `json:"requests"`
	// Completed counts every request that ended, warm-up and errors
	// included: what the server handled while the load ran.
	Completed  int     `json:"completed"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	RPS        float64 `json:"rps"`

	TotalP50    time.Duration `json:"total_p50_ns"`
	TotalP99    time.Duration `json:"total_p99_ns"`
	DecisionP50 time.Duration `json:"decision_p50_ns"`
	DecisionP99 time.Duration `json:"decision_p99_ns"`
}

// RunLoad keeps Concurrency requests in flight for Warmup plus Duration and
// measures the requests that complete inside the Duration window.
func RunLoad(ctx context.Context, cfg LoadConfig) (*LoadResult, error) {
	if cfg.Concurrency <= 0 || cfg.Duration <= 0 || cfg.Warmup < 0 {
		return nil, fmt.Errorf("bench: load needs a positive concurrency and duration, got %d and %v", cfg.Concurrency, cfg.Duration)
	}
	c, err := NewClient(cfg.ExtProcAddr, cfg.Mode, cfg.Conns, orDefault(cfg.BodyBytes, 2048), 0)
	if err != nil {
		return nil, err
	}
	defer c.Close()

	start := time.Now()
	from, to := start.Add(cfg.Warmup), start.Add(cfg.Warmup+cfg.Duration)
	type sample struct{ total, decision time.Duration }
	var (
		mu       sync.Mutex
		samples  []sample
		errCount int
		complete int
		firstErr error
		wg       sync.WaitGroup
	)
	for range cfg.Concurrency {
		wg.Go(func() {
			var mine []sample
			var errs, n int
			var first error
			for ctx.Err() == nil && time.Now().Before(to) {
				res, err := c.Do(ctx)
				done := time.Now()
				n++
				if done.Before(from) || done.After(to) {
					continue
				}
				if err := outcome(res, err); err != nil {
					errs++
					if first == nil {
						first = err
					}
					continue
				}
				mine = append(mine, sample{res.Timings.Total, res.Timings.Decision})
			}
			mu.Lock()
			samples = append(samples, mine...)
			errCount += errs
			complete += n
			if firstErr == nil {
				firstErr = first
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	total := make([]time.Duration, len(samples))
	decision := make([]time.Duration, len(samples))
	for i, s := range samples {
		total[i], decision[i] = s.total, s.decision
	}
	r := &LoadResult{
		Mode:        cfg.Mode,
		Concurrency: cfg.Concurrency,
		Requests:    len(samples),
		Errors:      errCount,
		Completed:   complete,
		Seconds:     cfg.Duration.Seconds(),
		RPS:         float64(len(samples)) / cfg.Duration.Seconds(),
		TotalP50:    Percentile(total, 50),
		TotalP99:    Percentile(total, 99),
		DecisionP50: Percentile(decision, 50),
		DecisionP99: Percentile(decision, 99),
	}
	if firstErr != nil {
		r.FirstError = firstErr.Error()
	}
	return r, nil
}

// orDefault returns v, or def when v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
