package policy

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/sched"
)

// Compact flow-style building blocks for policy documents.
const (
	twoBuckets = `[{min_tokens: 0, bucket: cached}, {min_tokens: 3072, bucket: uncached}]`
	stdCached  = `{name: cached, policy_family: standard, cache_bucket: cached, quantum: 1}`
	stdUncache = `{name: uncached, policy_family: standard, cache_bucket: uncached, quantum: 1}`
	stdClasses = stdCached + ", " + stdUncache
)

// rootDoc builds a document with a root profile.
func rootDoc(family, buckets, classes string) string {
	return "default_policy_family: " + family + "\nuncached_isl_buckets: " + buckets + "\npolicy_classes: " + classes + "\n"
}

// stdDoc is a valid root profile (family standard, buckets cached and
// uncached) with extra classes appended.
func stdDoc(extra ...string) string {
	return rootDoc("standard", twoBuckets, "["+strings.Join(append([]string{stdClasses}, extra...), ", ")+"]")
}

// modelDoc builds a document with one model profile and no root.
func modelDoc(name, family, buckets, classes string) string {
	return "models:\n  " + name + ":\n    default_policy_family: " + family +
		"\n    uncached_isl_buckets: " + buckets + "\n    policy_classes: " + classes + "\n"
}

func readExample(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func mustParseRouter(t *testing.T, doc string) *sched.PolicyConfig {
	t.Helper()
	cfg, err := ParseRouterPolicy([]byte(doc), "")
	if err != nil {
		t.Fatalf("ParseRouterPolicy: %v\n%s", err, doc)
	}
	return cfg
}

func className(p *sched.Profile, requested string, uncached uint64) string {
	return p.Classes[p.Resolve(requested, uncached)].Name
}

func ptr[T any](v T) *T { return &v }

// TestParseRouterPolicy_SampleResolution is upstream's
// documented_sample_exercises_root_model_and_unknown_class_semantics.
func TestParseRouterPolicy_SampleResolution(t *testing.T) {
	cfg, err := ParseRouterPolicy(readExample(t, "policy-class-queues.yaml"), "policy-class-queues.yaml")
	if err != nil {
		t.Fatal(err)
	}
	root := cfg.ProfileFor("some/other-model")
	if root != cfg.Root {
		t.Fatal("an unlisted model must use the root profile")
	}
	if got := len(root.Classes); got != 5 {
		t.Fatalf("root has %d classes, want 5", got)
	}
	const large = math.MaxUint64
	for _, tt := range []struct {
		requested string
		uncached  uint64
		want      string
	}{
		{"", 0, "cached"}, // the default class
		{"latency", 0, "latency_cached"},
		{"latency", large, "latency_uncached"},
		{"unknown", 0, "cached"},
		{"", 3071, "cached"},
		{"", 3072, "uncached"},
		{"", large, "uncached"},
		{"cached", large, "uncached"}, // a physical class name does not bypass the matrix
		{"custom_priority", large, "custom_priority"},
		{"custom_priority", 0, "custom_priority"},
	} {
		if got := className(root, tt.requested, tt.uncached); got != tt.want {
			t.Errorf("root Resolve(%q, %d) = %s, want %s", tt.requested, tt.uncached, got, tt.want)
		}
	}
	if f := root.Classes[root.Resolve("", 0)].BusyThresholdFrac; f == nil || *f != 16.0 {
		t.Errorf("default class frac = %v, want 16.0", f)
	}

	model := cfg.ProfileFor("example/large-model")
	if got := len(model.Classes); got != 4 {
		t.Fatalf("model has %d classes, want 4", got)
	}
	if got := className(model, "", 0); got != "latency_cached" {
		t.Errorf("model default class = %s, want latency_cached", got)
	}
	if got := className(model, "batch", 0); got != "batch_cached" {
		t.Errorf("model batch/0 = %s, want batch_cached", got)
	}
	if got := className(model, "batch", 4096); got != "batch_uncached" {
		t.Errorf("model batch/4096 = %s, want batch_uncached", got)
	}
	if _, ok := model.Explicit["custom_priority"]; ok {
		t.Error("the model profile must not inherit custom_priority")
	}
	if got := className(model, "custom_priority", 0); got != "latency_cached" {
		t.Errorf("model custom_priority/0 = %s, want latency_cached (default family)", got)
	}
}

// TestParseRouterPolicy_SampleValues checks every field of the sample's
// classes against the reference table, in YAML (ring) order.
func TestParseRouterPolicy_SampleValues(t *testing.T) {
	cfg, err := ParseRouterPolicy(readExample(t, "policy-class-queues.yaml"), "")
	if err != nil {
		t.Fatal(err)
	}
	frac := ptr(16.0)
	wantRoot := &sched.Profile{
		Classes: []sched.ClassSpec{
			{Name: "cached", Family: "standard", Bucket: "cached", QueuePolicy: sched.WSPT, Quantum: 2048, BusyThresholdFrac: frac,
				RequestLimitPerWorker: ptr[uint64](1024), CachedTokenLimitPerWorker: ptr[uint64](2097152)},
			{Name: "uncached", Family: "standard", Bucket: "uncached", QueuePolicy: sched.FCFS, Quantum: 512, BusyThresholdFrac: frac,
				RequestLimitPerWorker: ptr[uint64](512), RawISLLimitPerWorker: ptr[uint64](1048576)},
			{Name: "latency_cached", Family: "latency", Bucket: "cached", QueuePolicy: sched.WSPT, Quantum: 4096, BusyThresholdFrac: frac,
				RequestLimitPerWorker: ptr[uint64](256)},
			{Name: "latency_uncached", Family: "latency", Bucket: "uncached", QueuePolicy: sched.WSPT, Quantum: 1024, BusyThresholdFrac: frac,
				RequestLimitPerWorker: ptr[uint64](128), RawISLLimitPerWorker: ptr[uint64](524288)},
			{Name: "custom_priority", QueuePolicy: sched.WSPT, Quantum: 4096, BusyThresholdFrac: frac,
				RequestLimitPerWorker: ptr[uint64](128)},
		},
		Buckets:       []sched.Bucket{{MinTokens: 0, Name: "cached"}, {MinTokens: 3072, Name: "uncached"}},
		DefaultFamily: "standard",
		Matrix:        map[string][]int{"standard": {0, 1}, "latency": {2, 3}},
		Explicit:      map[string]int{"custom_priority": 4},
	}
	if diff := cmp.Diff(wantRoot, cfg.Root); diff != "" {
		t.Errorf("root profile (-want +got):\n%s", diff)
	}
	wantModel := &sched.Profile{
		Classes: []sched.ClassSpec{
			{Name: "latency_cached", Family: "latency", Bucket: "cached", QueuePolicy: sched.WSPT, Quantum: 4096, BusyThresholdFrac: frac,
				RequestLimitPerWorker: ptr[uint64](256)},
			{Name: "latency_uncached", Family: "latency", Bucket: "uncached", QueuePolicy: sched.WSPT, Quantum: 1024, BusyThresholdFrac: frac,
				RequestLimitPerWorker: ptr[uint64](128)},
			{Name: "batch_cached", Family: "batch", Bucket: "cached", QueuePolicy: sched.FCFS, Quantum: 2048, BusyThresholdFrac: frac,
				CachedTokenLimitPerWorker: ptr[uint64](1048576)},
			{Name: "batch_uncached", Family: "batch", Bucket: "uncached", QueuePolicy: sched.FCFS, Quantum: 1024, BusyThresholdFrac: frac,
				RawISLLimitPerWorker: ptr[uint64](524288)},
		},
		Buckets:       []sched.Bucket{{MinTokens: 0, Name: "cached"}, {MinTokens: 4096, Name: "uncached"}},
		DefaultFamily: "latency",
		Matrix:        map[string][]int{"latency": {0, 1}, "batch": {2, 3}},
		Explicit:      map[string]int{},
	}
	if diff := cmp.Diff(map[string]*sched.Profile{"example/large-model": wantModel}, cfg.Models); diff != "" {
		t.Errorf("model profiles (-want +got):\n%s", diff)
	}
}

// TestParseRouterPolicy_PremiumRegular checks the seed's premium/regular
// configs and their equal-share control.
func TestParseRouterPolicy_PremiumRegular(t *testing.T) {
	for _, tt := range []struct {
		file           string
		regularQuantum uint64
	}{
		{"premium_4x.yaml", 128},
		{"equal_share.yaml", 512},
	} {
		t.Run(tt.file, func(t *testing.T) {
			cfg, err := ParseRouterPolicy(readExample(t, tt.file), tt.file)
			if err != nil {
				t.Fatal(err)
			}
			p := cfg.Root
			want := []sched.ClassSpec{
				{Name: "premium", Family: "premium", Bucket: "all", QueuePolicy: sched.FCFS, Quantum: 512,
					BusyThreshold: ptr[uint64](1536), RequestLimitPerWorker: ptr[uint64](1024)},
				{Name: "regular", Family: "regular", Bucket: "all", QueuePolicy: sched.FCFS, Quantum: tt.regularQuantum,
					BusyThreshold: ptr[uint64](1536), RequestLimitPerWorker: ptr[uint64](1024)},
			}
			if diff := cmp.Diff(want, p.Classes); diff != "" {
				t.Errorf("classes (-want +got):\n%s", diff)
			}
			for req, wantClass := range map[string]string{"premium": "premium", "regular": "regular", "": "regular", "gold": "regular"} {
				if got := className(p, req, 512); got != wantClass {
					t.Errorf("Resolve(%q) = %s, want %s", req, got, wantClass)
				}
			}
			if len(cfg.Models) != 0 {
				t.Errorf("models = %v, want none", cfg.Models)
			}
		})
	}
}

// TestParseRouterPolicy_Accepts covers documents that must parse, and what
// they parse to.
func TestParseRouterPolicy_Accepts(t *testing.T) {
	t.Run("frac accepts an integer, a float and zero", func(t *testing.T) {
		for doc, want := range map[string]float64{
			stdDoc(`{name: x, quantum: 1, prefill_busy_threshold_frac: 16}`):   16,
			stdDoc(`{name: x, quantum: 1, prefill_busy_threshold_frac: 0.5}`):  0.5,
			stdDoc(`{name: x, quantum: 1, prefill_busy_threshold_frac: 0}`):    0,
			stdDoc(`{name: x, quantum: 1, prefill_busy_threshold_frac: 1e2}`):  100,
			stdDoc(`{name: x, quantum: 1, prefill_busy_threshold_frac: 16.0}`): 16,
		} {
			cfg := mustParseRouter(t, doc)
			if f := cfg.Root.Classes[2].BusyThresholdFrac; f == nil || *f != want {
				t.Errorf("frac = %v, want %v", f, want)
			}
		}
	})
	t.Run("busy_worker_ratio in (0,1] with a threshold", func(t *testing.T) {
		for _, v := range []string{"0.95", "1", "1.0", "0.001"} {
			cfg := mustParseRouter(t, stdDoc(`{name: x, quantum: 1, prefill_busy_threshold: 10, busy_worker_ratio: `+v+`}`))
			if r := cfg.Root.Classes[2].BusyWorkerRatio; r <= 0 || r > 1 {
				t.Errorf("ratio %s parsed as %v", v, r)
			}
		}
	})
	t.Run("null optional fields are absent", func(t *testing.T) {
		cfg := mustParseRouter(t, stdDoc(`{name: x, quantum: 1, policy_family: ~, cache_bucket: null, queue_policy: ~, prefill_busy_threshold: ~, prefill_busy_threshold_frac: ~, busy_worker_ratio: ~, request_queue_limit_per_worker: ~, raw_isl_token_queue_limit_per_worker: ~, cached_token_queue_limit_per_worker: ~}`))
		want := sched.ClassSpec{Name: "x", QueuePolicy: sched.FCFS, Quantum: 1}
		if diff := cmp.Diff(want, cfg.Root.Classes[2]); diff != "" {
			t.Errorf("class (-want +got):\n%s", diff)
		}
		if cfg.Root.Classes[2].Queues() {
			t.Error("a class without thresholds must not queue")
		}
	})
	t.Run("zero limits are kept, not dropped", func(t *testing.T) {
		cfg := mustParseRouter(t, stdDoc(`{name: x, quantum: 1, request_queue_limit_per_worker: 0, prefill_busy_threshold: 0}`))
		c := cfg.Root.Classes[2]
		if c.RequestLimitPerWorker == nil || *c.RequestLimitPerWorker != 0 || c.BusyThreshold == nil || *c.BusyThreshold != 0 {
			t.Errorf("class = %+v", c)
		}
	})
	t.Run("a matrix class may share its family's name", func(t *testing.T) {
		mustParseRouter(t, rootDoc("premium", `[{min_tokens: 0, bucket: all}]`, `[{name: premium, policy_family: premium, cache_bucket: all, quantum: 1}]`))
	})
	t.Run("only models", func(t *testing.T) {
		cfg := mustParseRouter(t, modelDoc("m", "f", `[{min_tokens: 0, bucket: b}]`, `[{name: c, policy_family: f, cache_bucket: b, quantum: 3}]`))
		if cfg.Root != nil {
			t.Error("root must be nil")
		}
		if cfg.ProfileFor("other") == cfg.Models["m"] {
			t.Error("an unlisted model must not use another model's profile")
		}
		if !cfg.ProfileFor("other").Synthetic {
			t.Error("an unlisted model with no root must use the synthetic profile")
		}
	})
	t.Run("null root fields count as absent", func(t *testing.T) {
		doc := "default_policy_family: ~\nuncached_isl_buckets: ~\npolicy_classes: ~\nworker_selection: ~\n" +
			modelDoc("m", "f", `[{min_tokens: 0, bucket: b}]`, `[{name: c, policy_family: f, cache_bucket: b, quantum: 3}]`)
		if cfg := mustParseRouter(t, doc); cfg.Root != nil {
			t.Error("root must be nil")
		}
	})
	t.Run("anchors and aliases", func(t *testing.T) {
		doc := "models:\n  a: &p\n    default_policy_family: f\n    uncached_isl_buckets: [{min_tokens: 0, bucket: b}]\n    policy_classes: [{name: c, policy_family: f, cache_bucket: b, quantum: 3}]\n  b: *p\n"
		cfg := mustParseRouter(t, doc)
		if diff := cmp.Diff(cfg.Models["a"], cfg.Models["b"]); diff != "" {
			t.Errorf("aliased profile differs (-a +b):\n%s", diff)
		}
		if cfg.Models["a"] == cfg.Models["b"] {
			t.Error("each model must get its own profile value")
		}
	})
	t.Run("integer spellings", func(t *testing.T) {
		for spelling, want := range map[string]uint64{"0x10": 16, "1_000": 1000, "0o17": 15, "+7": 7} {
			cfg := mustParseRouter(t, stdDoc(`{name: x, quantum: `+spelling+`}`))
			if got := cfg.Root.Classes[2].Quantum; got != want {
				t.Errorf("quantum %s = %d, want %d", spelling, got, want)
			}
		}
	})
	t.Run("identifiers may look like numbers", func(t *testing.T) {
		cfg := mustParseRouter(t, stdDoc(`{name: 123, quantum: 1}`, `{name: "1.5", quantum: 1}`))
		if _, ok := cfg.Root.Explicit["123"]; !ok {
			t.Errorf("explicit = %v", cfg.Root.Explicit)
		}
	})
}

func TestParseRouterPolicy_PathsInErrors(t *testing.T) {
	_, err := ParseRouterPolicy([]byte("foo: 1\n"), "/etc/tollgate/policy.yaml")
	if err == nil || !strings.HasPrefix(err.Error(), "failed to parse router policy config /etc/tollgate/policy.yaml: ") {
		t.Errorf("err = %v", err)
	}
	_, err = ParseRouterPolicy([]byte("foo: 1\n"), "")
	if err == nil || !strings.HasPrefix(err.Error(), "failed to parse router policy config <inline>: ") {
		t.Errorf("err = %v", err)
	}
	missing := filepath.Join(t.TempDir(), "absent.yaml")
	_, err = LoadRouterPolicy(missing)
	if want := "failed to read router policy config " + missing + ": no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
	good := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(good, readExample(t, "premium_4x.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRouterPolicy(good); err != nil {
		t.Errorf("LoadRouterPolicy: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("bogus: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRouterPolicy(bad); err == nil || !strings.HasPrefix(err.Error(), "failed to parse router policy config "+bad+": ") {
		t.Errorf("err = %v", err)
	}
}

func TestSyntheticDefault(t *testing.T) {
	p, err := SyntheticDefault(nil, "")
	if err != nil {
		t.Fatal(err)
	}
	want := &sched.Profile{Classes: []sched.ClassSpec{{Name: "default", QueuePolicy: sched.FCFS, Quantum: 1}}, Synthetic: true}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	p, err = SyntheticDefault(ptr(2.5), "wspt")
	if err != nil {
		t.Fatal(err)
	}
	want = &sched.Profile{Classes: []sched.ClassSpec{{Name: "default", QueuePolicy: sched.WSPT, Quantum: 1, BusyThresholdFrac: ptr(2.5)}}, Synthetic: true}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if p.Resolve("anything", 1<<40) != 0 {
		t.Error("the synthetic profile maps every request to class 0")
	}
	if _, err := SyntheticDefault(ptr(0.0), "fcfs"); err != nil {
		t.Errorf("threshold 0: %v", err)
	}
	for _, tt := range []struct {
		threshold *float64
		policy    string
		want      string
	}{
		{ptr(-1.0), "fcfs", "invalid --router-queue-threshold -1: must be a finite number >= 0"},
		{ptr(math.NaN()), "fcfs", "invalid --router-queue-threshold NaN: must be a finite number >= 0"},
		{ptr(math.Inf(1)), "fcfs", "invalid --router-queue-threshold +Inf: must be a finite number >= 0"},
		{nil, "lcfs", `invalid --router-queue-policy "lcfs": must be fcfs or wspt`},
		{nil, "FCFS", `invalid --router-queue-policy "FCFS": must be fcfs or wspt`},
	} {
		if _, err := SyntheticDefault(tt.threshold, tt.policy); err == nil || err.Error() != tt.want {
			t.Errorf("SyntheticDefault(%v, %q) = %v, want %s", tt.threshold, tt.policy, err, tt.want)
		}
	}
}

func TestMarshalRouterPolicy_RoundTripsExamples(t *testing.T) {
	for _, name := range []string{"policy-class-queues.yaml", "premium_4x.yaml", "equal_share.yaml"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := ParseRouterPolicy(readExample(t, name), name)
			if err != nil {
				t.Fatal(err)
			}
			checkRouterRoundTrip(t, cfg)
		})
	}
	if _, err := MarshalRouterPolicy(&sched.PolicyConfig{Root: sched.SyntheticProfile(nil, sched.FCFS)}); err == nil {
		t.Error("a synthetic profile must not marshal")
	}
}

// checkRouterRoundTrip marshals cfg, parses the output and compares.
func checkRouterRoundTrip(t testing.TB, cfg *sched.PolicyConfig) {
	t.Helper()
	out, err := MarshalRouterPolicy(cfg)
	if err != nil {
		t.Fatalf("MarshalRouterPolicy: %v", err)
	}
	again, err := ParseRouterPolicy(out, "")
	if err != nil {
		t.Fatalf("reparse: %v\n%s", err, out)
	}
	if diff := cmp.Diff(cfg, again); diff != "" {
		t.Fatalf("round trip differs (-parsed +reparsed):\n%s\nmarshalled:\n%s", diff, out)
	}
}
