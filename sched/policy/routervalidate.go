package policy

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tollgate/tollgate/sched"
)

// resolve validates a decoded document and builds its profiles. It returns
// the first violation's message in upstream's order: the root profile, each
// model profile in document order, worker_selection, then the rule that
// something must be defined.
func (raw *rawPolicyFile) resolve() (*sched.PolicyConfig, string) {
	gen := raw.gen
	cfg := &sched.PolicyConfig{Schema: gen.schema, Models: make(map[string]*sched.Profile, len(raw.models))}
	// The root keys are all present or all absent.
	present := []bool{raw.defaultName != nil, raw.hasClasses}
	if !gen.flat() {
		present = append(present, raw.hasBuckets)
	}
	switch countSet(present...) {
	case 0:
	case len(present):
		root, msg := gen.resolveProfile(rawProfile{
			defaultName: *raw.defaultName,
			buckets:     raw.buckets,
			classes:     raw.classes,
		}, "root")
		if msg != "" {
			return nil, msg
		}
		cfg.Root = root
	default:
		return nil, gen.rootRule
	}
	for _, m := range raw.models {
		if m.name == "" {
			return nil, "model profile name must not be empty"
		}
		p, msg := gen.resolveProfile(m.profile, "model "+debugQuote(m.name))
		if msg != "" {
			return nil, msg
		}
		cfg.Models[m.name] = p
	}
	if raw.workerSelection {
		return nil, "worker_selection is not supported: workers are always chosen by the built-in cost function; remove the worker_selection block"
	}
	if cfg.Root == nil && len(cfg.Models) == 0 {
		return nil, "router policy config must define a root profile, at least one model profile, or worker_selection"
	}
	return cfg, ""
}

