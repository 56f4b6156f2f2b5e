package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/sched"
)

// inlinePath is how errors name a policy document that came from no file.
const inlinePath = "<inline>"

// Field names of the router policy file, in the order the schema lists them.
var (
	rootFields = []string{
		"default_policy_family", "uncached_isl_buckets", "policy_classes", "models", "worker_selection",
	}
	profileFields = []string{"default_policy_family", "uncached_isl_buckets", "policy_classes"}
	bucketFields  = []string{"min_tokens", "bucket"}
	classFields   = []string{
		"name", "policy_family", "cache_bucket", "queue_policy", "quantum",
		"prefill_busy_threshold", "prefill_busy_threshold_frac", "busy_worker_ratio",
		"request_queue_limit_per_worker", "raw_isl_token_queue_limit_per_worker",
		"cached_token_queue_limit_per_worker",
	}
	// queuePolicies are the values queue_policy parses to; lcfs parses and
	// is then rejected by validation, as upstream does.
	queuePolicies = []string{"fcfs", "wspt", "lcfs"}
)

// LoadRouterPolicy reads and parses the router policy file at path. A read
// failure is reported as "failed to read router policy config <path>: <err>".
func LoadRouterPolicy(path string) (*sched.PolicyConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read router policy config %s: %w", path, unwrapPathError(err))
	}
	return ParseRouterPolicy(data, path)
}

// ParseRouterPolicy parses and validates a router policy document. path only
// names the document in errors; empty means "<inline>".
//
// Schema errors (bad YAML, unknown or duplicate keys, wrong types, missing
// fields) read "failed to parse router policy config <path>: <detail>";
// rule violations read "invalid router policy config: <msg>" with the
// upstream message, and the first violation in upstream's order wins.
func ParseRouterPolicy(data []byte, path string) (*sched.PolicyConfig, error) {
	if path == "" {
		path = inlinePath
	}
	raw, err := newDecoder().routerPolicy(data)
	if err != nil {
		return nil, fmt.Errorf("failed to parse router policy config %s: %w", path, err)
	}
	cfg, msg := raw.resolve()
	if msg != "" {
		return nil, &InvalidRouterPolicyError{Msg: msg}
	}
	return cfg, nil
}

// InvalidRouterPolicyError is a router policy document that parsed but
// breaks a rule. Msg is the upstream message.
type InvalidRouterPolicyError struct {
	Msg string
}

func (e *InvalidRouterPolicyError) Error() string { return "invalid router policy config: " + e.Msg }

// SyntheticDefault returns the single-class profile used for a model that no
// policy file profile covers, from --router-queue-threshold (nil: unset,
// queueing off; otherwise a finite number >= 0) and --router-queue-policy
// ("" means fcfs; otherwise fcfs or wspt).
func SyntheticDefault(threshold *float64, queuePolicy string) (*sched.Profile, error) {
	var qp sched.QueuePolicy
	switch queuePolicy {
	case "", "fcfs":
		qp = sched.FCFS
	case "wspt":
		qp = sched.WSPT
	default:
		return nil, fmt.Errorf("invalid --router-queue-policy %q: must be fcfs or wspt", queuePolicy)
	}
	var frac *float64
	if threshold != nil {
		v := *threshold
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return nil, fmt.Errorf("invalid --router-queue-threshold %v: must be a finite number >= 0", v)
		}
		frac = &v
	}
	return sched.SyntheticProfile(frac, qp), nil
}

// unwrapPathError drops the operation and path that os errors repeat, so
// the caller's message names the path once.
func unwrapPathError(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

// rawPolicyFile is a router policy document after schema decoding, before
// validation. Root fields are pointers: absent and present are different.
type rawPolicyFile struct {
	defaultFamily   *string
	buckets         []rawBucket
	hasBuckets      bool
	classes         []rawClass
	hasClasses      bool
	models          []rawModel
	workerSelection bool
}

type rawModel struct {
	name    string
	profile rawProfile
}

type rawProfile struct {
	defaultFamily string
	buckets       []rawBucket
	classes       []rawClass
}

type rawBucket struct {
	minTokens uint64
	name      string
}

type rawClass struct {
	name           string
	family, bucket *string
	queuePolicy    string
	quantum        uint64
	threshold      *uint64
	frac           *float64
	ratio          *float64
	requestLimit   *uint64
	rawISLLimit    *uint64
	cachedLimit    *uint64
}

// routerPolicy decodes a router policy document against its schema.
func (d *decoder) routerPolicy(data []byte) (*rawPolicyFile, error) {
	root, err := parseDocument(data)
	if err != nil {
		return nil, err
	}
	raw := &rawPolicyFile{}
	if root == nil {
		return raw, nil
	}
	o, err := d.object(root, "", rootFields)
	if err != nil {
		return nil, err
	}
	if n, err := d.optional(o, "default_policy_family"); err != nil {
		return nil, err
	} else if n != nil {
		s, err := d.str(n, "default_policy_family")
		if err != nil {
			return nil, err
		}
		raw.defaultFamily = &s
	}
	if n, err := d.optional(o, "uncached_isl_buckets"); err != nil {
		return nil, err
	} else if n != nil {
		raw.hasBuckets = true
		if raw.buckets, err = d.buckets(n, "uncached_isl_buckets"); err != nil {
			return nil, err
		}
	}
	if n, err := d.optional(o, "policy_classes"); err != nil {
		return nil, err
	} else if n != nil {
		raw.hasClasses = true
		if raw.classes, err = d.classes(n, "policy_classes"); err != nil {
			return nil, err
		}
	}
	if n, err := d.optional(o, "models"); err != nil {
		return nil, err
	} else if n != nil {
		entries, err := d.mapping(n, "models")
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			p, err := d.profile(e.valueRaw, keyed("models", e.key))
			if err != nil {
				return nil, err
			}
			raw.models = append(raw.models, rawModel{name: e.key, profile: p})
		}
	}
	// The worker_selection block is not decoded: any present, non-null
	// value is rejected by validation.
	n, err := d.optional(o, "worker_selection")
	if err != nil {
		return nil, err
	}
	raw.workerSelection = n != nil
	return raw, nil
}

