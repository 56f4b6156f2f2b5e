package policy

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/sched"
)

// TestDefaultPriorityFile_MatchesUpstreamDefaults is SMG's built-in table
// (system 32/0/64/30/5/true, interactive 128/0.25/256/30/5/true, default
// 0/0.10/512/60/30/false, bulk 0/0/1024/300/120/false).
func TestDefaultPriorityFile_MatchesUpstreamDefaults(t *testing.T) {
	want := [sched.NumPriorities]sched.ClassConfig{
		sched.PriorityBulk:        {ReservedFloor: 0, ReservedPerSlot: 0, QueueSize: 1024, QueueTimeout: 300 * time.Second, StarvationThreshold: 120 * time.Second, CanPreempt: false},
		sched.PriorityDefault:     {ReservedFloor: 0, ReservedPerSlot: 0.10, QueueSize: 512, QueueTimeout: 60 * time.Second, StarvationThreshold: 30 * time.Second, CanPreempt: false},
		sched.PriorityInteractive: {ReservedFloor: 128, ReservedPerSlot: 0.25, QueueSize: 256, QueueTimeout: 30 * time.Second, StarvationThreshold: 5 * time.Second, CanPreempt: true},
		sched.PrioritySystem:      {ReservedFloor: 32, ReservedPerSlot: 0, QueueSize: 64, QueueTimeout: 30 * time.Second, StarvationThreshold: 5 * time.Second, CanPreempt: true},
	}
	for _, doc := range []string{"", "\n", "# only a comment\n", "~\n", "{}\n", "classes: {}\n", "classes: ~\ntenant_policies: ~\n", "---\n"} {
		f, err := ParsePriorityConfig([]byte(doc), "")
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if diff := cmp.Diff(want, f.Classes); diff != "" {
			t.Errorf("%q: classes (-want +got):\n%s", doc, diff)
		}
		if f.Tenants == nil || len(f.Tenants) != 0 {
			t.Errorf("%q: tenants = %#v, want an empty map", doc, f.Tenants)
		}
	}
	if diff := cmp.Diff(sched.DefaultPriorityConfig(), DefaultPriorityFile().PriorityConfig()); diff != "" {
		t.Errorf("PriorityConfig of the defaults (-want +got):\n%s", diff)
	}
}

func TestParsePriorityConfig_Example(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "priority.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParsePriorityConfig(data, "priority.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Both blocks restate the built-in defaults.
	if diff := cmp.Diff(DefaultPriorityFile().Classes, f.Classes); diff != "" {
		t.Errorf("classes (-want +got):\n%s", diff)
	}
	wantTenants := map[string]sched.Priority{"auth:acme": sched.PriorityInteractive, "auth:internal-cron": sched.PrioritySystem}
	if diff := cmp.Diff(wantTenants, f.Tenants); diff != "" {
		t.Errorf("tenants (-want +got):\n%s", diff)
	}
	if got := f.MaxClass("auth:acme", sched.PriorityDefault); got != sched.PriorityInteractive {
		t.Errorf("MaxClass(auth:acme) = %s", got)
	}
	if got := f.MaxClass("auth:ACME", sched.PriorityBulk); got != sched.PriorityBulk {
		t.Errorf("tenant keys are exact: MaxClass(auth:ACME) = %s, want bulk", got)
	}
	checkPriorityRoundTrip(t, f)
}

// TestParsePriorityConfig_BlockReplacesDefaults checks whole-block
// replacement: an interactive block without reserved_per_slot loses the
// built-in 0.25 share.
func TestParsePriorityConfig_BlockReplacesDefaults(t *testing.T) {
	doc := `
classes:
  interactive:
    reserved_floor: 200
    queue_size: 256
    queue_timeout_secs: 30
    starvation_threshold_secs: 5
    can_preempt: true
  default:
    reserved_floor: 7
    reserved_per_slot: 1
    queue_size: 0
    queue_timeout_secs: 1
    starvation_threshold_secs: 2
    can_preempt: true
`
	f, err := ParsePriorityConfig([]byte(doc), "")
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultPriorityFile().Classes
	want[sched.PriorityInteractive] = sched.ClassConfig{ReservedFloor: 200, QueueSize: 256, QueueTimeout: 30 * time.Second, StarvationThreshold: 5 * time.Second, CanPreempt: true}
	want[sched.PriorityDefault] = sched.ClassConfig{ReservedFloor: 7, ReservedPerSlot: 1, QueueSize: 0, QueueTimeout: time.Second, StarvationThreshold: 2 * time.Second, CanPreempt: true}
	if diff := cmp.Diff(want, f.Classes); diff != "" {
		t.Errorf("classes (-want +got):\n%s", diff)
	}
	cfg := f.PriorityConfig()
	if !cfg.Enabled || cfg.Classes != f.Classes {
		t.Errorf("PriorityConfig = %+v", cfg)
	}
	checkPriorityRoundTrip(t, f)
}

