package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

const oneBucket = `[{min_tokens: 0, bucket: b}]`

// validationTests pins every validation rule to its exact upstream text.
// want is the message after "invalid router policy config: ".
var validationTests = []struct {
	name, doc, want string
}{
	// Top level.
	{"empty document", "", "router policy config must define a root profile, at least one model profile, or worker_selection"},
	{"empty mapping", "{}\n", "router policy config must define a root profile, at least one model profile, or worker_selection"},
	{"empty models", "models: {}\n", "router policy config must define a root profile, at least one model profile, or worker_selection"},
	{"root without classes", "default_policy_family: standard\nuncached_isl_buckets: " + twoBuckets + "\n",
		"root profile must specify default_policy_family, uncached_isl_buckets, and policy_classes when any root profile field is present"},
	{"root with only classes", "policy_classes: [" + stdClasses + "]\n",
		"root profile must specify default_policy_family, uncached_isl_buckets, and policy_classes when any root profile field is present"},
	{"empty model name", modelDoc(`""`, "f", oneBucket, `[{name: c, policy_family: f, cache_bucket: b, quantum: 1}]`),
		"model profile name must not be empty"},
	{"worker_selection", "worker_selection:\n  aggregated: example\n  instances: [{name: example, type: example-policy}]\n",
		"worker_selection is not supported: workers are always chosen by the built-in cost function; remove the worker_selection block"},
	{"worker_selection beside a valid root", stdDoc() + "worker_selection: {}\n",
		"worker_selection is not supported: workers are always chosen by the built-in cost function; remove the worker_selection block"},

	// Identifiers.
	{"default family not an identifier", rootDoc(`"bad family"`, twoBuckets, "["+stdClasses+"]"),
		`root policy family name "bad family" must match [A-Za-z0-9_.-]+`},
	{"default family empty", rootDoc(`""`, twoBuckets, "["+stdClasses+"]"),
		`root policy family name "" must match [A-Za-z0-9_.-]+`},
	{"class name with a slash", stdDoc(`{name: a/b, quantum: 1}`), `root policy class name "a/b" must match [A-Za-z0-9_.-]+`},
	{"class name empty", stdDoc(`{name: "", quantum: 1}`), `root policy class name "" must match [A-Za-z0-9_.-]+`},
	{"class name non-ASCII", stdDoc(`{name: "clásico", quantum: 1}`), `root policy class name "clásico" must match [A-Za-z0-9_.-]+`},
	{"class name with a quote and a newline", stdDoc(`{name: "a\"b\nc", quantum: 1}`), `root policy class name "a\"b\nc" must match [A-Za-z0-9_.-]+`},
	{"class family not an identifier", stdDoc(`{name: x, policy_family: "in valid", cache_bucket: cached, quantum: 1}`),
		`root policy family name "in valid" must match [A-Za-z0-9_.-]+`},
	{"class bucket not an identifier", stdDoc(`{name: x, policy_family: f, cache_bucket: "b*", quantum: 1}`),
		`root cache bucket name "b*" must match [A-Za-z0-9_.-]+`},
	{"bucket name not an identifier", rootDoc("standard", `[{min_tokens: 0, bucket: "c d"}]`, "["+stdCached+"]"),
		`root cache bucket name "c d" must match [A-Za-z0-9_.-]+`},

	// Lists.
	{"no classes", rootDoc("standard", twoBuckets, "[]"), "root policy_classes must not be empty"},
	{"no buckets", rootDoc("standard", "[]", "["+stdClasses+"]"), "root uncached_isl_buckets must not be empty"},
	{"first floor not zero", rootDoc("standard", `[{min_tokens: 1, bucket: cached}]`, "["+stdCached+"]"),
		"root uncached_isl_buckets must start at min_tokens 0"},
	{"equal floors", rootDoc("standard", `[{min_tokens: 0, bucket: a}, {min_tokens: 0, bucket: b}]`, "["+stdCached+"]"),
		"root uncached_isl_buckets min_tokens must be strictly increasing"},
	{"decreasing floors", rootDoc("standard", `[{min_tokens: 0, bucket: a}, {min_tokens: 64, bucket: b}, {min_tokens: 32, bucket: c}]`, "["+stdCached+"]"),
		"root uncached_isl_buckets min_tokens must be strictly increasing"},
	{"duplicate bucket", rootDoc("standard", `[{min_tokens: 0, bucket: cached}, {min_tokens: 32, bucket: cached}]`, "["+stdCached+"]"),
		`root contains duplicate cache bucket "cached"`},

	// Class fields.
	{"zero quantum", stdDoc(`{name: zero, quantum: 0}`), `root policy class "zero" quantum must be greater than zero`},
	{"lcfs", stdDoc(`{name: l, queue_policy: lcfs, quantum: 1}`), `root policy class "l" queue_policy must be fcfs or wspt`},
	{"negative frac", stdDoc(`{name: f, quantum: 1, prefill_busy_threshold_frac: -0.5}`),
		`root policy class "f" prefill_busy_threshold_frac must be finite and non-negative`},
	{"NaN frac", stdDoc(`{name: f, quantum: 1, prefill_busy_threshold_frac: .nan}`),
		`root policy class "f" prefill_busy_threshold_frac must be finite and non-negative`},
	{"infinite frac", stdDoc(`{name: f, quantum: 1, prefill_busy_threshold_frac: .inf}`),
		`root policy class "f" prefill_busy_threshold_frac must be finite and non-negative`},
	{"zero ratio", stdDoc(`{name: r, quantum: 1, prefill_busy_threshold: 1, busy_worker_ratio: 0}`),
		`root policy class "r" busy_worker_ratio must be a finite fraction in (0.0, 1.0]`},
	{"ratio above one", stdDoc(`{name: r, quantum: 1, prefill_busy_threshold: 1, busy_worker_ratio: 16.0}`),
		`root policy class "r" busy_worker_ratio must be a finite fraction in (0.0, 1.0]`},
	{"NaN ratio", stdDoc(`{name: r, quantum: 1, prefill_busy_threshold: 1, busy_worker_ratio: .NaN}`),
		`root policy class "r" busy_worker_ratio must be a finite fraction in (0.0, 1.0]`},
	{"ratio without a threshold", stdDoc(`{name: r, quantum: 1, busy_worker_ratio: 0.9}`),
		`root policy class "r" sets busy_worker_ratio but no prefill_busy_threshold or prefill_busy_threshold_frac, so no worker can ever be considered busy`},
	{"family without bucket", stdDoc(`{name: partial, policy_family: standard, quantum: 1}`),
		`root policy class "partial" must specify both policy_family and cache_bucket or neither for an explicit class`},
	{"bucket without family", stdDoc(`{name: partial, cache_bucket: cached, quantum: 1}`),
		`root policy class "partial" must specify both policy_family and cache_bucket or neither for an explicit class`},
	{"unknown bucket", stdDoc(`{name: m, policy_family: standard, cache_bucket: absent, quantum: 1}`),
		`root policy class "m" references unknown cache bucket "absent"`},

	// Profile rules.
	{"duplicate class name", stdDoc(`{name: cached, quantum: 1}`), `root contains duplicate policy class "cached"`},
	{"default family has no class", rootDoc("latency", twoBuckets, "["+stdClasses+"]"),
		`root default_policy_family "latency" does not name a configured family`},
	{"only explicit classes", rootDoc("standard", twoBuckets, `[{name: x, quantum: 1}]`),
		`root default_policy_family "standard" does not name a configured family`},
	{"explicit class named like a family", rootDoc("priority", oneBucket, `[{name: priority, quantum: 1}, {name: paired, policy_family: priority, cache_bucket: b, quantum: 1}]`),
		`root explicit policy class "priority" collides with a policy family`},
	{"duplicate matrix cell", rootDoc("standard", oneBucket, `[{name: first, policy_family: standard, cache_bucket: b, quantum: 1}, {name: second, policy_family: standard, cache_bucket: b, quantum: 2}]`),
		`root contains duplicate policy classes for family "standard" and bucket "b"`},
	{"missing matrix cell", rootDoc("standard", twoBuckets, "["+stdCached+"]"),
		`root is missing a policy class for family "standard" and bucket "uncached"`},

	// Model locations.
	{"model location", modelDoc("m", "f", oneBucket, `[{name: c, policy_family: f, cache_bucket: b, quantum: 0}]`),
		`model "m" policy class "c" quantum must be greater than zero`},
	{"model location quoting", modelDoc(`"a\"b\tc"`, "f", oneBucket, `[{name: c, policy_family: f, cache_bucket: b, quantum: 0}]`),
		`model "a\"b\tc" policy class "c" quantum must be greater than zero`},
	{"model with a slash in its name", modelDoc("example/large-model", "f", oneBucket, `[]`),
		`model "example/large-model" policy_classes must not be empty`},
}

