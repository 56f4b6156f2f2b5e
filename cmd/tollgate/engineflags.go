package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/tollgate/tollgate/extproc/engine/enginemetrics"
	"github.com/tollgate/tollgate/sched"
)

// Defaults of the engine-signal flags.
const (
	// defaultEngineStaleness is four default intervals: a worker missing
	// three scrapes in a row is judged by bookings alone.
	defaultEngineStaleness = 2 * time.Second
	// defaultEngineWaiting and defaultEngineKV are llm-d's utilization
	// detector thresholds (queueDepthThreshold 5, kvCacheUtilThreshold 0.8).
	defaultEngineWaiting = 5
	defaultEngineKV      = 0.8
)

// engineOptions are the engine-metrics flags.
type engineOptions struct {
	interval    time.Duration
	timeout     time.Duration
	maxInFlight int
	staleness   time.Duration
	saturation  bool
	waiting     uint
	kv          float64
	warmStart   bool
	capacity    bool
}

func registerEngineFlags(fs *flag.FlagSet, o *engineOptions) {
	fs.DurationVar(&o.interval, "engine-metrics-interval", enginemetrics.DefaultInterval, "how often each worker's engine /metrics is read (0: off, engine signals unused)")
	fs.DurationVar(&o.timeout, "engine-metrics-timeout", enginemetrics.DefaultTimeout, "timeout of one engine metrics scrape")
	fs.IntVar(&o.maxInFlight, "engine-metrics-max-inflight", enginemetrics.DefaultMaxInFlight, "engine metrics scrapes in flight at once, across all workers")
	fs.DurationVar(&o.staleness, "engine-metrics-staleness", defaultEngineStaleness, "engine metrics older than this are ignored (the worker is judged by bookings alone)")
	fs.BoolVar(&o.saturation, "engine-saturation", true, "treat a worker whose engine reports a queue or KV usage past the thresholds as busy")
	fs.UintVar(&o.waiting, "engine-saturation-waiting", defaultEngineWaiting, "busy above this many waiting requests (reported plus booked since the report)")
	fs.Float64Var(&o.kv, "engine-saturation-kv", defaultEngineKV, "busy above this KV-cache usage fraction (0: KV usage not used)")
	fs.BoolVar(&o.warmStart, "engine-warm-start", true, "after a start or on becoming leader, seed worker load from the engines' running and waiting requests")
	fs.BoolVar(&o.capacity, "engine-capacity", true, "take the slot count of workers without max_running_requests from their engines' reports")
}

// configs resolves the flags into the scraper and scheduler settings; a nil
// scraper configuration means scraping is off.
func (o *engineOptions) configs() (*enginemetrics.Config, sched.EngineConfig, error) {
	var errs []error
	if o.interval < 0 {
		errs = append(errs, fmt.Errorf("--engine-metrics-interval must not be negative, got %v", o.interval))
	}
	if o.interval > 0 && o.interval < 50*time.Millisecond {
		errs = append(errs, fmt.Errorf("--engine-metrics-interval %v is below 50ms", o.interval))
	}
	if o.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--engine-metrics-timeout must be positive, got %v", o.timeout))
	}
	if o.maxInFlight <= 0 || o.maxInFlight > 4096 {
		errs = append(errs, fmt.Errorf("--engine-metrics-max-inflight must be in [1, 4096], got %d", o.maxInFlight))
	}
	if o.staleness <= 0 {
		errs = append(errs, fmt.Errorf("--engine-metrics-staleness must be positive, got %v", o.staleness))
	}
	if o.waiting > math.MaxUint32 {
		errs = append(errs, fmt.Errorf("--engine-saturation-waiting %d is too large", o.waiting))
	}
	if math.IsNaN(o.kv) || o.kv < 0 || o.kv > 1 {
		errs = append(errs, fmt.Errorf("--engine-saturation-kv must be in [0, 1], got %v", o.kv))
	}
	if err := errors.Join(errs...); err != nil || o.interval == 0 {
		return nil, sched.EngineConfig{}, err
	}
	sc := &enginemetrics.Config{Interval: o.interval, Timeout: o.timeout, MaxInFlight: o.maxInFlight}
	ec := sched.EngineConfig{
		MaxAge:           o.staleness,
		Saturation:       o.saturation,
		WaitingThreshold: uint32(o.waiting),
		KVThreshold:      o.kv,
		WarmStart:        o.warmStart,
		// The hold waits for every worker's first reading; each is tried
		// at once and again every interval (+10 % jitter), so two
		// intervals plus a timeout bound it unless scrapes fail.
		WarmWait: 2*o.interval + o.timeout,
		Capacity: o.capacity,
	}
	return sc, ec, nil
}
