package policy

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/sched"
)

// Bounds of a tenant rate-limit file.
const (
	// MaxTenantRateLimitFileBytes bounds the size of the file.
	MaxTenantRateLimitFileBytes = 4 << 20
	// MaxRateLimitTenants bounds the tenants list.
	MaxRateLimitTenants = 10000
	// MaxRateLimitModelRules bounds the model_rules list of one policy.
	MaxRateLimitModelRules = 256
)

// Keys of the tenant rate-limit file, in SMG's order.
var (
	rateLimitRootKeys    = []string{"default_policy", "tenants"}
	rateLimitPolicyKeys  = []string{"tenant_key", "tokens_per_minute", "requests_per_minute", "model_rules"}
	rateLimitRuleKeys    = []string{"rule_id", "matcher", "tokens_per_minute", "requests_per_minute"}
	rateLimitMatcherKeys = []string{"type", "value"}
)

// LoadTenantRateLimits reads and parses SMG's tenant rate-limit file
// (--tenant-rate-limit-config) at path. A read failure reads "reading
// <path>: <err>"; a file over MaxTenantRateLimitFileBytes is an error.
func LoadTenantRateLimits(path string) (*sched.TenantBudgets, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, unwrapPathError(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxTenantRateLimitFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, unwrapPathError(err))
	}
	return ParseTenantRateLimits(data, path)
}

// ParseTenantRateLimits parses and validates a tenant rate-limit document
// against SMG's schema; path only names it in errors ("<inline>" when
// empty). It is read with YAMLReader: one document, unknown and duplicate
// keys rejected, integers never from floats or strings, every
// per-minute value in [1, 2^32-1].
//
// Every problem is reported, joined, in the file's order, each as
// "PATH:LINE:COLUMN: problem". Rule violations use SMG's wording, for
// example "policy 'auth:acme': tokens_per_minute must be > 0"; schema
// problems name their place, as in `tenants[1]: missing field
// "requests_per_minute"`.
func ParseTenantRateLimits(data []byte, path string) (*sched.TenantBudgets, error) {
	if path == "" {
		path = inlinePath
	}
	if len(data) > MaxTenantRateLimitFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, MaxTenantRateLimitFileBytes)
	}
	tb, problems := readTenantRateLimits(data)
	if len(problems) == 0 {
		return tb, nil
	}
	slices.SortStableFunc(problems, func(a, b *DecodeError) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = errors.New(inFile(path, p))
	}
	return nil, errors.Join(errs...)
}

// inFile renders p as "PATH:LINE:COLUMN: place: problem", leaving out the
// parts that are unknown.
func inFile(path string, p *DecodeError) string {
	msg := p.Msg
	if p.Path != "" {
		msg = p.Path + ": " + msg
	}
	switch {
	case p.Line > 0 && p.Column > 0:
		return fmt.Sprintf("%s:%d:%d: %s", path, p.Line, p.Column, msg)
	case p.Line > 0:
		return fmt.Sprintf("%s:%d: %s", path, p.Line, msg)
	}
	return path + ": " + msg
}