func TestParseRouterPolicy_ValidationErrors(t *testing.T) {
	for _, tt := range validationTests {
		t.Run(tt.name, func(t *testing.T) {
			checkInvalid(t, tt.doc, tt.want)
		})
	}
}

func checkInvalid(t *testing.T, doc, want string) {
	t.Helper()
	cfg, err := ParseRouterPolicy([]byte(doc), "p.yaml")
	if err == nil {
		t.Fatalf("accepted:\n%s\nas %+v", doc, cfg)
	}
	if got, want := err.Error(), "invalid router policy config: "+want; got != want {
		t.Fatalf("error\n got: %s\nwant: %s\ndoc:\n%s", got, want, doc)
	}
	var ie *InvalidRouterPolicyError
	if !errors.As(err, &ie) || "invalid router policy config: "+ie.Msg != err.Error() {
		t.Errorf("error is not an *InvalidRouterPolicyError: %#v", err)
	}
}

// TestParseRouterPolicy_ValidationOrder pins which violation is reported
// when a document has several, following upstream's order.
func TestParseRouterPolicy_ValidationOrder(t *testing.T) {
	for _, tt := range []struct {
		name, doc, want string
	}{
		{"default family before empty classes", rootDoc(`"x y"`, "[]", "[]"),
			`root policy family name "x y" must match [A-Za-z0-9_.-]+`},
		{"empty classes before empty buckets", rootDoc("standard", "[]", "[]"),
			"root policy_classes must not be empty"},
		{"buckets before classes", rootDoc("standard", `[{min_tokens: 5, bucket: a}]`, `[{name: "bad name", quantum: 0}]`),
			"root uncached_isl_buckets must start at min_tokens 0"},
		{"floor start before order", rootDoc("standard", `[{min_tokens: 5, bucket: a}, {min_tokens: 1, bucket: b}]`, "["+stdCached+"]"),
			"root uncached_isl_buckets must start at min_tokens 0"},
		{"floor order over the whole list before names", rootDoc("standard", `[{min_tokens: 0, bucket: "bad name"}, {min_tokens: 0, bucket: b}]`, "["+stdCached+"]"),
			"root uncached_isl_buckets min_tokens must be strictly increasing"},
		{"bucket names before duplicates, per bucket", rootDoc("standard", `[{min_tokens: 0, bucket: a}, {min_tokens: 1, bucket: a}, {min_tokens: 2, bucket: "c d"}]`, "["+stdCached+"]"),
			`root contains duplicate cache bucket "a"`},
		{"name before quantum", stdDoc(`{name: "n/a", quantum: 0}`),
			`root policy class name "n/a" must match [A-Za-z0-9_.-]+`},
		{"quantum before queue_policy", stdDoc(`{name: c, quantum: 0, queue_policy: lcfs}`),
			`root policy class "c" quantum must be greater than zero`},
		{"queue_policy before frac", stdDoc(`{name: c, quantum: 1, queue_policy: lcfs, prefill_busy_threshold_frac: -1}`),
			`root policy class "c" queue_policy must be fcfs or wspt`},
		{"frac before ratio", stdDoc(`{name: c, quantum: 1, prefill_busy_threshold_frac: -1, busy_worker_ratio: 2}`),
			`root policy class "c" prefill_busy_threshold_frac must be finite and non-negative`},
		{"ratio range before ratio threshold", stdDoc(`{name: c, quantum: 1, busy_worker_ratio: 2}`),
			`root policy class "c" busy_worker_ratio must be a finite fraction in (0.0, 1.0]`},
		{"ratio before binding", stdDoc(`{name: c, quantum: 1, busy_worker_ratio: 0.5, policy_family: f}`),
			`root policy class "c" sets busy_worker_ratio but no prefill_busy_threshold or prefill_busy_threshold_frac, so no worker can ever be considered busy`},
		{"binding family identifier before bucket identifier", stdDoc(`{name: c, quantum: 1, policy_family: "f f", cache_bucket: "b b"}`),
			`root policy family name "f f" must match [A-Za-z0-9_.-]+`},
		{"bucket identifier before known bucket", stdDoc(`{name: c, quantum: 1, policy_family: f, cache_bucket: "b b"}`),
			`root cache bucket name "b b" must match [A-Za-z0-9_.-]+`},
		{"duplicate name is checked as each class is added", stdDoc(`{name: cached, quantum: 1}`, `{name: late, quantum: 0}`),
			`root contains duplicate policy class "cached"`},
		{"later class errors before duplicate names of even later classes", stdDoc(`{name: late, quantum: 0}`, `{name: cached, quantum: 1}`),
			`root policy class "late" quantum must be greater than zero`},
		{"class checks before the default family", rootDoc("nope", twoBuckets, "["+stdClasses+`, {name: z, quantum: 0}]`),
			`root policy class "z" quantum must be greater than zero`},
		{"default family before collisions", rootDoc("nope", oneBucket, `[{name: f, quantum: 1}, {name: c, policy_family: f, cache_bucket: b, quantum: 1}]`),
			`root default_policy_family "nope" does not name a configured family`},
		{"collision and duplicate cell in class order: cell first", rootDoc("f", oneBucket,
			`[{name: c1, policy_family: f, cache_bucket: b, quantum: 1}, {name: c2, policy_family: f, cache_bucket: b, quantum: 1}, {name: f, quantum: 1}]`),
			`root contains duplicate policy classes for family "f" and bucket "b"`},
		{"collision and duplicate cell in class order: collision first", rootDoc("f", oneBucket,
			`[{name: f, quantum: 1}, {name: c1, policy_family: f, cache_bucket: b, quantum: 1}, {name: c2, policy_family: f, cache_bucket: b, quantum: 1}]`),
			`root explicit policy class "f" collides with a policy family`},
		{"collision before a missing cell", rootDoc("f", twoBuckets,
			`[{name: c1, policy_family: f, cache_bucket: cached, quantum: 1}, {name: f, quantum: 1}]`),
			`root explicit policy class "f" collides with a policy family`},
		{"missing cells family-major in first-appearance order", rootDoc("g", twoBuckets,
			`[{name: g2, policy_family: g, cache_bucket: uncached, quantum: 1}, {name: f1, policy_family: f, cache_bucket: cached, quantum: 1}]`),
			`root is missing a policy class for family "g" and bucket "cached"`},
		{"missing cells bucket order within a family", rootDoc("f", `[{min_tokens: 0, bucket: a}, {min_tokens: 1, bucket: b}, {min_tokens: 2, bucket: c}]`,
			`[{name: fb, policy_family: f, cache_bucket: b, quantum: 1}]`),
			`root is missing a policy class for family "f" and bucket "a"`},
		{"root before models", stdDoc(`{name: r, quantum: 0}`) + "models:\n  m:\n    default_policy_family: f\n    uncached_isl_buckets: []\n    policy_classes: [{name: c, quantum: 0}]\n",
			`root policy class "r" quantum must be greater than zero`},
		{"root presence rule before models", "policy_classes: [" + stdCached + "]\nmodels:\n  \"\":\n    default_policy_family: f\n    uncached_isl_buckets: []\n    policy_classes: []\n",
			"root profile must specify default_policy_family, uncached_isl_buckets, and policy_classes when any root profile field is present"},
		{"models in document order", "models:\n  zeta:\n    default_policy_family: f\n    uncached_isl_buckets: []\n    policy_classes: [{name: c, quantum: 1}]\n" +
			"  alpha:\n    default_policy_family: f\n    uncached_isl_buckets: []\n    policy_classes: []\n",
			`model "zeta" uncached_isl_buckets must not be empty`},
		{"empty model name checked in document order", "models:\n  ok:\n    default_policy_family: f\n    uncached_isl_buckets: []\n    policy_classes: [{name: c, quantum: 1}]\n" +
			"  \"\":\n    default_policy_family: f\n    uncached_isl_buckets: []\n    policy_classes: []\n",
			`model "ok" uncached_isl_buckets must not be empty`},
		{"profiles before worker_selection", stdDoc(`{name: r, quantum: 0}`) + "worker_selection: {aggregated: x}\n",
			`root policy class "r" quantum must be greater than zero`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			checkInvalid(t, tt.doc, tt.want)
		})
	}
}

