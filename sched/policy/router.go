package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/sched"
)

// inlinePath is how errors name a policy document that came from no file.
const inlinePath = "<inline>"

// Schema names of the router policy file generations, as
// sched.PolicyConfig.Schema reports them.
const (
	SchemaFamily = "family/bucket"
	SchemaFlat   = "flat SLO"
)

// generation is one router policy file schema: the keys it allows, in the
// order the schema lists them, the keys that mark it, and how its classes
// read queue_policy.
type generation struct {
	schema string
	// defaultKey is default_policy_family or default_policy_class.
	defaultKey    string
	rootFields    []string
	profileFields []string
	classFields   []string
	// profileMarks and classMarks are the keys no other generation has.
	profileMarks []string
	classMarks   []string
	// queuePolicies are the values queue_policy parses to; nil leaves any
	// string to validation. defaultQueuePolicy is the value when absent.
	queuePolicies      []string
	defaultQueuePolicy string
	// queuePolicyOf maps the values validation accepts; queuePolicyRule
	// is the message for any other.
	queuePolicyOf   map[string]sched.QueuePolicy
	queuePolicyRule string
	// rootRule is the message for a root profile missing some of its keys.
	rootRule string
}

func (g *generation) flat() bool { return g == flatGeneration }

var (
	// familyGeneration is the family/bucket schema (Dynamo v1.3 to v1.6).
	// lcfs parses and is then rejected by validation, as upstream does.
	familyGeneration = &generation{
		schema:     SchemaFamily,
		defaultKey: "default_policy_family",
		rootFields: []string{
			"default_policy_family", "uncached_isl_buckets", "policy_classes", "models", "worker_selection",
		},
		profileFields: []string{"default_policy_family", "uncached_isl_buckets", "policy_classes"},
		classFields: []string{
			"name", "policy_family", "cache_bucket", "queue_policy", "quantum",
			"prefill_busy_threshold", "prefill_busy_threshold_frac", "busy_worker_ratio",
			"request_queue_limit_per_worker", "raw_isl_token_queue_limit_per_worker",
			"cached_token_queue_limit_per_worker",
		},
		profileMarks:       []string{"default_policy_family", "uncached_isl_buckets"},
		classMarks:         []string{"policy_family", "cache_bucket", "busy_worker_ratio"},
		queuePolicies:      []string{"fcfs", "wspt", "lcfs"},
		defaultQueuePolicy: "fcfs",
		queuePolicyOf:      map[string]sched.QueuePolicy{"fcfs": sched.FCFS, "wspt": sched.WSPT},
		queuePolicyRule:    "queue_policy must be fcfs or wspt",
		rootRule:           "root profile must specify default_policy_family, uncached_isl_buckets, and policy_classes when any root profile field is present",
	}
	// flatGeneration is the flat SLO schema (Dynamo ff96fb03), with the
	// queue_policy key of the v1.7.0 docs.
	flatGeneration = &generation{
		schema:        SchemaFlat,
		defaultKey:    "default_policy_class",
		rootFields:    []string{"default_policy_class", "policy_classes", "models", "worker_selection"},
		profileFields: []string{"default_policy_class", "policy_classes"},
		classFields: []string{
			"name", "slo_ms", "queue_policy", "quantum",
			"prefill_busy_threshold", "prefill_busy_threshold_frac",
			"request_queue_limit_per_worker", "raw_isl_token_queue_limit_per_worker",
			"cached_token_queue_limit_per_worker",
		},
		profileMarks:       []string{"default_policy_class"},
		classMarks:         []string{"slo_ms"},
		defaultQueuePolicy: "edf",
		queuePolicyOf:      map[string]sched.QueuePolicy{"edf": sched.EDF, "fcfs": sched.FCFS, "wspt": sched.WSPT},
		queuePolicyRule:    "queue_policy must be edf, fcfs or wspt",
		rootRule:           "root profile must specify both default_policy_class and policy_classes when either is present",
	}
	generations  = []*generation{familyGeneration, flatGeneration}
	bucketFields = []string{"min_tokens", "bucket"}
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
// The document is read as the family/bucket schema or as the flat SLO
// schema, told apart by the keys only one of them has (see detect); the
// result's Schema names the one read.
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
	gen *generation
	// defaultName is the default family or, in a flat file, class.
	defaultName     *string
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
	defaultName string
	buckets     []rawBucket
	classes     []rawClass
}

type rawBucket struct {
	minTokens uint64
	name      string
}

