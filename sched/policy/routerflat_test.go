package policy

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/sched"
)

// Flat (default_policy_class) building blocks.
const (
	flatA = `{name: a, slo_ms: 1000, quantum: 1}`
	flatB = `{name: b, slo_ms: 2000, quantum: 2}`
)

// flatDoc builds a flat document with a root profile.
func flatDoc(def, classes string) string {
	return "default_policy_class: " + def + "\npolicy_classes: " + classes + "\n"
}

// flatModelDoc builds a flat document with one model profile and no root.
func flatModelDoc(name, def, classes string) string {
	return "models:\n  " + name + ":\n    default_policy_class: " + def + "\n    policy_classes: " + classes + "\n"
}

// flatClasses is the class list [flatA, flatB, extra...].
func flatClasses(extra ...string) string {
	return "[" + strings.Join(append([]string{flatA, flatB}, extra...), ", ") + "]"
}

// TestParseRouterPolicy_Schema checks the generation each example is read as.
func TestParseRouterPolicy_Schema(t *testing.T) {
	for file, want := range map[string]string{
		"policy-class-queues.yaml":      SchemaFamily,
		"premium_4x.yaml":               SchemaFamily,
		"equal_share.yaml":              SchemaFamily,
		"policy-class-queues-slo.yaml":  SchemaFlat,
		"slo_rejection.yaml":            SchemaFlat,
		"policy-class-queues-v1.7.yaml": SchemaFlat,
	} {
		cfg, err := ParseRouterPolicy(readExample(t, file), file)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if cfg.Schema != want {
			t.Errorf("%s: Schema = %q, want %q", file, cfg.Schema, want)
		}
	}
	if SchemaFamily != "family/bucket" || SchemaFlat != "flat SLO" {
		t.Errorf("schema names %q, %q", SchemaFamily, SchemaFlat)
	}
}

// TestParseRouterPolicy_FlatSample checks every field of the flat sample
// (Dynamo ff96fb03's policy-class-queues.yaml) and how it resolves.
func TestParseRouterPolicy_FlatSample(t *testing.T) {
	cfg, err := ParseRouterPolicy(readExample(t, "policy-class-queues-slo.yaml"), "")
	if err != nil {
		t.Fatal(err)
	}
	frac := ptr(16.0)
	const slo = 10 * time.Minute
	wantRoot := &sched.Profile{
		Classes: []sched.ClassSpec{
			{Name: "cached", QueuePolicy: sched.EDF, SLO: slo, Quantum: 2048, BusyThresholdFrac: frac,
				RequestLimitPerWorker: ptr[uint64](1024), CachedTokenLimitPerWorker: ptr[uint64](2097152)},
			{Name: "uncached", QueuePolicy: sched.EDF, SLO: slo, Quantum: 512, BusyThresholdFrac: frac,
				RequestLimitPerWorker: ptr[uint64](512), RawISLLimitPerWorker: ptr[uint64](1048576)},
			{Name: "latency_cached", QueuePolicy: sched.EDF, SLO: slo, Quantum: 4096, BusyThresholdFrac: frac,
				RequestLimitPerWorker: ptr[uint64](256)},
			{Name: "latency_uncached", QueuePolicy: sched.EDF, SLO: slo, Quantum: 1024, BusyThresholdFrac: frac,
				RequestLimitPerWorker: ptr[uint64](128), RawISLLimitPerWorker: ptr[uint64](524288)},
			{Name: "custom_priority", QueuePolicy: sched.EDF, SLO: slo, Quantum: 4096, BusyThresholdFrac: frac,
				RequestLimitPerWorker: ptr[uint64](128)},
		},
		Explicit: map[string]int{"cached": 0, "uncached": 1, "latency_cached": 2, "latency_uncached": 3, "custom_priority": 4},
		Flat:     true,
	}
	if diff := cmp.Diff(wantRoot, cfg.Root); diff != "" {
		t.Errorf("root profile (-want +got):\n%s", diff)
	}
	wantModel := &sched.Profile{
		Classes: []sched.ClassSpec{
			{Name: "latency_cached", QueuePolicy: sched.EDF, SLO: slo, Quantum: 4096, BusyThresholdFrac: frac,
				RequestLimitPerWorker: ptr[uint64](256)},
			{Name: "latency_uncached", QueuePolicy: sched.EDF, SLO: slo, Quantum: 1024, BusyThresholdFrac: frac,
				RequestLimitPerWorker: ptr[uint64](128)},
			{Name: "batch_cached", QueuePolicy: sched.EDF, SLO: slo, Quantum: 2048, BusyThresholdFrac: frac,
				CachedTokenLimitPerWorker: ptr[uint64](1048576)},
			{Name: "batch_uncached", QueuePolicy: sched.EDF, SLO: slo, Quantum: 1024, BusyThresholdFrac: frac,
				RawISLLimitPerWorker: ptr[uint64](524288)},
		},
		Explicit: map[string]int{"latency_cached": 0, "latency_uncached": 1, "batch_cached": 2, "batch_uncached": 3},
		Flat:     true,
	}
	if diff := cmp.Diff(map[string]*sched.Profile{"example/large-model": wantModel}, cfg.Models); diff != "" {
		t.Errorf("model profiles (-want +got):\n%s", diff)
	}

	root := cfg.ProfileFor("some/other-model")
	model := cfg.ProfileFor("example/large-model")
	for _, tt := range []struct {
		p         *sched.Profile
		requested string
		want      int
	}{
		{root, "", 0}, // the default class, whatever the prompt
		{root, "uncached", 1},
		{root, "custom_priority", 4},
		{root, "latency", -1},      // a G1 family name is no class here
		{root, "Cached", -1},       // names are case-sensitive
		{root, "batch_cached", -1}, // the model's class, not the root's
		{model, "", 0},
		{model, "batch_uncached", 3},
		{model, "custom_priority", -1}, // nothing is inherited from the root
		{model, "cached", -1},
	} {
		for _, uncached := range []uint64{0, 4096, math.MaxUint64} {
			if got := tt.p.Resolve(tt.requested, uncached); got != tt.want {
				t.Errorf("Resolve(%q, %d) = %d, want %d", tt.requested, uncached, got, tt.want)
			}
		}
	}
}

