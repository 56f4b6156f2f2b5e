package policy

import (
	"fmt"
	"math"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/sched"
)

// Field names of the priority scheduler file.
var (
	priorityFileFields = []string{"classes", "tenant_policies"}
	classConfigFields  = []string{
		"reserved_floor", "reserved_per_slot", "queue_size",
		"queue_timeout_secs", "starvation_threshold_secs", "can_preempt",
	}
	tenantPolicyFields = []string{"max_class"}
	// priorityVariants are the class names in the order upstream lists them.
	priorityVariants = []string{"system", "interactive", "default", "bulk"}
)

// maxWholeSeconds is the largest whole number of seconds a time.Duration
// holds; larger *_secs values are rejected rather than overflowing.
const maxWholeSeconds = uint64(math.MaxInt64 / time.Second)

// debugClassNames are the class names as upstream's validation messages
// print them (Debug formatting), indexed by sched.Priority.
var debugClassNames = [sched.NumPriorities]string{"Bulk", "Default", "Interactive", "System"}

// PriorityFile is a parsed SMG priority scheduler file
// (--priority-scheduler-config) with the built-in defaults applied.
type PriorityFile struct {
	// Classes is indexed by sched.Priority. A class the file names is
	// exactly what the file says (an omitted reserved_per_slot is 0); the
	// others are sched.DefaultClassConfig.
	Classes [sched.NumPriorities]sched.ClassConfig
	// Tenants maps an exact tenant key ("auth:acme", "header:team-red",
	// "ip:10.0.0.5", "anonymous") to its max_class. Never nil.
	Tenants map[string]sched.Priority
}

// DefaultPriorityFile returns the configuration of an absent or empty file:
// the built-in class defaults and no tenant policies.
func DefaultPriorityFile() *PriorityFile {
	f := &PriorityFile{Tenants: map[string]sched.Priority{}}
	for p := range sched.Priority(sched.NumPriorities) {
		f.Classes[p] = sched.DefaultClassConfig(p)
	}
	return f
}

// PriorityConfig returns the scheduler's priority configuration, enabled.
// The shell uses it only under --priority-scheduler-enabled.
func (f *PriorityFile) PriorityConfig() sched.PriorityConfig {
	return sched.PriorityConfig{Enabled: true, Classes: f.Classes}
}

// MaxClass returns the tenant's ceiling: its tenant_policies entry, or
// defaultMax when the key is not listed.
func (f *PriorityFile) MaxClass(tenant string, defaultMax sched.Priority) sched.Priority {
	if f != nil {
		if p, ok := f.Tenants[tenant]; ok {
			return p
		}
	}
	return defaultMax
}

// LoadPriorityConfig reads and parses the priority scheduler file at path.
// A read failure reads "reading <path>: <err>".
func LoadPriorityConfig(path string) (*PriorityFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, unwrapPathError(err))
	}
	return ParsePriorityConfig(data, path)
}

// ParsePriorityConfig parses and validates a priority scheduler document.
// path only names the document in errors; empty means "<inline>".
//
// Schema errors read "parsing <path>: <detail>". Unlike upstream, which
// ignores them, unknown keys and duplicate keys are schema errors that name
// the key. Rule violations carry upstream's exact text, for example
// "class Bulk: queue_timeout_secs must be > 0"; classes are checked in
// bulk, default, interactive, system order and the first violation wins.
// The reservations-versus-capacity check needs the worker set and is made
// by sched.New.
func ParsePriorityConfig(data []byte, path string) (*PriorityFile, error) {
	if path == "" {
		path = inlinePath
	}
	f, err := newDecoder().priorityFile(data)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// validate runs upstream's per-class checks: queue_timeout_secs > 0,
// starvation_threshold_secs > 0, reserved_per_slot finite and >= 0.
func (f *PriorityFile) validate() error {
	for p := range sched.Priority(sched.NumPriorities) {
		c := &f.Classes[p]
		name := debugClassNames[p]
		switch {
		case c.QueueTimeout <= 0:
			return fmt.Errorf("class %s: queue_timeout_secs must be > 0", name)
		case c.StarvationThreshold <= 0:
			return fmt.Errorf("class %s: starvation_threshold_secs must be > 0", name)
		case !isFinite(c.ReservedPerSlot) || c.ReservedPerSlot < 0:
			return fmt.Errorf("class %s: reserved_per_slot must be finite and >= 0", name)
		}
	}
	return nil
}

// priorityFile decodes a priority scheduler document against its schema,
// on top of the built-in defaults.
func (d *decoder) priorityFile(data []byte) (*PriorityFile, error) {
	f := DefaultPriorityFile()
	root, err := parseDocument(data)
	if err != nil || root == nil {
		return f, err
	}
	o, err := d.object(root, "", priorityFileFields)
	if err != nil {
		return nil, err
	}
	if n, err := d.optional(o, "classes"); err != nil {
		return nil, err
	} else if n != nil {
		entries, err := d.mapping(n, "classes")
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			p, ok := sched.ParsePriority(e.key)
			if !ok {
				return nil, d.errorf(e.keyNode, "classes", "unknown variant %q, expected one of system, interactive, default, bulk", e.key)
			}
			if f.Classes[p], err = d.classConfig(e.valueRaw, join("classes", e.key)); err != nil {
				return nil, err
			}
		}
	}
	if n, err := d.optional(o, "tenant_policies"); err != nil {
		return nil, err
	} else if n != nil {
		entries, err := d.mapping(n, "tenant_policies")
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			path := keyed("tenant_policies", e.key)
			to, err := d.object(e.valueRaw, path, tenantPolicyFields)
			if err != nil {
				return nil, err
			}
			mc, err := d.required(to, "max_class")
			if err != nil {
				return nil, err
			}
			s, err := d.variant(mc, join(path, "max_class"), priorityVariants)
			if err != nil {
				return nil, err
			}
			f.Tenants[e.key], _ = sched.ParsePriority(s)
		}
	}
	return f, nil
}