// parseErrorTests are schema errors. want is the detail after
// "failed to parse router policy config <inline>: ".
var parseErrorTests = []struct {
	name, doc, want string
}{
	{"unknown top-level key", "foo: 1\n" + stdDoc(),
		`unknown field "foo", expected one of default_policy_family, uncached_isl_buckets, policy_classes, models, worker_selection at line 1 column 1`},
	{"removed tier key", "uncached_isl_policy_class_tiers: []\n",
		`unknown field "uncached_isl_policy_class_tiers", expected one of default_policy_family, uncached_isl_buckets, policy_classes, models, worker_selection at line 1 column 1`},
	{"unknown class key", "default_policy_family: standard\nuncached_isl_buckets: " + twoBuckets + "\npolicy_classes:\n  - name: cached\n    quantom: 1\n",
		`policy_classes[0]: unknown field "quantom", expected one of name, policy_family, cache_bucket, queue_policy, quantum, prefill_busy_threshold, prefill_busy_threshold_frac, busy_worker_ratio, request_queue_limit_per_worker, raw_isl_token_queue_limit_per_worker, cached_token_queue_limit_per_worker at line 5 column 5`},
	{"removed admission key", stdDoc(`{name: x, quantum: 1, queue_admission: {type: session_aware}}`),
		`policy_classes[2]: unknown field "queue_admission", expected one of name, policy_family, cache_bucket, queue_policy, quantum, prefill_busy_threshold, prefill_busy_threshold_frac, busy_worker_ratio, request_queue_limit_per_worker, raw_isl_token_queue_limit_per_worker, cached_token_queue_limit_per_worker at line 3 column 194`},
	{"unknown bucket key", rootDoc("standard", `[{min_tokens: 0, bucket: a, max_tokens: 5}]`, "[]"),
		`uncached_isl_buckets[0]: unknown field "max_tokens", expected one of min_tokens, bucket at line 2 column 51`},
	{"unknown model profile key", "models:\n  m:\n    default_policy_family: f\n    inherit: root\n",
		`models["m"]: unknown field "inherit", expected one of default_policy_family, uncached_isl_buckets, policy_classes at line 4 column 5`},
	{"duplicate top-level key", stdDoc() + "default_policy_family: other\n", `duplicate key "default_policy_family" at line 4 column 1`},
	{"duplicate class key", stdDoc(`{name: x, quantum: 1, quantum: 2}`), `policy_classes[2]: duplicate key "quantum" at line 3 column 194`},
	{"duplicate model", "models:\n  m: {}\n  m: {}\n", `models: duplicate key "m" at line 3 column 3`},
	{"float quantum", stdDoc(`{name: x, quantum: 1.5}`),
		`policy_classes[2].quantum: invalid type: floating point 1.5, expected an unsigned integer at line 3 column 191`},
	{"integral float quantum", stdDoc(`{name: x, quantum: 512.0}`),
		`policy_classes[2].quantum: invalid type: floating point 512.0, expected an unsigned integer at line 3 column 191`},
	{"exponent quantum", stdDoc(`{name: x, quantum: 1e3}`),
		`policy_classes[2].quantum: invalid type: floating point 1e3, expected an unsigned integer at line 3 column 191`},
	{"negative quantum", stdDoc(`{name: x, quantum: -1}`),
		`policy_classes[2].quantum: invalid value: integer -1, expected an unsigned integer at line 3 column 191`},
	{"string quantum", stdDoc(`{name: x, quantum: "512"}`),
		`policy_classes[2].quantum: invalid type: string "512", expected an unsigned integer at line 3 column 191`},
	{"word quantum", stdDoc(`{name: x, quantum: lots}`),
		`policy_classes[2].quantum: invalid type: string "lots", expected an unsigned integer at line 3 column 191`},
	{"bool quantum", stdDoc(`{name: x, quantum: true}`),
		`policy_classes[2].quantum: invalid type: boolean true, expected an unsigned integer at line 3 column 191`},
	{"null quantum", stdDoc(`{name: x, quantum: ~}`),
		`policy_classes[2].quantum: invalid type: null, expected an unsigned integer at line 3 column 191`},
	{"overflowing quantum", stdDoc(`{name: x, quantum: 18446744073709551616}`),
		`policy_classes[2].quantum: invalid type: floating point 18446744073709551616, expected an unsigned integer at line 3 column 191`},
	{"float min_tokens", rootDoc("standard", `[{min_tokens: 0.0, bucket: a}]`, "[]"),
		`uncached_isl_buckets[0].min_tokens: invalid type: floating point 0.0, expected an unsigned integer at line 2 column 37`},
	{"float threshold", stdDoc(`{name: x, quantum: 1, prefill_busy_threshold: 1536.5}`),
		`policy_classes[2].prefill_busy_threshold: invalid type: floating point 1536.5, expected an unsigned integer at line 3 column 218`},
	{"negative limit", stdDoc(`{name: x, quantum: 1, request_queue_limit_per_worker: -5}`),
		`policy_classes[2].request_queue_limit_per_worker: invalid value: integer -5, expected an unsigned integer at line 3 column 226`},
	{"float raw isl limit", stdDoc(`{name: x, quantum: 1, raw_isl_token_queue_limit_per_worker: 1.0}`),
		`policy_classes[2].raw_isl_token_queue_limit_per_worker: invalid type: floating point 1.0, expected an unsigned integer at line 3 column 232`},
	{"string cached limit", stdDoc(`{name: x, quantum: 1, cached_token_queue_limit_per_worker: "1"}`),
		`policy_classes[2].cached_token_queue_limit_per_worker: invalid type: string "1", expected an unsigned integer at line 3 column 231`},
	{"string frac", stdDoc(`{name: x, quantum: 1, prefill_busy_threshold_frac: "16"}`),
		`policy_classes[2].prefill_busy_threshold_frac: invalid type: string "16", expected a number at line 3 column 223`},
	{"upper-case queue policy", stdDoc(`{name: x, quantum: 1, queue_policy: FCFS}`),
		`policy_classes[2].queue_policy: unknown variant "FCFS", expected one of fcfs, wspt, lcfs at line 3 column 208`},
	{"unknown queue policy", stdDoc(`{name: x, quantum: 1, queue_policy: edf}`),
		`policy_classes[2].queue_policy: unknown variant "edf", expected one of fcfs, wspt, lcfs at line 3 column 208`},
	{"missing quantum", stdDoc(`{name: x}`), `policy_classes[2]: missing field "quantum" at line 3 column 172`},
	{"missing name", stdDoc(`{quantum: 1}`), `policy_classes[2]: missing field "name" at line 3 column 172`},
	{"missing bucket name", rootDoc("standard", `[{min_tokens: 0}]`, "[]"), `uncached_isl_buckets[0]: missing field "bucket" at line 2 column 24`},
	{"model profile missing classes", "models:\n  m:\n    default_policy_family: f\n    uncached_isl_buckets: []\n",
		`models["m"]: missing field "policy_classes" at line 3 column 5`},
	{"null name", stdDoc(`{name: ~, quantum: 1}`), `policy_classes[2].name: invalid type: null, expected a string at line 3 column 179`},
	{"map as name", stdDoc(`{name: {a: 1}, quantum: 1}`), `policy_classes[2].name: invalid type: map, expected a string at line 3 column 179`},
	{"classes not a sequence", rootDoc("standard", twoBuckets, "{name: x}"), `policy_classes: invalid type: map, expected a sequence at line 3 column 17`},
	{"class not a map", rootDoc("standard", twoBuckets, "[cached]"), `policy_classes[0]: invalid type: string "cached", expected a map at line 3 column 18`},
	{"top level sequence", "- a\n- b\n", `invalid type: sequence, expected a map at line 1 column 1`},
	{"top level scalar", "hello\n", `invalid type: string "hello", expected a map at line 1 column 1`},
	{"non-string key", "? [a]\n: 1\n", `invalid key: sequence, expected a string at line 1 column 3`},
	{"merge key", "base: &b {quantum: 1}\n<<: *b\n", `merge keys (<<) are not supported at line 2 column 1`},
	{"custom tag", "default_policy_family: !fam x\n", `default_policy_family: invalid type: value "x" tagged !fam, expected a string at line 1 column 24`},
	{"syntax error", "policy_classes: [\n", `line 1: did not find expected node content`},
	{"tab indentation", "models:\n\tm: {}\n", `line 2: found character that cannot start any token`},
	{"two documents", stdDoc() + "---\n" + stdDoc(), `more than one YAML document is not supported at line 4 column 1`},
}