func TestParsePriorityConfig_Limits(t *testing.T) {
	doc := "classes:\n  bulk: {reserved_floor: 65535, reserved_per_slot: 2.5, queue_size: 4294967295, queue_timeout_secs: 9223372036, starvation_threshold_secs: 1, can_preempt: false}\n"
	f, err := ParsePriorityConfig([]byte(doc), "")
	if err != nil {
		t.Fatal(err)
	}
	c := f.Classes[sched.PriorityBulk]
	if c.ReservedFloor != math.MaxUint16 || c.QueueSize != math.MaxUint32 || c.QueueTimeout != 9223372036*time.Second || c.ReservedPerSlot != 2.5 {
		t.Errorf("bulk = %+v", c)
	}
	checkPriorityRoundTrip(t, f)
}

// priorityParseErrors are schema errors; want follows "parsing <inline>: ".
var priorityParseErrors = []struct {
	name, doc, want string
}{
	{"unknown top-level key", "fair_share: {}\n", `unknown field "fair_share", expected one of classes, tenant_policies at line 1 column 1`},
	{"unknown class field", "classes:\n  bulk: {reserved_floor: 0, queue_size: 1, queue_timeout_secs: 1, starvation_threshold_secs: 1, can_preempt: false, weight: 2}\n",
		`classes.bulk: unknown field "weight", expected one of reserved_floor, reserved_per_slot, queue_size, queue_timeout_secs, starvation_threshold_secs, can_preempt at line 2 column 117`},
	{"removed per-slot queue field", "classes:\n  bulk: {queue_size_per_slot: 2}\n",
		`classes.bulk: unknown field "queue_size_per_slot", expected one of reserved_floor, reserved_per_slot, queue_size, queue_timeout_secs, starvation_threshold_secs, can_preempt at line 2 column 10`},
	{"unknown tenant field", "tenant_policies:\n  \"auth:acme\": {max_class: bulk, rps_cap: 5}\n",
		`tenant_policies["auth:acme"]: unknown field "rps_cap", expected one of max_class at line 2 column 34`},
	{"capitalised class", "classes:\n  System: {}\n", `classes: unknown variant "System", expected one of system, interactive, default, bulk at line 2 column 3`},
	{"unknown class", "classes:\n  urgent: {}\n", `classes: unknown variant "urgent", expected one of system, interactive, default, bulk at line 2 column 3`},
	{"max_class garbage", "tenant_policies:\n  \"auth:acme\":\n    max_class: garbage\n",
		`tenant_policies["auth:acme"].max_class: unknown variant "garbage", expected one of system, interactive, default, bulk at line 3 column 16`},
	{"max_class capitalised", "tenant_policies:\n  t: {max_class: Bulk}\n",
		`tenant_policies["t"].max_class: unknown variant "Bulk", expected one of system, interactive, default, bulk at line 2 column 18`},
	{"missing max_class", "tenant_policies:\n  t: {}\n", `tenant_policies["t"]: missing field "max_class" at line 2 column 6`},
	{"duplicate class", "classes:\n  bulk: {}\n  bulk: {}\n", `classes: duplicate key "bulk" at line 3 column 3`},
	{"duplicate tenant", "tenant_policies:\n  t: {max_class: bulk}\n  t: {max_class: system}\n", `tenant_policies: duplicate key "t" at line 3 column 3`},
	{"duplicate field", "classes:\n  bulk: {queue_size: 1, queue_size: 2}\n", `classes.bulk: duplicate key "queue_size" at line 2 column 25`},
	{"missing field", "classes:\n  interactive:\n    reserved_floor: 128\n    queue_timeout_secs: 30\n    starvation_threshold_secs: 5\n    can_preempt: true\n",
		`classes.interactive: missing field "queue_size" at line 3 column 5`},
	{"missing can_preempt", "classes:\n  bulk: {reserved_floor: 0, queue_size: 1, queue_timeout_secs: 1, starvation_threshold_secs: 1}\n",
		`classes.bulk: missing field "can_preempt" at line 2 column 9`},
	{"null class block", "classes:\n  bulk: ~\n", `classes.bulk: invalid type: null, expected a map at line 2 column 9`},
	{"reserved_floor above u16", "classes:\n  bulk: {reserved_floor: 65536}\n",
		`classes.bulk.reserved_floor: invalid value: integer 65536, expected an unsigned integer <= 65535 at line 2 column 26`},
	{"negative reserved_floor", "classes:\n  bulk: {reserved_floor: -1}\n",
		`classes.bulk.reserved_floor: invalid value: integer -1, expected an unsigned integer <= 65535 at line 2 column 26`},
	{"queue_size above u32", "classes:\n  bulk: {reserved_floor: 0, queue_size: 4294967296}\n",
		`classes.bulk.queue_size: invalid value: integer 4294967296, expected an unsigned integer <= 4294967295 at line 2 column 41`},
	{"float secs", "classes:\n  bulk: {reserved_floor: 0, queue_size: 1, queue_timeout_secs: 1.5}\n",
		`classes.bulk.queue_timeout_secs: invalid type: floating point 1.5, expected an unsigned integer at line 2 column 64`},
	{"string secs", "classes:\n  bulk: {reserved_floor: 0, queue_size: 1, queue_timeout_secs: 1, starvation_threshold_secs: \"5\"}\n",
		`classes.bulk.starvation_threshold_secs: invalid type: string "5", expected an unsigned integer at line 2 column 94`},
	{"secs beyond a duration", "classes:\n  bulk: {reserved_floor: 0, queue_size: 1, queue_timeout_secs: 9223372037}\n",
		`classes.bulk.queue_timeout_secs: invalid value: integer 9223372037, expected an unsigned integer <= 9223372036 at line 2 column 64`},
	{"string share", "classes:\n  bulk: {reserved_floor: 0, reserved_per_slot: half}\n",
		`classes.bulk.reserved_per_slot: invalid type: string "half", expected a number at line 2 column 48`},
	{"yes is not a boolean", "classes:\n  bulk: {reserved_floor: 0, queue_size: 1, queue_timeout_secs: 1, starvation_threshold_secs: 1, can_preempt: yes}\n",
		`classes.bulk.can_preempt: invalid type: string "yes", expected a boolean at line 2 column 110`},
	{"classes as a list", "classes: [bulk]\n", `classes: invalid type: sequence, expected a map at line 1 column 10`},
	{"syntax error", "classes: {bulk\n", `line 1: did not find expected ',' or '}'`},
}