// classConfig decodes one class block. Every field is required except
// reserved_per_slot, which defaults to 0.
func (d *decoder) classConfig(n *yaml.Node, path string) (sched.ClassConfig, error) {
	var c sched.ClassConfig
	n, err := d.deref(n, path)
	if err != nil {
		return c, err
	}
	if n.Kind != yaml.MappingNode {
		return c, d.errorf(n, path, "invalid type: %s, expected a map", describe(n))
	}
	o, err := d.object(n, path, classConfigFields)
	if err != nil {
		return c, err
	}
	field := func(key string, limit uint64) (uint64, error) {
		v, err := d.required(o, key)
		if err != nil {
			return 0, err
		}
		return d.uint(v, join(path, key), limit)
	}
	floor, err := field("reserved_floor", math.MaxUint16)
	if err != nil {
		return c, err
	}
	c.ReservedFloor = uint16(floor)
	if v, err := d.optional(o, "reserved_per_slot"); err != nil {
		return c, err
	} else if v != nil {
		if c.ReservedPerSlot, err = d.float(v, join(path, "reserved_per_slot")); err != nil {
			return c, err
		}
	}
	size, err := field("queue_size", math.MaxUint32)
	if err != nil {
		return c, err
	}
	c.QueueSize = uint32(size)
	timeout, err := field("queue_timeout_secs", maxWholeSeconds)
	if err != nil {
		return c, err
	}
	c.QueueTimeout = time.Duration(timeout) * time.Second
	starve, err := field("starvation_threshold_secs", maxWholeSeconds)
	if err != nil {
		return c, err
	}
	c.StarvationThreshold = time.Duration(starve) * time.Second
	cp, err := d.required(o, "can_preempt")
	if err != nil {
		return c, err
	}
	if c.CanPreempt, err = d.boolean(cp, join(path, "can_preempt")); err != nil {
		return c, err
	}
	return c, nil
}

// Wire shapes for writing a priority scheduler document.
type (
	priorityFileOut struct {
		Classes        map[string]classConfigOut  `yaml:"classes"`
		TenantPolicies map[string]tenantPolicyOut `yaml:"tenant_policies,omitempty"`
	}
	classConfigOut struct {
		ReservedFloor           uint16  `yaml:"reserved_floor"`
		ReservedPerSlot         float64 `yaml:"reserved_per_slot"`
		QueueSize               uint32  `yaml:"queue_size"`
		QueueTimeoutSecs        int64   `yaml:"queue_timeout_secs"`
		StarvationThresholdSecs int64   `yaml:"starvation_threshold_secs"`
		CanPreempt              bool    `yaml:"can_preempt"`
	}
	tenantPolicyOut struct {
		MaxClass string `yaml:"max_class"`
	}
)

// MarshalPriorityConfig writes f as a priority scheduler document with every
// class spelled out, which ParsePriorityConfig reads back to an equal value.
// It fails when a duration is not a whole number of seconds or a tenant's
// class is out of range.
func MarshalPriorityConfig(f *PriorityFile) ([]byte, error) {
	out := priorityFileOut{Classes: make(map[string]classConfigOut, sched.NumPriorities)}
	for p := range sched.Priority(sched.NumPriorities) {
		c := f.Classes[p]
		if c.QueueTimeout%time.Second != 0 || c.StarvationThreshold%time.Second != 0 {
			return nil, fmt.Errorf("class %s: durations must be whole seconds", p)
		}
		out.Classes[p.String()] = classConfigOut{
			ReservedFloor:           c.ReservedFloor,
			ReservedPerSlot:         c.ReservedPerSlot,
			QueueSize:               c.QueueSize,
			QueueTimeoutSecs:        int64(c.QueueTimeout / time.Second),
			StarvationThresholdSecs: int64(c.StarvationThreshold / time.Second),
			CanPreempt:              c.CanPreempt,
		}
	}
	if len(f.Tenants) > 0 {
		out.TenantPolicies = make(map[string]tenantPolicyOut, len(f.Tenants))
		for k, p := range f.Tenants {
			if int(p) >= sched.NumPriorities {
				return nil, fmt.Errorf("tenant %q: invalid class %s", k, p)
			}
			out.TenantPolicies[k] = tenantPolicyOut{MaxClass: p.String()}
		}
	}
	return encodeYAML(out)
}