// TestParseRouterPolicy_FlatExamples checks the two smaller flat examples
// in full.
func TestParseRouterPolicy_FlatExamples(t *testing.T) {
	for _, tt := range []struct {
		file    string
		want    *sched.Profile
		resolve map[string]int
	}{
		{"slo_rejection.yaml", &sched.Profile{
			Classes: []sched.ClassSpec{
				{Name: "standard", QueuePolicy: sched.EDF, SLO: 30 * time.Second, Quantum: 512,
					BusyThreshold: ptr[uint64](0), RequestLimitPerWorker: ptr[uint64](32)},
				{Name: "latency", QueuePolicy: sched.EDF, SLO: 3 * time.Second, Quantum: 512,
					BusyThreshold: ptr[uint64](0), RequestLimitPerWorker: ptr[uint64](32)},
			},
			Explicit: map[string]int{"standard": 0, "latency": 1},
			Flat:     true,
		}, map[string]int{"": 0, "standard": 0, "latency": 1, "premium": -1, " latency": -1}},
		{"policy-class-queues-v1.7.yaml", &sched.Profile{
			Classes: []sched.ClassSpec{
				{Name: "interactive", QueuePolicy: sched.EDF, SLO: 5 * time.Second, Quantum: 2048,
					BusyThresholdFrac: ptr(8.0), RequestLimitPerWorker: ptr[uint64](256)},
				{Name: "agent", QueuePolicy: sched.FCFS, SLO: time.Minute, Quantum: 1024,
					BusyThresholdFrac: ptr(8.0), RequestLimitPerWorker: ptr[uint64](128)},
				{Name: "batch", QueuePolicy: sched.WSPT, SLO: 10 * time.Minute, Quantum: 512,
					BusyThresholdFrac: ptr(8.0), RawISLLimitPerWorker: ptr[uint64](1048576)},
			},
			Explicit: map[string]int{"interactive": 0, "agent": 1, "batch": 2},
			Flat:     true,
		}, map[string]int{"": 0, "agent": 1, "batch": 2, "interactive": 0, "unknown": -1}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			cfg, err := ParseRouterPolicy(readExample(t, tt.file), tt.file)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(&sched.PolicyConfig{Schema: SchemaFlat, Root: tt.want, Models: map[string]*sched.Profile{}}, cfg); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			for requested, want := range tt.resolve {
				if got := cfg.Root.Resolve(requested, 100); got != want {
					t.Errorf("Resolve(%q) = %d, want %d", requested, got, want)
				}
			}
		})
	}
}

