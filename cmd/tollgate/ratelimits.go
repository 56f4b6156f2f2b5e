package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

// SMG's defaults for the legacy admission queue.
const (
	defaultQueueSize        = 100
	defaultQueueTimeoutSecs = 60
)

// rateLimitOptions are SMG's rate-limit flags: the request bucket
// (--max-concurrent-requests, --rate-limit-tokens-per-second), the legacy
// admission queue (--queue-size, --queue-timeout-secs) and the tenant
// budgets (--tenant-rate-limit-*).
type rateLimitOptions struct {
	maxConcurrent    int
	ratePerSecond    int
	queueSize        int
	queueTimeoutSecs int
	tenantEnabled    bool
	tenantConfig     string
}

func registerRateLimitFlags(fs *flag.FlagSet, o *rateLimitOptions) {
	fs.IntVar(&o.maxConcurrent, "max-concurrent-requests", -1, "SMG's request bucket, 0 to 65535 (negative or 0: none): with the priority scheduler the burst of --rate-limit-tokens-per-second and the slot capacity while no worker is known (1024 when <= 0); without it the legacy admission's concurrent requests")
	fs.IntVar(&o.ratePerSecond, "rate-limit-tokens-per-second", 0, "refill of SMG's request bucket per second (0: none); with the priority scheduler a positive value adds a request-rate check before admission (429 scheduler_queue_full)")
	fs.IntVar(&o.queueSize, "queue-size", defaultQueueSize, "requests that may wait for a legacy admission token, in arrival order (0: none); ignored with the priority scheduler")
	fs.IntVar(&o.queueTimeoutSecs, "queue-timeout-secs", defaultQueueTimeoutSecs, "seconds a request waits for a legacy admission token before 503 admission_queue_timeout; ignored with the priority scheduler")
	fs.BoolVar(&o.tenantEnabled, "tenant-rate-limit-enabled", false, "hold every tenant to the token and request budgets of --tenant-rate-limit-config (429 tenant_rate_limit_exceeded)")
	fs.StringVar(&o.tenantConfig, "tenant-rate-limit-config", "", "SMG tenant rate-limit YAML (default_policy, tenants with tokens_per_minute, requests_per_minute and model_rules)")
}

// apply validates the flags and sets the bucket and the tenant budgets on
// sc; trustHeader is --trust-tenant-header, without which a header:
// tenant key can never match.
func (o *rateLimitOptions) apply(sc *sched.Config, trustHeader bool) error {
	var errs []error
	if o.maxConcurrent > 65535 {
		errs = append(errs, fmt.Errorf("--max-concurrent-requests must be at most 65535, got %d", o.maxConcurrent))
	}
	if o.ratePerSecond < 0 {
		errs = append(errs, fmt.Errorf("--rate-limit-tokens-per-second must be >= 0, got %d", o.ratePerSecond))
	}
	if o.queueSize < 0 || o.queueSize > 1<<20 {
		errs = append(errs, fmt.Errorf("--queue-size must be between 0 and %d, got %d", 1<<20, o.queueSize))
	}
	if o.queueSize > 0 && o.queueTimeoutSecs <= 0 {
		errs = append(errs, fmt.Errorf("--queue-timeout-secs must be > 0 when --queue-size is > 0, got %d", o.queueTimeoutSecs))
	}
	if o.queueTimeoutSecs > 86400 {
		errs = append(errs, fmt.Errorf("--queue-timeout-secs must be at most 86400, got %d", o.queueTimeoutSecs))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if o.maxConcurrent > 0 {
		sc.FallbackCapacity = uint32(o.maxConcurrent)
		sc.Admission = sched.AdmissionConfig{
			Capacity:      uint32(o.maxConcurrent),
			RatePerSecond: uint32(o.ratePerSecond),
			QueueSize:     uint32(o.queueSize),
			QueueTimeout:  time.Duration(o.queueTimeoutSecs) * time.Second,
		}
	}
	switch {
	case o.tenantEnabled && o.tenantConfig == "":
		return errors.New("--tenant-rate-limit-enabled needs --tenant-rate-limit-config: SMG fails startup without the file")
	case !o.tenantEnabled && o.tenantConfig != "":
		return errors.New("--tenant-rate-limit-config needs --tenant-rate-limit-enabled: without it the budgets are not applied")
	case !o.tenantEnabled:
		return nil
	}
	tb, err := policy.LoadTenantRateLimits(o.tenantConfig)
	if err != nil {
		return err
	}
	if err := policy.CheckTenantHeaderTrust(tb, o.tenantConfig, trustHeader); err != nil {
		return err
	}
	sc.TenantBudgets = tb
	return nil
}

// warnings name the rate-limit flags that are set but cannot take effect.
func (o *rateLimitOptions) warnings(priority bool) []string {
	var ws []string
	queueSet := o.queueSize != defaultQueueSize || o.queueTimeoutSecs != defaultQueueTimeoutSecs
	switch {
	case o.maxConcurrent <= 0 && (o.ratePerSecond > 0 || queueSet):
		ws = append(ws, "--rate-limit-tokens-per-second, --queue-size and --queue-timeout-secs have no effect without --max-concurrent-requests > 0: there is no request bucket")
	case priority && queueSet:
		ws = append(ws, "--queue-size and --queue-timeout-secs are ignored with --priority-scheduler-enabled, as in SMG: each priority class's queue_size and queue_timeout_secs apply")
	}
	if o.maxConcurrent == 0 && priority {
		ws = append(ws, "--max-concurrent-requests 0 removes the request-rate check; the slot capacity while no worker is known stays 1024 (SMG's would be 0, which admits nothing)")
	}
	return ws
}
