package enginemetrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tollgate/tollgate/sched"
)

// Defaults of Config.
const (
	// DefaultInterval is 500 ms: ten times the peers' 50 ms, whose
	// continuous scraping costs whole cores at fleet size, yet well inside
	// the time a saturated engine's queue takes to matter; the bookings
	// cover the gap between scrapes.
	DefaultInterval = 500 * time.Millisecond
	// DefaultTimeout bounds one scrape; below the interval so a slow
	// worker is tried again on time.
	DefaultTimeout = 400 * time.Millisecond
	// DefaultJitter spreads each target's scrapes by ±10 % of the interval
	// so a fleet is not scraped in lockstep.
	DefaultJitter = 0.1
	// DefaultMaxInFlight bounds concurrent scrapes across all targets.
	DefaultMaxInFlight = 32
	// DefaultMaxBodyBytes bounds one exposition; engines send tens of KiB.
	DefaultMaxBodyBytes = 4 << 20
)

// Config configures a Scraper. Zero fields take the defaults.
type Config struct {
	Interval, Timeout time.Duration
	// Jitter is the fraction of Interval each wait varies by, in [0, 1).
	Jitter       float64
	MaxInFlight  int
	MaxBodyBytes int64
	// Client does the HTTP requests; nil means a client of its own.
	Client *http.Client
}

func (c Config) withDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Jitter < 0 || c.Jitter >= 1 {
		c.Jitter = DefaultJitter
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Client == nil {
		c.Client = &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 1, IdleConnTimeout: 90 * time.Second,
			DialContext: (&net.Dialer{Timeout: c.Timeout}).DialContext,
		}}
	}
	return c
}

// Reason classifies a failed scrape (the reason label).
type Reason string

// Failure reasons.
const (
	ReasonTimeout Reason = "timeout"
	ReasonConnect Reason = "connect"
	ReasonStatus  Reason = "http_status"
	ReasonBody    Reason = "body"
	ReasonParse   Reason = "parse"
)

// Result is one scrape's outcome.
type Result struct {
	Worker   string
	At       time.Time
	Duration time.Duration
	// Err is nil on success; Reason classifies it.
	Err    error
	Reason Reason
	// Report is the parsed exposition on success.
	Report Report
}

// Round is what the sink receives: the loads read since the last round and
// every scrape's result.
type Round struct {
	At      time.Time
	Loads   []sched.EngineLoad
	Results []Result
}

// Scraper polls targets. See the package documentation.
type Scraper struct {
	cfg  Config
	sink func(Round)
	sem  chan struct{}
	// kick wakes Run's flush loop early (first round complete).
	kick chan struct{}

	// mu guards the fields below.
	mu      sync.Mutex
	targets map[string]*running // by worker id
	pending Round
	// firstLeft counts targets not yet tried since the last start; a
	// round is flushed as soon as it drops to zero.
	firstLeft int
	run       context.Context // set while Run runs
	wg        sync.WaitGroup
	stats     scrapeStats
}

// running is one target's scrape loop.
type running struct {
	t      Target
	cancel context.CancelFunc
	first  bool
}

// New returns a scraper that hands rounds to sink (called from one
// goroutine at a time, never with a lock held).
func New(cfg Config, sink func(Round)) *Scraper {
	cfg = cfg.withDefaults()
	return &Scraper{
		cfg: cfg, sink: sink,
		sem:     make(chan struct{}, cfg.MaxInFlight),
		kick:    make(chan struct{}, 1),
		targets: map[string]*running{},
		stats:   newScrapeStats(),
	}
}

// SetTargets replaces the targets: new or changed ones start scraping at
// once, removed ones stop (a scrape in progress is cancelled).
func (s *Scraper) SetTargets(ts []Target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := make(map[string]bool, len(ts))
	for _, t := range ts {
		keep[t.Worker] = true
		if r := s.targets[t.Worker]; r != nil {
			if r.t == t {
				continue
			}
			if r.cancel != nil {
				r.cancel()
			}
			if r.first {
				s.firstLeft--
			}
		}
		r := &running{t: t, first: true}
		s.targets[t.Worker] = r
		s.firstLeft++
		if s.run != nil {
			s.start(r)
		}
	}
	for id, r := range s.targets {
		if !keep[id] {
			if r.cancel != nil {
				r.cancel()
			}
			if r.first {
				s.firstLeft--
			}
			delete(s.targets, id)
			s.stats.forget(id)
		}
	}
}