// TestParseRouterPolicy_FlatAccepts covers flat documents that must parse.
func TestParseRouterPolicy_FlatAccepts(t *testing.T) {
	t.Run("default class need not be the first", func(t *testing.T) {
		cfg := mustParseRouter(t, flatDoc("b", flatClasses()))
		if cfg.Root.DefaultClass != 1 || cfg.Root.Resolve("", 0) != 1 {
			t.Errorf("DefaultClass = %d", cfg.Root.DefaultClass)
		}
	})
	t.Run("queue_policy spellings and the edf default", func(t *testing.T) {
		for qp, want := range map[string]sched.QueuePolicy{"edf": sched.EDF, "fcfs": sched.FCFS, "wspt": sched.WSPT, "~": sched.EDF} {
			cfg := mustParseRouter(t, flatDoc("a", `[{name: a, slo_ms: 1, quantum: 1, queue_policy: `+qp+`}]`))
			if got := cfg.Root.Classes[0].QueuePolicy; got != want {
				t.Errorf("queue_policy %s = %v, want %v", qp, got, want)
			}
		}
	})
	t.Run("largest slo_ms", func(t *testing.T) {
		cfg := mustParseRouter(t, flatDoc("a", `[{name: a, slo_ms: 9223372036854, quantum: 1}]`))
		if got, want := cfg.Root.Classes[0].SLO, time.Duration(9223372036854)*time.Millisecond; got != want || got <= 0 {
			t.Errorf("SLO = %v, want %v", got, want)
		}
	})
	t.Run("null optional fields are absent", func(t *testing.T) {
		cfg := mustParseRouter(t, flatDoc("a", `[{name: a, slo_ms: 1, quantum: 1, queue_policy: ~, prefill_busy_threshold: ~, prefill_busy_threshold_frac: ~, request_queue_limit_per_worker: ~, raw_isl_token_queue_limit_per_worker: ~, cached_token_queue_limit_per_worker: ~}]`))
		want := sched.ClassSpec{Name: "a", QueuePolicy: sched.EDF, SLO: time.Millisecond, Quantum: 1}
		if diff := cmp.Diff(want, cfg.Root.Classes[0]); diff != "" {
			t.Errorf("class (-want +got):\n%s", diff)
		}
	})
	t.Run("only models, with aliases", func(t *testing.T) {
		doc := "models:\n  m: &p\n    default_policy_class: a\n    policy_classes: " + flatClasses() + "\n  n: *p\n"
		cfg := mustParseRouter(t, doc)
		if cfg.Root != nil || cfg.Schema != SchemaFlat || len(cfg.Models) != 2 {
			t.Fatalf("cfg = %+v", cfg)
		}
		if diff := cmp.Diff(cfg.Models["m"], cfg.Models["n"]); diff != "" {
			t.Errorf("aliased profile differs (-m +n):\n%s", diff)
		}
	})
	t.Run("root and model", func(t *testing.T) {
		cfg := mustParseRouter(t, flatDoc("a", "["+flatA+"]")+flatModelDoc("m", "b", flatClasses()))
		if !cfg.Root.Flat || !cfg.Models["m"].Flat || cfg.ProfileFor("m").Resolve("b", 0) != 1 || cfg.ProfileFor("x").Resolve("b", 0) != -1 {
			t.Errorf("cfg = %+v", cfg)
		}
	})
}