func TestParsePriorityConfig_ParseErrors(t *testing.T) {
	for _, tt := range priorityParseErrors {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ParsePriorityConfig([]byte(tt.doc), "")
			if err == nil {
				t.Fatalf("accepted:\n%s\nas %+v", tt.doc, f)
			}
			if got, want := err.Error(), "parsing <inline>: "+tt.want; got != want {
				t.Fatalf("error\n got: %s\nwant: %s", got, want)
			}
		})
	}
}

// fullBlock is a valid class block with one field overridden.
func fullBlock(class, field, value string) string {
	fields := map[string]string{
		"reserved_floor": "0", "reserved_per_slot": "0", "queue_size": "1",
		"queue_timeout_secs": "1", "starvation_threshold_secs": "1", "can_preempt": "false",
	}
	fields[field] = value
	var b strings.Builder
	b.WriteString("  " + class + ":\n")
	for _, k := range classConfigFields {
		b.WriteString("    " + k + ": " + fields[k] + "\n")
	}
	return b.String()
}

func TestParsePriorityConfig_ValidationErrors(t *testing.T) {
	for _, tt := range []struct {
		name, doc, want string
	}{
		{"zero timeout", "classes:\n" + fullBlock("bulk", "queue_timeout_secs", "0"), "class Bulk: queue_timeout_secs must be > 0"},
		{"zero starvation threshold", "classes:\n" + fullBlock("bulk", "starvation_threshold_secs", "0"), "class Bulk: starvation_threshold_secs must be > 0"},
		{"negative share", "classes:\n" + fullBlock("interactive", "reserved_per_slot", "-0.5"), "class Interactive: reserved_per_slot must be finite and >= 0"},
		{"NaN share", "classes:\n" + fullBlock("system", "reserved_per_slot", ".nan"), "class System: reserved_per_slot must be finite and >= 0"},
		{"infinite share", "classes:\n" + fullBlock("default", "reserved_per_slot", ".inf"), "class Default: reserved_per_slot must be finite and >= 0"},
		{"timeout before starvation", "classes:\n  bulk: {reserved_floor: 0, queue_size: 1, queue_timeout_secs: 0, starvation_threshold_secs: 0, can_preempt: false, reserved_per_slot: -1}\n",
			"class Bulk: queue_timeout_secs must be > 0"},
		{"starvation before share", "classes:\n  bulk: {reserved_floor: 0, queue_size: 1, queue_timeout_secs: 1, starvation_threshold_secs: 0, can_preempt: false, reserved_per_slot: -1}\n",
			"class Bulk: starvation_threshold_secs must be > 0"},
		{"bulk before default", "classes:\n" + fullBlock("default", "queue_timeout_secs", "0") + fullBlock("bulk", "reserved_per_slot", "-1"),
			"class Bulk: reserved_per_slot must be finite and >= 0"},
		{"default before interactive", "classes:\n" + fullBlock("system", "queue_timeout_secs", "0") + fullBlock("interactive", "queue_timeout_secs", "0") + fullBlock("default", "starvation_threshold_secs", "0"),
			"class Default: starvation_threshold_secs must be > 0"},
		{"interactive before system", "classes:\n" + fullBlock("system", "queue_timeout_secs", "0") + fullBlock("interactive", "queue_timeout_secs", "0"),
			"class Interactive: queue_timeout_secs must be > 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ParsePriorityConfig([]byte(tt.doc), "p.yaml")
			if err == nil {
				t.Fatalf("accepted as %+v", f)
			}
			if err.Error() != tt.want {
				t.Fatalf("error\n got: %s\nwant: %s", err, tt.want)
			}
		})
	}
}