func TestParseRouterPolicy_ParseErrors(t *testing.T) {
	for _, tt := range parseErrorTests {
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

// TestDecoder_AliasExpansionIsBounded checks that a small document cannot
// make the decoder walk an unbounded number of nodes through aliases: every
// model below aliases one profile of many classes.
func TestDecoder_AliasExpansionIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("models:\n  m0: &p\n    default_policy_family: f\n    uncached_isl_buckets: [{min_tokens: 0, bucket: b}]\n    policy_classes:\n")
	for i := range 100 {
		fmt.Fprintf(&b, "      - {name: c%d, quantum: 1}\n", i)
	}
	for i := 1; i < 100; i++ {
		fmt.Fprintf(&b, "  m%d: *p\n", i)
	}
	doc := []byte(b.String())
	if _, err := newDecoder().routerPolicy(doc); err != nil {
		t.Fatalf("the default bound must allow %d bytes expanding 100-fold: %v", len(doc), err)
	}
	d := &decoder{limit: 20_000}
	_, err := d.routerPolicy(doc)
	if err == nil || !strings.Contains(err.Error(), "document is too large after alias expansion") {
		t.Fatalf("err = %v", err)
	}
	if d.visits != d.limit+1 {
		t.Errorf("decoding went on after the bound: %d visits", d.visits)
	}
}