// Run scrapes until ctx ends and returns once every scrape goroutine has.
func (s *Scraper) Run(ctx context.Context) {
	s.mu.Lock()
	s.run = ctx
	for _, r := range s.targets {
		s.start(r)
	}
	s.mu.Unlock()
	// Rounds are handed over five times per interval: a reading waits at
	// most a fifth of an interval, and the dispatcher sees a few events
	// per interval, not one per worker.
	tick := time.NewTicker(max(s.cfg.Interval/5, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			s.mu.Lock()
			s.run = nil
			s.mu.Unlock()
			s.wg.Wait()
			return
		case <-tick.C:
		case <-s.kick:
		}
		s.flush()
	}
}

// flush hands the pending round to the sink.
func (s *Scraper) flush() {
	s.mu.Lock()
	r := s.pending
	s.pending = Round{}
	s.mu.Unlock()
	r.At = time.Now()
	s.sink(r)
}

// start runs r's loop; s.mu is held.
func (s *Scraper) start(r *running) {
	ctx, cancel := context.WithCancel(s.run)
	r.cancel = cancel
	t := r.t
	s.wg.Go(func() { s.loop(ctx, r, t) })
}

// loop scrapes t now and then every jittered interval until ctx ends.
func (s *Scraper) loop(ctx context.Context, r *running, t Target) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		res := s.scrape(ctx, t)
		<-s.sem
		if ctx.Err() != nil {
			return
		}
		s.deliver(r, t, res)
		timer.Reset(s.wait())
	}
}

// wait is the interval with jitter.
func (s *Scraper) wait() time.Duration {
	j := s.cfg.Jitter * (2*rand.Float64() - 1) //nolint:gosec // jitter needs no secure source
	return time.Duration(float64(s.cfg.Interval) * (1 + j))
}

// deliver adds a result to the pending round.
func (s *Scraper) deliver(r *running, t Target, res Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.targets[t.Worker] != r {
		return // removed or replaced meanwhile
	}
	if res.Err == nil {
		s.pending.Loads = append(s.pending.Loads, t.Loads(res.Report, res.At)...)
	}
	s.pending.Results = append(s.pending.Results, res)
	s.stats.observe(t.Worker, res)
	if r.first {
		r.first = false
		s.firstLeft--
		if s.firstLeft == 0 {
			select {
			case s.kick <- struct{}{}:
			default:
			}
		}
	}
}

// scrape reads and parses t's metrics once.
func (s *Scraper) scrape(ctx context.Context, t Target) Result {
	start := time.Now()
	res := Result{Worker: t.Worker, At: start}
	fail := func(reason Reason, err error) Result {
		res.Duration, res.Err, res.Reason = time.Since(start), err, reason
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return fail(ReasonConnect, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return fail(classify(ctx, err, ReasonConnect), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return fail(ReasonStatus, fmt.Errorf("enginemetrics: %s: status %d", t.URL, resp.StatusCode))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxBodyBytes+1))
	if err != nil {
		return fail(classify(ctx, err, ReasonBody), err)
	}
	if int64(len(body)) > s.cfg.MaxBodyBytes {
		return fail(ReasonBody, fmt.Errorf("enginemetrics: %s: body exceeds %d bytes", t.URL, s.cfg.MaxBodyBytes))
	}
	rep, err := ParseBytes(body)
	if err != nil {
		return fail(ReasonParse, err)
	}
	res.Duration, res.Report = time.Since(start), rep
	return res
}

// classify tells a timeout from other transport errors.
func classify(ctx context.Context, err error, otherwise Reason) Reason {
	var ne net.Error
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return ReasonTimeout
	}
	return otherwise
}