func TestLoadPriorityConfig(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "absent.yaml")
	if _, err := LoadPriorityConfig(missing); err == nil || err.Error() != "reading "+missing+": no such file or directory" {
		t.Errorf("err = %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("classes:\n  System: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPriorityConfig(bad); err == nil || !strings.HasPrefix(err.Error(), "parsing "+bad+": classes: unknown variant") {
		t.Errorf("err = %v", err)
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("tenant_policies:\n  anonymous: {max_class: bulk}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := LoadPriorityConfig(good)
	if err != nil {
		t.Fatal(err)
	}
	if f.Tenants["anonymous"] != sched.PriorityBulk {
		t.Errorf("tenants = %v", f.Tenants)
	}
}

func TestMarshalPriorityConfig_Rejects(t *testing.T) {
	f := DefaultPriorityFile()
	f.Classes[sched.PriorityBulk].QueueTimeout = 1500 * time.Millisecond
	if _, err := MarshalPriorityConfig(f); err == nil {
		t.Error("a fractional duration must not marshal")
	}
	f = DefaultPriorityFile()
	f.Tenants["t"] = sched.Priority(9)
	if _, err := MarshalPriorityConfig(f); err == nil {
		t.Error("an out-of-range class must not marshal")
	}
}

func checkPriorityRoundTrip(t testing.TB, f *PriorityFile) {
	t.Helper()
	out, err := MarshalPriorityConfig(f)
	if err != nil {
		t.Fatalf("MarshalPriorityConfig: %v", err)
	}
	again, err := ParsePriorityConfig(out, "")
	if err != nil {
		t.Fatalf("reparse: %v\n%s", err, out)
	}
	if diff := cmp.Diff(f, again); diff != "" {
		t.Fatalf("round trip differs (-parsed +reparsed):\n%s\nmarshalled:\n%s", diff, out)
	}
}