// flatValidationTests pins every flat rule to its exact text. want is the
// message after "invalid router policy config: ".
var flatValidationTests = []struct {
	name, doc, want string
}{
	{"default class without classes", "default_policy_class: a\n",
		"root profile must specify both default_policy_class and policy_classes when either is present"},
	{"classes without a default class", "policy_classes: " + flatClasses() + "\n",
		"root profile must specify both default_policy_class and policy_classes when either is present"},
	{"null root keys count as absent", "default_policy_class: ~\npolicy_classes: ~\n",
		"router policy config must define a root profile, at least one model profile, or worker_selection"},
	{"default class not an identifier", flatDoc(`"a b"`, flatClasses()), `root policy class name "a b" must match [A-Za-z0-9_.-]+`},
	{"default class empty", flatDoc(`""`, flatClasses()), `root policy class name "" must match [A-Za-z0-9_.-]+`},
	{"no classes", flatDoc("a", "[]"), "root policy_classes must not be empty"},
	{"default class unknown", flatDoc("c", flatClasses()), `root default_policy_class "c" does not name a configured policy class`},
	{"class name not an identifier", flatDoc("a", flatClasses(`{name: "x/y", slo_ms: 1, quantum: 1}`)),
		`root policy class name "x/y" must match [A-Za-z0-9_.-]+`},
	{"zero slo_ms", flatDoc("a", flatClasses(`{name: z, slo_ms: 0, quantum: 1}`)),
		`root policy class "z" slo_ms must be greater than zero`},
	{"slo_ms past time.Duration", flatDoc("a", flatClasses(`{name: z, slo_ms: 9223372036855, quantum: 1}`)),
		`root policy class "z" slo_ms must be at most 9223372036854 (about 292 years)`},
	{"largest u64 slo_ms", flatDoc("a", flatClasses(`{name: z, slo_ms: 18446744073709551615, quantum: 1}`)),
		`root policy class "z" slo_ms must be at most 9223372036854 (about 292 years)`},
	{"zero quantum", flatDoc("a", flatClasses(`{name: z, slo_ms: 1, quantum: 0}`)),
		`root policy class "z" quantum must be greater than zero`},
	{"lcfs", flatDoc("a", flatClasses(`{name: z, slo_ms: 1, quantum: 1, queue_policy: lcfs}`)),
		`root policy class "z" queue_policy must be edf, fcfs or wspt`},
	{"upper-case queue_policy", flatDoc("a", flatClasses(`{name: z, slo_ms: 1, quantum: 1, queue_policy: EDF}`)),
		`root policy class "z" queue_policy must be edf, fcfs or wspt`},
	{"empty queue_policy", flatDoc("a", flatClasses(`{name: z, slo_ms: 1, quantum: 1, queue_policy: ""}`)),
		`root policy class "z" queue_policy must be edf, fcfs or wspt`},
	{"numeric queue_policy", flatDoc("a", flatClasses(`{name: z, slo_ms: 1, quantum: 1, queue_policy: 1}`)),
		`root policy class "z" queue_policy must be edf, fcfs or wspt`},
	{"negative frac", flatDoc("a", flatClasses(`{name: z, slo_ms: 1, quantum: 1, prefill_busy_threshold_frac: -1}`)),
		`root policy class "z" prefill_busy_threshold_frac must be finite and non-negative`},
	{"NaN frac", flatDoc("a", flatClasses(`{name: z, slo_ms: 1, quantum: 1, prefill_busy_threshold_frac: .nan}`)),
		`root policy class "z" prefill_busy_threshold_frac must be finite and non-negative`},
	{"duplicate class", flatDoc("a", flatClasses(`{name: a, slo_ms: 9, quantum: 9}`)), `root contains duplicate policy class "a"`},
	{"empty model name", flatModelDoc(`""`, "a", flatClasses()), "model profile name must not be empty"},
	{"model location", flatModelDoc("example/large-model", "c", flatClasses()),
		`model "example/large-model" default_policy_class "c" does not name a configured policy class`},
	{"model class location", flatModelDoc("m", "a", `[{name: a, slo_ms: 0, quantum: 1}]`),
		`model "m" policy class "a" slo_ms must be greater than zero`},
	{"model without classes", flatModelDoc("m", "a", "[]"), `model "m" policy_classes must not be empty`},
	{"worker_selection", flatDoc("a", flatClasses()) + "worker_selection: {aggregated: x}\n",
		"worker_selection is not supported: workers are always chosen by the built-in cost function; remove the worker_selection block"},

	// Order: the first violation in upstream's order wins.
	{"default identifier before empty classes", flatDoc(`"a b"`, "[]"), `root policy class name "a b" must match [A-Za-z0-9_.-]+`},
	{"empty classes before the default class", flatDoc("zzz", "[]"), "root policy_classes must not be empty"},
	{"class checks before the default class", flatDoc("zzz", flatClasses(`{name: z, slo_ms: 0, quantum: 1}`)),
		`root policy class "z" slo_ms must be greater than zero`},
	{"name before slo_ms", flatDoc("a", flatClasses(`{name: "n/a", slo_ms: 0, quantum: 0}`)),
		`root policy class name "n/a" must match [A-Za-z0-9_.-]+`},
	{"slo_ms before quantum", flatDoc("a", flatClasses(`{name: z, slo_ms: 0, quantum: 0}`)),
		`root policy class "z" slo_ms must be greater than zero`},
	{"quantum before queue_policy", flatDoc("a", flatClasses(`{name: z, slo_ms: 1, quantum: 0, queue_policy: lcfs}`)),
		`root policy class "z" quantum must be greater than zero`},
	{"queue_policy before frac", flatDoc("a", flatClasses(`{name: z, slo_ms: 1, quantum: 1, queue_policy: lcfs, prefill_busy_threshold_frac: -1}`)),
		`root policy class "z" queue_policy must be edf, fcfs or wspt`},
	{"duplicate as each class is added", flatDoc("a", flatClasses(`{name: a, slo_ms: 1, quantum: 1}`, `{name: late, slo_ms: 0, quantum: 1}`)),
		`root contains duplicate policy class "a"`},
	{"root before models", flatDoc("a", flatClasses(`{name: r, slo_ms: 0, quantum: 1}`)) + flatModelDoc("m", "x", "[]"),
		`root policy class "r" slo_ms must be greater than zero`},
	{"root presence rule before models", "default_policy_class: a\n" + flatModelDoc(`""`, "a", "[]"),
		"root profile must specify both default_policy_class and policy_classes when either is present"},
	{"models in document order", flatModelDoc("zeta", "a", "[]") + "  alpha:\n    default_policy_class: x\n    policy_classes: [{name: y, slo_ms: 0, quantum: 1}]\n",
		`model "zeta" policy_classes must not be empty`},
	{"profiles before worker_selection", flatDoc("c", flatClasses()) + "worker_selection: {}\n",
		`root default_policy_class "c" does not name a configured policy class`},
}