func (d *decoder) profile(n *yaml.Node, path string) (rawProfile, error) {
	var p rawProfile
	o, err := d.object(n, path, profileFields)
	if err != nil {
		return p, err
	}
	fam, err := d.required(o, "default_policy_family")
	if err != nil {
		return p, err
	}
	if p.defaultFamily, err = d.str(fam, join(path, "default_policy_family")); err != nil {
		return p, err
	}
	b, err := d.required(o, "uncached_isl_buckets")
	if err != nil {
		return p, err
	}
	if p.buckets, err = d.buckets(b, join(path, "uncached_isl_buckets")); err != nil {
		return p, err
	}
	c, err := d.required(o, "policy_classes")
	if err != nil {
		return p, err
	}
	if p.classes, err = d.classes(c, join(path, "policy_classes")); err != nil {
		return p, err
	}
	return p, nil
}

func (d *decoder) buckets(n *yaml.Node, path string) ([]rawBucket, error) {
	items, err := d.sequence(n, path)
	if err != nil {
		return nil, err
	}
	out := make([]rawBucket, 0, len(items))
	for i, item := range items {
		p := index(path, i)
		o, err := d.object(item, p, bucketFields)
		if err != nil {
			return nil, err
		}
		var b rawBucket
		mt, err := d.required(o, "min_tokens")
		if err != nil {
			return nil, err
		}
		if b.minTokens, err = d.uint(mt, join(p, "min_tokens"), math.MaxUint64); err != nil {
			return nil, err
		}
		name, err := d.required(o, "bucket")
		if err != nil {
			return nil, err
		}
		if b.name, err = d.str(name, join(p, "bucket")); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func (d *decoder) classes(n *yaml.Node, path string) ([]rawClass, error) {
	items, err := d.sequence(n, path)
	if err != nil {
		return nil, err
	}
	out := make([]rawClass, 0, len(items))
	for i, item := range items {
		c, err := d.class(item, index(path, i))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func (d *decoder) class(n *yaml.Node, path string) (rawClass, error) {
	c := rawClass{queuePolicy: "fcfs"}
	o, err := d.object(n, path, classFields)
	if err != nil {
		return c, err
	}
	name, err := d.required(o, "name")
	if err != nil {
		return c, err
	}
	if c.name, err = d.str(name, join(path, "name")); err != nil {
		return c, err
	}
	if c.family, err = d.optionalStr(o, "policy_family"); err != nil {
		return c, err
	}
	if c.bucket, err = d.optionalStr(o, "cache_bucket"); err != nil {
		return c, err
	}
	if qp, err := d.optional(o, "queue_policy"); err != nil {
		return c, err
	} else if qp != nil {
		if c.queuePolicy, err = d.variant(qp, join(path, "queue_policy"), queuePolicies); err != nil {
			return c, err
		}
	}
	q, err := d.required(o, "quantum")
	if err != nil {
		return c, err
	}
	if c.quantum, err = d.uint(q, join(path, "quantum"), math.MaxUint64); err != nil {
		return c, err
	}
	for _, f := range []struct {
		key string
		dst **uint64
	}{
		{"prefill_busy_threshold", &c.threshold},
		{"request_queue_limit_per_worker", &c.requestLimit},
		{"raw_isl_token_queue_limit_per_worker", &c.rawISLLimit},
		{"cached_token_queue_limit_per_worker", &c.cachedLimit},
	} {
		if *f.dst, err = d.optionalUint(o, f.key); err != nil {
			return c, err
		}
	}
	if c.frac, err = d.optionalFloat(o, "prefill_busy_threshold_frac"); err != nil {
		return c, err
	}
	if c.ratio, err = d.optionalFloat(o, "busy_worker_ratio"); err != nil {
		return c, err
	}
	return c, nil
}

func (d *decoder) optionalStr(o object, key string) (*string, error) {
	n, err := d.optional(o, key)
	if err != nil || n == nil {
		return nil, err
	}
	s, err := d.str(n, join(o.path, key))
	if err != nil {
		return nil, err
	}
	return &s, nil
}

func (d *decoder) optionalUint(o object, key string) (*uint64, error) {
	n, err := d.optional(o, key)
	if err != nil || n == nil {
		return nil, err
	}
	u, err := d.uint(n, join(o.path, key), math.MaxUint64)
	if err != nil {
		return nil, err
	}
	return &u, nil
}

func (d *decoder) optionalFloat(o object, key string) (*float64, error) {
	n, err := d.optional(o, key)
	if err != nil || n == nil {
		return nil, err
	}
	f, err := d.float(n, join(o.path, key))
	if err != nil {
		return nil, err
	}
	return &f, nil
}
