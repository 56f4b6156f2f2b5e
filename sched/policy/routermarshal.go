package policy

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/sched"
)

// Wire shapes for writing a router policy document. Field order follows the
// schema tables so the output reads like a hand-written file.
type (
	policyFileOut struct {
		profileOut `yaml:",inline"`
		Models     map[string]profileOut `yaml:"models,omitempty"`
	}
	// profileOut is either generation's profile: a family/bucket one has
	// no default class, a flat one no default family nor buckets.
	profileOut struct {
		DefaultPolicyFamily string      `yaml:"default_policy_family,omitempty"`
		DefaultPolicyClass  string      `yaml:"default_policy_class,omitempty"`
		UncachedISLBuckets  []bucketOut `yaml:"uncached_isl_buckets,omitempty"`
		PolicyClasses       []classOut  `yaml:"policy_classes,omitempty"`
	}
	bucketOut struct {
		MinTokens uint64 `yaml:"min_tokens"`
		Bucket    string `yaml:"bucket"`
	}
	classOut struct {
		Name                     string   `yaml:"name"`
		SLOMillis                *uint64  `yaml:"slo_ms,omitempty"`
		PolicyFamily             string   `yaml:"policy_family,omitempty"`
		CacheBucket              string   `yaml:"cache_bucket,omitempty"`
		QueuePolicy              string   `yaml:"queue_policy,omitempty"`
		Quantum                  uint64   `yaml:"quantum"`
		PrefillBusyThreshold     *uint64  `yaml:"prefill_busy_threshold,omitempty"`
		PrefillBusyThresholdFrac *float64 `yaml:"prefill_busy_threshold_frac,omitempty"`
		BusyWorkerRatio          *float64 `yaml:"busy_worker_ratio,omitempty"`
		RequestQueueLimit        *uint64  `yaml:"request_queue_limit_per_worker,omitempty"`
		RawISLTokenQueueLimit    *uint64  `yaml:"raw_isl_token_queue_limit_per_worker,omitempty"`
		CachedTokenQueueLimit    *uint64  `yaml:"cached_token_queue_limit_per_worker,omitempty"`
	}
)

// MarshalRouterPolicy writes cfg's root and model profiles as a router
// policy document that ParseRouterPolicy reads back to an equal
// configuration. cfg.Fallback is not part of the file and is ignored. It
// fails for a synthetic profile, which no file can express, and for flat
// and family/bucket profiles together, which no file holds.
func MarshalRouterPolicy(cfg *sched.PolicyConfig) ([]byte, error) {
	if err := checkOneGeneration(cfg); err != nil {
		return nil, err
	}
	var out policyFileOut
	if cfg.Root != nil {
		p, err := profileToWire(cfg.Root)
		if err != nil {
			return nil, fmt.Errorf("root profile: %w", err)
		}
		out.profileOut = p
	}
	if len(cfg.Models) > 0 {
		out.Models = make(map[string]profileOut, len(cfg.Models))
		for name, prof := range cfg.Models {
			p, err := profileToWire(prof)
			if err != nil {
				return nil, fmt.Errorf("model %q profile: %w", name, err)
			}
			out.Models[name] = p
		}
	}
	return encodeYAML(out)
}

// checkOneGeneration fails if cfg has both flat and family/bucket profiles.
func checkOneGeneration(cfg *sched.PolicyConfig) error {
	flat := map[bool]bool{}
	if cfg.Root != nil {
		flat[cfg.Root.Flat] = true
	}
	for _, p := range cfg.Models {
		if p != nil {
			flat[p.Flat] = true
		}
	}
	if len(flat) > 1 {
		return errors.New("flat SLO and family/bucket profiles cannot share one file")
	}
	return nil
}

func profileToWire(p *sched.Profile) (profileOut, error) {
	var out profileOut
	if p == nil {
		return out, errors.New("nil profile")
	}
	if p.Synthetic {
		return out, errors.New("a synthetic profile has no file form")
	}
	if p.Flat {
		if p.DefaultClass < 0 || p.DefaultClass >= len(p.Classes) {
			return out, fmt.Errorf("default class index %d of %d classes", p.DefaultClass, len(p.Classes))
		}
		out.DefaultPolicyClass = p.Classes[p.DefaultClass].Name
	}
	out.DefaultPolicyFamily = p.DefaultFamily
	out.UncachedISLBuckets = make([]bucketOut, len(p.Buckets))
	for i, b := range p.Buckets {
		out.UncachedISLBuckets[i] = bucketOut{MinTokens: b.MinTokens, Bucket: b.Name}
	}
	out.PolicyClasses = make([]classOut, len(p.Classes))
	for i := range p.Classes {
		c := &p.Classes[i]
		if (c.Family == "") != (c.Bucket == "") {
			return out, fmt.Errorf("class %q sets only one of family and bucket", c.Name)
		}
		co := classOut{
			Name:                 c.Name,
			PolicyFamily:         c.Family,
			CacheBucket:          c.Bucket,
			QueuePolicy:          c.QueuePolicy.String(),
			Quantum:              c.Quantum,
			PrefillBusyThreshold: c.BusyThreshold,
			// omitempty drops a pointer only when it is nil: 0 and 0.0 survive.
			PrefillBusyThresholdFrac: c.BusyThresholdFrac,
			RequestQueueLimit:        c.RequestLimitPerWorker,
			RawISLTokenQueueLimit:    c.RawISLLimitPerWorker,
			CachedTokenQueueLimit:    c.CachedTokenLimitPerWorker,
		}
		if c.BusyWorkerRatio != 0 {
			r := c.BusyWorkerRatio
			co.BusyWorkerRatio = &r
		}
		if p.Flat {
			// edf is a flat class's default; leaving it out keeps the file
			// readable by Dynamo versions without queue_policy.
			ms := uint64(c.SLO / time.Millisecond)
			co.SLOMillis = &ms
			if c.QueuePolicy == sched.EDF {
				co.QueuePolicy = ""
			}
		}
		out.PolicyClasses[i] = co
	}
	return out, nil
}

// encodeYAML writes v as a two-space indented YAML document.
func encodeYAML(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