func TestParseRouterPolicy_FlatValidationErrors(t *testing.T) {
	for _, tt := range flatValidationTests {
		t.Run(tt.name, func(t *testing.T) {
			checkInvalid(t, tt.doc, tt.want)
		})
	}
}

// flatParseErrorTests are flat schema errors and mixed documents. want is
// the detail after "failed to parse router policy config <inline>: ".
var flatParseErrorTests = []struct {
	name, doc, want string
}{
	{"missing slo_ms", flatDoc("a", `[{name: a, quantum: 1}]`), `policy_classes[0]: missing field "slo_ms" at line 2 column 18`},
	{"missing slo_ms in a model", flatModelDoc("m", "a", `[{name: a, quantum: 1}]`),
		`models["m"].policy_classes[0]: missing field "slo_ms" at line 4 column 22`},
	{"missing quantum", flatDoc("a", `[{name: a, slo_ms: 1}]`), `policy_classes[0]: missing field "quantum" at line 2 column 18`},
	{"model missing its default class", "models:\n  m:\n    policy_classes: " + flatClasses() + "\n",
		`models["m"]: missing field "default_policy_class" at line 3 column 5`},
	{"model missing its classes", "models:\n  m:\n    default_policy_class: a\n",
		`models["m"]: missing field "policy_classes" at line 3 column 5`},
	{"float slo_ms", flatDoc("a", `[{name: a, slo_ms: 1.5, quantum: 1}]`),
		`policy_classes[0].slo_ms: invalid type: floating point 1.5, expected an unsigned integer at line 2 column 36`},
	{"negative slo_ms", flatDoc("a", `[{name: a, slo_ms: -1, quantum: 1}]`),
		`policy_classes[0].slo_ms: invalid value: integer -1, expected an unsigned integer at line 2 column 36`},
	{"string slo_ms", flatDoc("a", `[{name: a, slo_ms: "30000", quantum: 1}]`),
		`policy_classes[0].slo_ms: invalid type: string "30000", expected an unsigned integer at line 2 column 36`},
	{"null slo_ms", flatDoc("a", `[{name: a, slo_ms: ~, quantum: 1}]`),
		`policy_classes[0].slo_ms: invalid type: null, expected an unsigned integer at line 2 column 36`},
	{"slo_ms past u64", flatDoc("a", `[{name: a, slo_ms: 18446744073709551616, quantum: 1}]`),
		`policy_classes[0].slo_ms: invalid type: floating point 18446744073709551616, expected an unsigned integer at line 2 column 36`},
	{"unknown top-level key", "foo: 1\n" + flatDoc("a", flatClasses()),
		`unknown field "foo", expected one of default_policy_class, policy_classes, models, worker_selection at line 1 column 1`},
	{"unknown class key", flatDoc("a", `[{name: a, slo_ms: 1, quantum: 1, deadline_ms: 5}]`),
		`policy_classes[0]: unknown field "deadline_ms", expected one of name, slo_ms, queue_policy, quantum, prefill_busy_threshold, prefill_busy_threshold_frac, request_queue_limit_per_worker, raw_isl_token_queue_limit_per_worker, cached_token_queue_limit_per_worker at line 2 column 51`},
	{"unknown model profile key", "models:\n  m:\n    default_policy_class: a\n    inherit: root\n",
		`models["m"]: unknown field "inherit", expected one of default_policy_class, policy_classes at line 4 column 5`},
	{"duplicate key", flatDoc("a", flatClasses()) + "default_policy_class: b\n", `duplicate key "default_policy_class" at line 3 column 1`},
	{"classes not a sequence", flatDoc("a", "{name: a}"), `policy_classes: invalid type: map, expected a sequence at line 2 column 17`},
	{"default class not a string", flatDoc("[a]", flatClasses()), `default_policy_class: invalid type: sequence, expected a string at line 1 column 23`},

	// Mixed generations name the first key of each, in document order.
	{"flat root, family class key",
		"default_policy_class: a\npolicy_classes:\n  - name: a\n    policy_family: f\n    slo_ms: 1\n    quantum: 1\n",
		`mixes two policy file generations: default_policy_class (line 1) is a flat SLO key, policy_classes[0].policy_family (line 4) is a family/bucket key`},
	{"family root, slo_ms", stdDoc(`{name: x, slo_ms: 100, quantum: 1}`),
		`mixes two policy file generations: default_policy_family (line 1) is a family/bucket key, policy_classes[2].slo_ms (line 3) is a flat SLO key`},
	{"buckets beside a default class", "uncached_isl_buckets: []\ndefault_policy_class: a\n",
		`mixes two policy file generations: uncached_isl_buckets (line 1) is a family/bucket key, default_policy_class (line 2) is a flat SLO key`},
	{"busy_worker_ratio in a flat class", flatDoc("a", `[{name: a, slo_ms: 1, quantum: 1, busy_worker_ratio: 0.5}]`),
		`mixes two policy file generations: default_policy_class (line 1) is a flat SLO key, policy_classes[0].busy_worker_ratio (line 2) is a family/bucket key`},
	{"cache_bucket in a flat class", flatDoc("a", `[{name: a, slo_ms: 1, quantum: 1, cache_bucket: b}]`),
		`mixes two policy file generations: default_policy_class (line 1) is a flat SLO key, policy_classes[0].cache_bucket (line 2) is a family/bucket key`},
	{"family root, flat model", stdDoc() + flatModelDoc("m", "a", flatClasses()),
		`mixes two policy file generations: default_policy_family (line 1) is a family/bucket key, models["m"].default_policy_class (line 6) is a flat SLO key`},
	{"flat model, family model", flatModelDoc("m", "a", flatClasses()) + "  n:\n    default_policy_family: f\n",
		`mixes two policy file generations: models["m"].default_policy_class (line 3) is a flat SLO key, models["n"].default_policy_family (line 6) is a family/bucket key`},
	{"slo_ms in a family model's class", modelDoc("m", "f", oneBucket, `[{name: c, policy_family: f, cache_bucket: b, slo_ms: 5, quantum: 1}]`),
		`mixes two policy file generations: models["m"].default_policy_family (line 3) is a family/bucket key, models["m"].policy_classes[0].slo_ms (line 5) is a flat SLO key`},
	{"a null key still marks", "default_policy_family: ~\n" + flatDoc("a", flatClasses()),
		`mixes two policy file generations: default_policy_family (line 1) is a family/bucket key, default_policy_class (line 2) is a flat SLO key`},
	{"mixed before other schema errors", "foo: 1\ndefault_policy_class: a\npolicy_classes: [{name: a, quantum: 1.5, policy_family: f}]\n",
		`mixes two policy file generations: default_policy_class (line 2) is a flat SLO key, policy_classes[0].policy_family (line 3) is a family/bucket key`},
	{"marks behind an alias", "worker_selection: &w {name: a, policy_family: f}\ndefault_policy_class: a\npolicy_classes: [*w]\n",
		`mixes two policy file generations: default_policy_class (line 2) is a flat SLO key, policy_classes[0].policy_family (line 1) is a family/bucket key`},
}