// HeaderKeys returns the header: tenant keys of tb, sorted. Such a key
// only matches when the tenant header is trusted (--trust-tenant-header).
func HeaderKeys(tb *sched.TenantBudgets) []string {
	var keys []string
	for k := range tb.Tenants {
		if strings.HasPrefix(k, "header:") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// CheckTenantHeaderTrust fails, as SMG's startup does, when tb (read from
// path) has header: tenant keys but the tenant header is not trusted: one
// problem per key, joined.
func CheckTenantHeaderTrust(tb *sched.TenantBudgets, path string, trustHeader bool) error {
	if trustHeader {
		return nil
	}
	var errs []error
	for _, k := range HeaderKeys(tb) {
		errs = append(errs, fmt.Errorf("%s: tenant_key %s needs --trust-tenant-header: without it this override can never match a real request", path, quoteSMG(k)))
	}
	return errors.Join(errs...)
}

// rateLimitReader reads one tenant rate-limit document, collecting every
// problem.
type rateLimitReader struct {
	r        *YAMLReader
	problems []*DecodeError
	// tooLarge is the problem of a document past the reader's work bound
	// (alias expansion), which ends the reading.
	tooLarge *DecodeError
}

// readTenantRateLimits reads a document: the budgets when it has no
// problem, else every problem.
func readTenantRateLimits(data []byte) (*sched.TenantBudgets, []*DecodeError) {
	r, root, err := ReadYAML(data)
	if err != nil {
		return nil, []*DecodeError{asDecodeError("", err)}
	}
	if root == nil {
		return nil, []*DecodeError{{Msg: `the document is empty; it needs a default_policy`}}
	}
	x := &rateLimitReader{r: r}
	tb := &sched.TenantBudgets{Tenants: map[string]sched.BudgetPolicy{}}
	if fields, ok := x.object(root, "", rateLimitRootKeys); ok {
		if n, ok := x.need(fields, "default_policy", root, ""); ok {
			tb.Default = x.defaultPolicy(n)
		}
		if f := fields["tenants"]; f.Value != nil {
			x.tenants(f.Value, tb)
		}
	}
	switch {
	case x.tooLarge != nil:
		return nil, []*DecodeError{x.tooLarge}
	case len(x.problems) > 0:
		return nil, x.problems
	}
	return tb, nil
}

// asDecodeError gives err, from the reader, the place it is about.
func asDecodeError(place string, err error) *DecodeError {
	de, ok := errors.AsType[*DecodeError](err)
	if !ok {
		return &DecodeError{Path: place, Msg: err.Error()}
	}
	return &DecodeError{Path: place, Line: de.Line, Column: de.Column, Msg: de.Msg}
}

// fail notes a reader error about place.
func (x *rateLimitReader) fail(place string, err error) {
	p := asDecodeError(place, err)
	x.problems = append(x.problems, p)
	if x.tooLarge == nil && x.done() {
		// The reader's own error may read as another problem (a key that
		// is no string), so the message is said here.
		x.tooLarge = &DecodeError{Line: p.Line, Column: p.Column, Msg: "document is too large after alias expansion"}
	}
}

// done reports whether the reader has spent its work bound: every later
// read fails, so reading stops.
func (x *rateLimitReader) done() bool { return x.r.d.visits > x.r.d.limit }

// failAt notes a problem at n's position.
func (x *rateLimitReader) failAt(n *yaml.Node, format string, args ...any) {
	x.problems = append(x.problems, &DecodeError{Line: n.Line, Column: n.Column, Msg: fmt.Sprintf(format, args...)})
}

// object reads n as a mapping with the known keys, null values included.
// ok is false when n is no mapping at all (its type is then its only
// problem).
func (x *rateLimitReader) object(n *yaml.Node, place string, known []string) (map[string]YAMLField, bool) {
	list, errs := x.r.Object(n, known)
	for _, err := range errs {
		x.fail(place, err)
	}
	target := n
	if target.Kind == yaml.AliasNode && target.Alias != nil {
		target = target.Alias
	}
	if target.Kind == yaml.SequenceNode || target.Kind == yaml.ScalarNode && !isNull(target) {
		return nil, false
	}
	fields := make(map[string]YAMLField, len(list))
	for _, f := range list {
		fields[f.Key] = f
	}
	return fields, true
}

// need returns a required key's value. An absent or null key is a
// "missing field" problem at the key, or at the mapping at when absent.
func (x *rateLimitReader) need(fields map[string]YAMLField, key string, at *yaml.Node, place string) (*yaml.Node, bool) {
	f, ok := fields[key]
	if ok && f.Value != nil {
		return f.Value, true
	}
	if ok {
		at = f.KeyNode
	}
	x.problems = append(x.problems, &DecodeError{Path: place, Line: at.Line, Column: at.Column, Msg: fmt.Sprintf("missing field %q", key)})
	return nil, false
}

// defaultPolicy reads default_policy, which must not name a tenant.
func (x *rateLimitReader) defaultPolicy(n *yaml.Node) sched.BudgetPolicy {
	const place = "default_policy"
	fields, ok := x.object(n, place, rateLimitPolicyKeys)
	if !ok {
		return sched.BudgetPolicy{}
	}
	if f := fields["tenant_key"]; f.Value != nil {
		x.failAt(f.KeyNode, "default_policy must not set tenant_key")
	}
	return x.budgets(fields, n, place, place)
}

// tenants reads the tenants list into tb.Tenants; tenants whose key is
// missing, invalid or repeated are left out (and are problems).
func (x *rateLimitReader) tenants(n *yaml.Node, tb *sched.TenantBudgets) {
	items, err := x.r.Sequence(n)
	if err != nil {
		x.fail("tenants", err)
		return
	}
	if len(items) > MaxRateLimitTenants {
		x.failAt(n, "tenants: %d entries; at most %d are supported", len(items), MaxRateLimitTenants)
		return
	}
	firstLine := make(map[string]int, len(items))
	for i, item := range items {
		if x.done() {
			return
		}
		place := index("tenants", i)
		fields, ok := x.object(item, place, rateLimitPolicyKeys)
		if !ok {
			continue
		}
		key, keyNode, label := x.tenantKey(fields, item, i)
		p := x.budgets(fields, item, place, label)
		if key == "" {
			continue
		}
		if line, dup := firstLine[key]; dup {
			x.failAt(keyNode, "duplicate tenant_key %s (first at line %d)", quoteSMG(key), line)
			continue
		}
		firstLine[key] = keyNode.Line
		tb.Tenants[key] = p
	}
}

// tenantKey reads and checks tenants[i].tenant_key. It returns the key
// when it is valid ("" otherwise), its node, and the label the entry's
// other problems name it by: the key as written, or "tenants[i]".
func (x *rateLimitReader) tenantKey(fields map[string]YAMLField, item *yaml.Node, i int) (key string, n *yaml.Node, label string) {
	place := index("tenants", i)
	f, ok := fields["tenant_key"]
	switch {
	case !ok:
		x.failAt(item, "tenants[%d] is missing tenant_key", i)
		return "", nil, place
	case f.Value == nil:
		x.failAt(f.KeyNode, "tenants[%d] is missing tenant_key", i)
		return "", nil, place
	}
	s, err := x.r.String(f.Value)
	if err != nil {
		x.fail(place+".tenant_key", err)
		return "", nil, place
	}
	trimmed := strings.TrimSpace(s)
	switch {
	case trimmed == "":
		x.failAt(f.Value, "tenants[%d] is missing tenant_key", i)
		return "", nil, place
	case trimmed != s:
		x.failAt(f.Value, "tenant_key %s must not have surrounding whitespace", quoteSMG(s))
		return "", nil, s
	}
	if why := nonCanonicalTenantKey(s); why != "" {
		x.failAt(f.Value, "%s.tenant_key %s is not a canonical serving-path tenant key: %s", place, quoteSMG(s), why)
		return "", nil, s
	}
	return s, f.Value, s
}

// nonCanonicalTenantKey says why s is no tenant key Tenants.Resolve can
// return, or "" when it is one: anonymous, auth:<id> (visible ASCII
// without spaces or colons, as --tenant-api-key ids are), header:<value>
// (visible ASCII, tabs allowed inside, as the trusted header is read) or
// ip:<address> in net/netip's canonical form.
func nonCanonicalTenantKey(s string) string {
	if s == AnonymousTenant {
		return ""
	}
	if id, ok := strings.CutPrefix(s, "auth:"); ok {
		if id == "" || !isTenantID(id) || strings.Contains(id, ":") {
			return "the id after auth: must be visible ASCII without spaces or colons"
		}
		return ""
	}
	if v, ok := strings.CutPrefix(s, "header:"); ok {
		if v == "" || trimASCIISpace(v) != v || !visibleASCII(v) {
			return "the value after header: must be visible ASCII without surrounding whitespace"
		}
		return ""
	}
	if ip, ok := strings.CutPrefix(s, "ip:"); ok {
		a, err := netip.ParseAddr(ip)
		switch {
		case err != nil:
			return quoteSMG(ip) + " is not an IP address"
		case a.WithZone("").String() != ip:
			return "write it as " + quoteSMG("ip:"+a.WithZone("").String())
		}
		return ""
	}
	return "want auth:<id>, header:<value>, ip:<address> or anonymous"
}

// budgets reads the per-minute values and the model rules of a policy;
// label names the policy in SMG's messages.
func (x *rateLimitReader) budgets(fields map[string]YAMLField, at *yaml.Node, place, label string) sched.BudgetPolicy {
	prefix := "policy " + quoteSMG(label) + ": "
	p := sched.BudgetPolicy{
		TokensPerMinute:   x.perMinute(fields, "tokens_per_minute", at, place, prefix),
		RequestsPerMinute: x.perMinute(fields, "requests_per_minute", at, place, prefix),
	}
	if f := fields["model_rules"]; f.Value != nil {
		p.Rules = x.rules(f.Value, join(place, "model_rules"), prefix)
	}
	return p
}

// perMinute reads a required per-minute budget in [1, 2^32-1]; a 0 is
// SMG's "<prefix><key> must be > 0".
func (x *rateLimitReader) perMinute(fields map[string]YAMLField, key string, at *yaml.Node, place, prefix string) uint32 {
	n, ok := x.need(fields, key, at, place)
	if !ok {
		return 0
	}
	if isZeroInt(n) {
		x.failAt(n, "%s%s must be > 0", prefix, key)
		return 0
	}
	u, err := x.r.Uint(n, 1, math.MaxUint32)
	if err != nil {
		x.fail(join(place, key), err)
	}
	return uint32(u)
}

// isZeroInt reports whether n is the integer 0 (in any spelling).
func isZeroInt(n *yaml.Node) bool {
	var v int64
	return n.Kind == yaml.ScalarNode && n.ShortTag() == tagInt && n.Decode(&v) == nil && v == 0
}

// ruleSeen is what a policy's rules so far claimed: ids and matcher
// values, each with the rule that claimed it.
type ruleSeen struct {
	idLine        map[string]int
	exact, prefix map[string]string
}

// rules reads a policy's model_rules; prefix names the policy.
func (x *rateLimitReader) rules(n *yaml.Node, place, prefix string) []sched.ModelRule {
	items, err := x.r.Sequence(n)
	if err != nil {
		x.fail(place, err)
		return nil
	}
	if len(items) > MaxRateLimitModelRules {
		x.failAt(n, "%s: %d rules; at most %d per policy are supported", place, len(items), MaxRateLimitModelRules)
		return nil
	}
	var out []sched.ModelRule
	seen := ruleSeen{idLine: map[string]int{}, exact: map[string]string{}, prefix: map[string]string{}}
	for j, item := range items {
		if x.done() {
			break
		}
		if r, ok := x.rule(item, index(place, j), prefix, &seen); ok {
			out = append(out, r)
		}
	}
	return out
}

// rule reads one model rule and checks it against the policy's others.
func (x *rateLimitReader) rule(item *yaml.Node, place, prefix string, seen *ruleSeen) (sched.ModelRule, bool) {
	var r sched.ModelRule
	fields, ok := x.object(item, place, rateLimitRuleKeys)
	if !ok {
		return r, false
	}
	name := place
	if n, ok := x.need(fields, "rule_id", item, place); ok {
		r.ID, ok = x.ruleID(n, place, prefix, seen)
		if ok {
			name = r.ID
		}
	}
	rulePrefix := prefix + "rule " + quoteSMG(name) + " "
	r.TokensPerMinute = x.perMinute(fields, "tokens_per_minute", item, place, rulePrefix)
	r.RequestsPerMinute = x.perMinute(fields, "requests_per_minute", item, place, rulePrefix)
	if n, ok := x.need(fields, "matcher", item, place); ok {
		x.matcher(n, join(place, "matcher"), rulePrefix, name, seen, &r)
	}
	return r, true
}

// ruleID reads a rule_id: [A-Za-z0-9._-]+ and new to the policy. ok is
// whether it reads as a string.
func (x *rateLimitReader) ruleID(n *yaml.Node, place, prefix string, seen *ruleSeen) (string, bool) {
	id, err := x.r.String(n)
	if err != nil {
		x.fail(join(place, "rule_id"), err)
		return "", false
	}
	if !isIdentifier(id) {
		x.failAt(n, "%srule_id %s must match [A-Za-z0-9._-]+", prefix, quoteSMG(id))
	} else if line, dup := seen.idLine[id]; dup {
		x.failAt(n, "%sduplicate rule_id %s (first at line %d)", prefix, quoteSMG(id), line)
	} else {
		seen.idLine[id] = n.Line
	}
	return id, true
}

// matcher reads a rule's matcher into r: its type (exact or prefix) and
// a value no other rule of the policy matches the same way. rulePrefix
// and name name the rule.
func (x *rateLimitReader) matcher(n *yaml.Node, place, rulePrefix, name string, seen *ruleSeen, r *sched.ModelRule) {
	fields, ok := x.object(n, place, rateLimitMatcherKeys)
	if !ok {
		return
	}
	var table map[string]string
	if t, ok := x.need(fields, "type", n, place); ok {
		switch s, err := x.r.String(t); {
		case err != nil:
			x.fail(join(place, "type"), err)
		case s == "exact":
			table = seen.exact
		case s == "prefix":
			r.Prefix, table = true, seen.prefix
		default:
			x.failAt(t, "%s.type: unknown variant %q, expected one of exact, prefix", place, s)
		}
	}
	v, ok := x.need(fields, "value", n, place)
	if !ok {
		return
	}
	s, err := x.r.String(v)
	switch {
	case err != nil:
		x.fail(join(place, "value"), err)
		return
	case strings.TrimSpace(s) == "":
		x.failAt(v, "%smatcher value must not be empty", rulePrefix)
		return
	case strings.TrimSpace(s) != s:
		x.failAt(v, "%smatcher value %s must not have surrounding whitespace", rulePrefix, quoteSMG(s))
		return
	}
	r.Value = s
	if table == nil {
		return
	}
	if other, dup := table[s]; dup {
		x.failAt(v, "%smatcher duplicates rule %s", rulePrefix, quoteSMG(other))
		return
	}
	table[s] = name
}

// quoteSMG quotes s the way SMG's messages do, in single quotes, with
// non-printable characters escaped so a message stays on one line.
func quoteSMG(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for _, r := range s {
		if unicode.IsPrint(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRune(r)
		b.WriteString(q[1 : len(q)-1])
	}
	b.WriteByte('\'')
	return b.String()
}