func countSet(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// resolveProfile validates one profile at location loc ("root" or
// `model "<name>"`) and builds its class indexes. The checks run in
// upstream's order, so the first violation reported is the one upstream
// reports.
func (g *generation) resolveProfile(raw rawProfile, loc string) (*sched.Profile, string) {
	kind := "policy family"
	if g.flat() {
		kind = "policy class"
	}
	if msg := checkIdentifier(raw.defaultName, kind, loc); msg != "" {
		return nil, msg
	}
	if len(raw.classes) == 0 {
		return nil, loc + " policy_classes must not be empty"
	}
	if g.flat() {
		return resolveFlatProfile(raw, loc)
	}
	return resolveFamilyProfile(raw, loc)
}

// resolveFlatProfile builds a flat profile whose default name and class
// list are checked: the classes, each in full before the next, then the
// default class. Every class is selected by its exact name.
func resolveFlatProfile(raw rawProfile, loc string) (*sched.Profile, string) {
	p := &sched.Profile{
		Classes:  make([]sched.ClassSpec, 0, len(raw.classes)),
		Explicit: make(map[string]int, len(raw.classes)),
		Flat:     true,
	}
	for _, rc := range raw.classes {
		spec, _, msg := resolveClass(rc, nil, loc, flatGeneration)
		if msg != "" {
			return nil, msg
		}
		if _, dup := p.Explicit[spec.Name]; dup {
			return nil, duplicateClass(loc, spec.Name)
		}
		p.Explicit[spec.Name] = len(p.Classes)
		p.Classes = append(p.Classes, spec)
	}
	i, ok := p.Explicit[raw.defaultName]
	if !ok {
		return nil, fmt.Sprintf("%s default_policy_class %s does not name a configured policy class", loc, debugQuote(raw.defaultName))
	}
	p.DefaultClass = i
	return p, ""
}

// resolveFamilyProfile builds a family/bucket profile whose default name
// and class list are checked: the buckets, the classes, the default family,
// then the matrix.
func resolveFamilyProfile(raw rawProfile, loc string) (*sched.Profile, string) {
	buckets, bucketIndex, msg := resolveBuckets(raw.buckets, loc)
	if msg != "" {
		return nil, msg
	}

	// Classes, each checked in full before the next; a duplicate name is
	// caught as the class is added.
	p := &sched.Profile{
		Classes:       make([]sched.ClassSpec, 0, len(raw.classes)),
		Buckets:       buckets,
		DefaultFamily: raw.defaultName,
		Explicit:      make(map[string]int),
	}
	names := make(map[string]bool, len(raw.classes))
	bucketOf := make([]int, 0, len(raw.classes)) // -1 for an explicit class
	for _, rc := range raw.classes {
		spec, b, msg := resolveClass(rc, bucketIndex, loc, familyGeneration)
		if msg != "" {
			return nil, msg
		}
		if names[spec.Name] {
			return nil, duplicateClass(loc, spec.Name)
		}
		names[spec.Name] = true
		p.Classes = append(p.Classes, spec)
		bucketOf = append(bucketOf, b)
	}

	// Families in order of first appearance.
	var families []string
	for i := range p.Classes {
		if f := p.Classes[i].Family; bucketOf[i] >= 0 && !slices.Contains(families, f) {
			families = append(families, f)
		}
	}
	if !slices.Contains(families, raw.defaultName) {
		return nil, fmt.Sprintf("%s default_policy_family %s does not name a configured family", loc, debugQuote(raw.defaultName))
	}

	p.Matrix = make(map[string][]int, len(families))
	for _, f := range families {
		row := make([]int, len(buckets))
		for j := range row {
			row[j] = -1
		}
		p.Matrix[f] = row
	}
	for i := range p.Classes {
		c := &p.Classes[i]
		if bucketOf[i] < 0 {
			if _, ok := p.Matrix[c.Name]; ok {
				return nil, fmt.Sprintf("%s explicit policy class %s collides with a policy family", loc, debugQuote(c.Name))
			}
			p.Explicit[c.Name] = i
			continue
		}
		row := p.Matrix[c.Family]
		if row[bucketOf[i]] >= 0 {
			return nil, fmt.Sprintf("%s contains duplicate policy classes for family %s and bucket %s",
				loc, debugQuote(c.Family), debugQuote(c.Bucket))
		}
		row[bucketOf[i]] = i
	}
	for _, f := range families {
		for j, ci := range p.Matrix[f] {
			if ci < 0 {
				return nil, fmt.Sprintf("%s is missing a policy class for family %s and bucket %s",
					loc, debugQuote(f), debugQuote(buckets[j].Name))
			}
		}
	}
	return p, ""
}

// resolveBuckets checks the bucket list: not empty, starting at 0, strictly
// increasing over the whole list, then per bucket a valid, unique name.
func resolveBuckets(raw []rawBucket, loc string) ([]sched.Bucket, map[string]int, string) {
	if len(raw) == 0 {
		return nil, nil, loc + " uncached_isl_buckets must not be empty"
	}
	if raw[0].minTokens != 0 {
		return nil, nil, loc + " uncached_isl_buckets must start at min_tokens 0"
	}
	for i := 1; i < len(raw); i++ {
		if raw[i].minTokens <= raw[i-1].minTokens {
			return nil, nil, loc + " uncached_isl_buckets min_tokens must be strictly increasing"
		}
	}
	buckets := make([]sched.Bucket, 0, len(raw))
	idx := make(map[string]int, len(raw))
	for _, b := range raw {
		if msg := checkIdentifier(b.name, "cache bucket", loc); msg != "" {
			return nil, nil, msg
		}
		if _, dup := idx[b.name]; dup {
			return nil, nil, fmt.Sprintf("%s contains duplicate cache bucket %s", loc, debugQuote(b.name))
		}
		idx[b.name] = len(buckets)
		buckets = append(buckets, sched.Bucket{MinTokens: b.minTokens, Name: b.name})
	}
	return buckets, idx, ""
}

// maxSLOMillis is the largest slo_ms a time.Duration holds (about 292 years).
const maxSLOMillis = math.MaxInt64 / int64(time.Millisecond)

// resolveClass checks one class of generation gen in upstream's order
// (name, slo_ms, quantum, queue_policy, prefill_busy_threshold_frac,
// busy_worker_ratio, binding) and returns it with its bucket index, or -1
// for an explicit class. A flat class has slo_ms and never a family key,
// so the family checks pass it by.
func resolveClass(rc rawClass, bucketIndex map[string]int, loc string, gen *generation) (sched.ClassSpec, int, string) {
	var spec sched.ClassSpec
	if msg := checkIdentifier(rc.name, "policy class", loc); msg != "" {
		return spec, 0, msg
	}
	cl := fmt.Sprintf("%s policy class %s", loc, debugQuote(rc.name))
	if rc.slo != nil {
		if *rc.slo == 0 {
			return spec, 0, cl + " slo_ms must be greater than zero"
		}
		if *rc.slo > uint64(maxSLOMillis) {
			return spec, 0, fmt.Sprintf("%s slo_ms must be at most %d (about 292 years)", cl, maxSLOMillis)
		}
		spec.SLO = time.Duration(*rc.slo) * time.Millisecond
	}
	if rc.quantum == 0 {
		return spec, 0, cl + " quantum must be greater than zero"
	}
	// A family file's lcfs parses, but only the synthetic class may use it
	// upstream.
	qp, ok := gen.queuePolicyOf[rc.queuePolicy]
	if !ok {
		return spec, 0, cl + " " + gen.queuePolicyRule
	}
	if rc.frac != nil && (!isFinite(*rc.frac) || *rc.frac < 0) {
		return spec, 0, cl + " prefill_busy_threshold_frac must be finite and non-negative"
	}
	if rc.ratio != nil && (!isFinite(*rc.ratio) || *rc.ratio <= 0 || *rc.ratio > 1) {
		return spec, 0, cl + " busy_worker_ratio must be a finite fraction in (0.0, 1.0]"
	}
	if rc.ratio != nil && rc.threshold == nil && rc.frac == nil {
		return spec, 0, cl + " sets busy_worker_ratio but no prefill_busy_threshold or prefill_busy_threshold_frac, so no worker can ever be considered busy"
	}
	b := -1
	switch {
	case rc.family == nil && rc.bucket == nil:
	case rc.family != nil && rc.bucket != nil:
		if msg := checkIdentifier(*rc.family, "policy family", loc); msg != "" {
			return spec, 0, msg
		}
		if msg := checkIdentifier(*rc.bucket, "cache bucket", loc); msg != "" {
			return spec, 0, msg
		}
		i, ok := bucketIndex[*rc.bucket]
		if !ok {
			return spec, 0, fmt.Sprintf("%s references unknown cache bucket %s", cl, debugQuote(*rc.bucket))
		}
		b = i
		spec.Family, spec.Bucket = *rc.family, *rc.bucket
	default:
		return spec, 0, cl + " must specify both policy_family and cache_bucket or neither for an explicit class"
	}
	spec.Name = rc.name
	spec.QueuePolicy = qp
	spec.Quantum = rc.quantum
	spec.BusyThreshold = rc.threshold
	spec.BusyThresholdFrac = rc.frac
	if rc.ratio != nil {
		spec.BusyWorkerRatio = *rc.ratio
	}
	spec.RequestLimitPerWorker = rc.requestLimit
	spec.RawISLLimitPerWorker = rc.rawISLLimit
	spec.CachedTokenLimitPerWorker = rc.cachedLimit
	return spec, b, ""
}

func duplicateClass(loc, name string) string {
	return fmt.Sprintf("%s contains duplicate policy class %s", loc, debugQuote(name))
}

// isIdentifier reports whether s matches [A-Za-z0-9_.-]+, the rule of
// Dynamo's names and SMG's rule ids.
func isIdentifier(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isIdentByte(c) {
			return false
		}
	}
	return s != ""
}

func isIdentByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-'
}

func isFinite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// checkIdentifier enforces the upstream identifier rule: non-empty ASCII
// [A-Za-z0-9_.-]+. kind is "policy class", "policy family" or "cache bucket".
func checkIdentifier(name, kind, loc string) string {
	if isIdentifier(name) {
		return ""
	}
	return fmt.Sprintf("%s %s name %s must match [A-Za-z0-9_.-]+", loc, kind, debugQuote(name))
}