func TestParseRouterPolicy_FlatParseErrors(t *testing.T) {
	for _, tt := range flatParseErrorTests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseRouterPolicy([]byte(tt.doc), "")
			if err == nil {
				t.Fatalf("accepted:\n%s\nas %+v", tt.doc, cfg)
			}
			if got, want := err.Error(), "failed to parse router policy config <inline>: "+tt.want; got != want {
				t.Fatalf("error\n got: %s\nwant: %s\ndoc:\n%s", got, want, tt.doc)
			}
		})
	}
}

// TestParseRouterPolicy_NeitherGeneration pins what a document with no
// generation's keys reports: it is read as family/bucket, as always.
func TestParseRouterPolicy_NeitherGeneration(t *testing.T) {
	checkInvalid(t, "policy_classes: [{name: a, quantum: 1}]\n",
		"root profile must specify default_policy_family, uncached_isl_buckets, and policy_classes when any root profile field is present")
	_, err := ParseRouterPolicy([]byte("foo: 1\n"), "x.yaml")
	if want := `failed to parse router policy config x.yaml: unknown field "foo", expected one of default_policy_family, uncached_isl_buckets, policy_classes, models, worker_selection at line 1 column 1`; err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
}

func TestParseRouterPolicy_MixedNamesThePath(t *testing.T) {
	_, err := ParseRouterPolicy([]byte("default_policy_class: a\npolicy_classes: [{name: a, policy_family: f}]\n"), "x.yaml")
	want := "failed to parse router policy config x.yaml: mixes two policy file generations: default_policy_class (line 1) is a flat SLO key, policy_classes[0].policy_family (line 2) is a family/bucket key"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
}