type rawClass struct {
	name           string
	slo            *uint64 // slo_ms; set in every flat class, never in a family one
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
	gen, err := d.detect(root)
	if err != nil {
		return nil, err
	}
	raw := &rawPolicyFile{gen: gen}
	if root == nil {
		return raw, nil
	}
	o, err := d.object(root, "", gen.rootFields)
	if err != nil {
		return nil, err
	}
	if raw.defaultName, err = d.optionalStr(o, gen.defaultKey); err != nil {
		return nil, err
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
		if raw.classes, err = d.classes(n, "policy_classes", gen); err != nil {
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
			p, err := d.profile(e.valueRaw, keyed("models", e.key), gen)
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

// profile decodes a model profile, whose keys are all required.
func (d *decoder) profile(n *yaml.Node, path string, gen *generation) (rawProfile, error) {
	var p rawProfile
	o, err := d.object(n, path, gen.profileFields)
	if err != nil {
		return p, err
	}
	def, err := d.required(o, gen.defaultKey)
	if err != nil {
		return p, err
	}
	if p.defaultName, err = d.str(def, join(path, gen.defaultKey)); err != nil {
		return p, err
	}
	if !gen.flat() {
		b, err := d.required(o, "uncached_isl_buckets")
		if err != nil {
			return p, err
		}
		if p.buckets, err = d.buckets(b, join(path, "uncached_isl_buckets")); err != nil {
			return p, err
		}
	}
	c, err := d.required(o, "policy_classes")
	if err != nil {
		return p, err
	}
	if p.classes, err = d.classes(c, join(path, "policy_classes"), gen); err != nil {
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

func (d *decoder) classes(n *yaml.Node, path string, gen *generation) ([]rawClass, error) {
	items, err := d.sequence(n, path)
	if err != nil {
		return nil, err
	}
	out := make([]rawClass, 0, len(items))
	for i, item := range items {
		c, err := d.class(item, index(path, i), gen)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// class decodes one policy class. Keys the generation does not allow are
// rejected by object, so reading them below finds them absent.
func (d *decoder) class(n *yaml.Node, path string, gen *generation) (rawClass, error) {
	c := rawClass{queuePolicy: gen.defaultQueuePolicy}
	o, err := d.object(n, path, gen.classFields)
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
	if gen.flat() {
		slo, err := d.required(o, "slo_ms")
		if err != nil {
			return c, err
		}
		u, err := d.uint(slo, join(path, "slo_ms"), math.MaxUint64)
		if err != nil {
			return c, err
		}
		c.slo = &u
	}
	if c.family, err = d.optionalStr(o, "policy_family"); err != nil {
		return c, err
	}
	if c.bucket, err = d.optionalStr(o, "cache_bucket"); err != nil {
		return c, err
	}
	if c.queuePolicy, err = d.queuePolicy(o, gen); err != nil {
		return c, err
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

// queuePolicy decodes queue_policy: one of the generation's variants, or
// any string when it has none, or its default when absent.
func (d *decoder) queuePolicy(o object, gen *generation) (string, error) {
	n, err := d.optional(o, "queue_policy")
	switch {
	case err != nil:
		return "", err
	case n == nil:
		return gen.defaultQueuePolicy, nil
	case gen.queuePolicies == nil:
		return d.str(n, join(o.path, "queue_policy"))
	}
	return d.variant(n, join(o.path, "queue_policy"), gen.queuePolicies)
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

// keyUse is a key found in a document that marks one generation.
type keyUse struct {
	gen  *generation
	path string
	line int
}

func (u keyUse) String() string {
	return fmt.Sprintf("%s (line %d) is a %s key", u.path, u.line, u.gen.schema)
}

// detect picks the generation of a document from the keys that mark one
// in the root and model profiles and their classes. A document with marks
// of both is an error naming the first of each; one with neither is read
// as family/bucket, whose messages have always covered it.
func (d *decoder) detect(root *yaml.Node) (*generation, error) {
	s := markScan{d: d}
	if root != nil {
		s.profile(root, "", true)
	}
	switch {
	case s.err != nil:
		return nil, s.err
	case len(s.uses) == 0:
		return familyGeneration, nil
	case len(s.uses) == 1:
		return s.uses[0].gen, nil
	}
	return nil, &DecodeError{Msg: fmt.Sprintf("mixes two policy file generations: %s, %s", s.uses[0], s.uses[1])}
}

// markScan walks a document for detect. It reads what it can and leaves
// every problem to the decoder but the work bound, which ends the walk.
type markScan struct {
	d    *decoder
	uses []keyUse // the first mark of each generation, in document order
	err  error    // the work bound's error
}

func (s *markScan) profile(n *yaml.Node, path string, root bool) {
	for _, e := range s.mapping(n, path) {
		p := join(path, e.key)
		s.mark(e, p, false)
		switch {
		case e.key == "policy_classes":
			s.classes(e.valueRaw, p)
		case e.key == "models" && root:
			for _, m := range s.mapping(e.valueRaw, p) {
				s.profile(m.valueRaw, keyed(p, m.key), false)
			}
		}
	}
}

func (s *markScan) classes(n *yaml.Node, path string) {
	if s.err != nil {
		return
	}
	items, err := s.d.sequence(n, path)
	s.check(err)
	for i, item := range items {
		p := index(path, i)
		for _, e := range s.mapping(item, p) {
			s.mark(e, join(p, e.key), true)
		}
	}
}

// mapping returns the pairs mappingAll can read of n.
func (s *markScan) mapping(n *yaml.Node, path string) []entry {
	if s.err != nil {
		return nil
	}
	entries, problems := s.d.mappingAll(n, path)
	if len(problems) > 0 {
		s.check(problems[len(problems)-1])
	}
	return entries
}

// check keeps err if the decoder has spent its work bound.
func (s *markScan) check(err error) {
	if err != nil && s.d.visits > s.d.limit {
		s.err = err
	}
}

// mark records e's key at path if it is a profile (or class) key that
// marks a generation not seen yet.
func (s *markScan) mark(e entry, path string, class bool) {
	for _, g := range generations {
		marks := g.profileMarks
		if class {
			marks = g.classMarks
		}
		if slices.Contains(marks, e.key) && !slices.ContainsFunc(s.uses, func(u keyUse) bool { return u.gen == g }) {
			s.uses = append(s.uses, keyUse{g, path, e.keyNode.Line})
		}
	}
}
