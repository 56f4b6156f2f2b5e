package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
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

// String and Set make a *Mode a flag.Value, parsed by ParseMode.
func (m *Mode) String() string {
	if m == nil {
		return ""
	}
	return string(*m)
}

// Set parses s into m.
func (m *Mode) Set(s string) error {
	v, err := ParseMode(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
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
	header http.Header // added to every request's headers
	mu     sync.Mutex
	next   int
}

// NewClient connects conns simulated Envoys in mode m to the ext_proc
// server at addr, with bodies of bodyBytes bytes. messageTimeout is the
// filter's message_timeout; 0 means the shipped configurations' 1 s.
func NewClient(addr string, m Mode, conns, bodyBytes int, messageTimeout time.Duration) (*Client, error) {
	return NewClientWith(ClientOptions{Addr: addr, Mode: m, Conns: conns, BodyBytes: bodyBytes, MessageTimeout: messageTimeout})
}

// ClientOptions configure NewClientWith.
type ClientOptions struct {
	// Addr is the ext_proc server, "IP:port".
	Addr string
	// Mode is the processing mode.
	Mode Mode
	// Conns is the number of simulated Envoys (gRPC connections); 0 means 1.
	Conns int
	// BodyBytes is the size of the completion bodies; 0 means 2048.
	BodyBytes int
	// MessageTimeout is the filter's message_timeout; 0 means 1 s.
	MessageTimeout time.Duration
	// ResponseChunks, when positive, asks the upstream for a streamed
	// answer of that many token events (bodies with "stream": true), each
	// after ChunkGap; OneWrite asks for the same pauses with every event
	// written at once after the last (see Upstream).
	ResponseChunks int
	ChunkGap       time.Duration
	OneWrite       bool
	// Shipped sets the rest of the shipped filter configuration
	// (envoy/envoy.yaml, envoy/envoy-full-duplex.yaml):
	// send_body_without_waiting_for_header_response and the source.address
	// request attribute.
	Shipped bool
}

// NewClientWith connects the simulated Envoys o describes.
func NewClientWith(o ClientOptions) (*Client, error) {
	size := orDefault(o.BodyBytes, 2048)
	bodies, err := CompletionBodies(1024, size)
	if o.ResponseChunks > 0 {
		bodies, err = StreamCompletionBodies(1024, size)
	}
	if err != nil {
		return nil, err
	}
	c := &Client{bodies: bodies}
	if o.ResponseChunks > 0 {
		c.header = http.Header{ChunksHeader: {strconv.Itoa(o.ResponseChunks)}, ChunkGapHeader: {o.ChunkGap.String()}}
		if o.OneWrite {
			c.header.Set(OneWriteHeader, "true")
		}
	}
	for range max(o.Conns, 1) {
		s, err := envoysim.New(simConfig(o.Addr, o.Mode, o.MessageTimeout, o.Shipped, 0))
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c.sims = append(c.sims, s)
	}
	return c, nil
}

// simConfig is a simulated Envoy in mode m in front of the ext_proc
// server at addr. shipped adds the shipped filter's other settings;
// chunkBytes splits STREAMED and FULL_DUPLEX_STREAMED request bodies (0:
// one chunk).
func simConfig(addr string, m Mode, messageTimeout time.Duration, shipped bool, chunkBytes int) envoysim.Config {
	cfg := envoysim.Config{
		ExtProcAddr:       addr,
		Mode:              m.ProcessingMode(),
		MessageTimeout:    orDefault(messageTimeout, envoyMessageTimeout),
		MaxMessageTimeout: envoyMaxMessageTimeout,
		RequestChunkSize:  chunkBytes,
	}
	if shipped {
		cfg.SendBodyWithoutWaitingForHeaderResponse = true
		cfg.RequestAttributes = []string{"source.address"}
		cfg.StatusOnError = http.StatusServiceUnavailable
	}
	return cfg
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
		t.StreamMsgsSent += st.StreamMsgsSent
		t.StreamMsgsReceived += st.StreamMsgsReceived
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
	h := http.Header{
		"Content-Type":   {"application/json"},
		"Content-Length": {strconv.Itoa(len(body))},
	}
	maps.Copy(h, c.header)
	return c.sims[i%len(c.sims)].Do(ctx, envoysim.Request{
		Method: http.MethodPost,
		Path:   "/v1/completions",
		Host:   "gateway.bench",
		Header: h,
		Body:   body,
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
	// ResponseChunks, ChunkGap and OneWrite, when ResponseChunks is
	// positive, ask for streamed answers (see ClientOptions); Shipped sets
	// the shipped filter's other settings.
	ResponseChunks int
	ChunkGap       time.Duration
	OneWrite       bool
	Shipped        bool
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
	// MsgsSent counts the ext_proc messages the simulated Envoys sent
	// over the whole run, warm-up included (Envoy's stream_msgs_sent):
	// with CPU time over the same span, the cost per message.
	MsgsSent uint64 `json:"msgs_sent"`

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
	c, err := NewClientWith(ClientOptions{Addr: cfg.ExtProcAddr, Mode: cfg.Mode, Conns: cfg.Conns, BodyBytes: cfg.BodyBytes,
		ResponseChunks: cfg.ResponseChunks, ChunkGap: cfg.ChunkGap, OneWrite: cfg.OneWrite, Shipped: cfg.Shipped})
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
		MsgsSent:    c.Stats().StreamMsgsSent,
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