func TestMarshalRouterPolicy_Flat(t *testing.T) {
	for _, name := range []string{"policy-class-queues-slo.yaml", "slo_rejection.yaml", "policy-class-queues-v1.7.yaml"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := ParseRouterPolicy(readExample(t, name), name)
			if err != nil {
				t.Fatal(err)
			}
			checkRouterRoundTrip(t, cfg)
		})
	}
	t.Run("edf is left out, other policies and slo_ms are written", func(t *testing.T) {
		cfg := mustParseRouter(t, flatDoc("b", `[{name: a, slo_ms: 1500, quantum: 1, queue_policy: wspt}, {name: b, slo_ms: 20, quantum: 2}]`))
		out, err := MarshalRouterPolicy(cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := "default_policy_class: b\npolicy_classes:\n" +
			"  - name: a\n    slo_ms: 1500\n    queue_policy: wspt\n    quantum: 1\n" +
			"  - name: b\n    slo_ms: 20\n    quantum: 2\n"
		if string(out) != want {
			t.Errorf("got:\n%s\nwant:\n%s", out, want)
		}
	})
	t.Run("flat and family profiles do not share a file", func(t *testing.T) {
		flat := mustParseRouter(t, flatDoc("a", flatClasses()))
		family := mustParseRouter(t, stdDoc())
		cfg := &sched.PolicyConfig{Root: family.Root, Models: map[string]*sched.Profile{"m": flat.Root}}
		if _, err := MarshalRouterPolicy(cfg); err == nil || err.Error() != "flat SLO and family/bucket profiles cannot share one file" {
			t.Errorf("err = %v", err)
		}
	})
}
