package extproc

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The flag table wins for the names it holds, object rules fill the other
// names, and the rule without matches serves every name neither holds.
func TestServer_SetModelRewrites(t *testing.T) {
	srv, err := New(testConfig(func(c *Config) {
		c.ModelRewrites = map[string][]RewriteTarget{"alias": {{"llama", 1}}}
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	first := func(uint64) uint64 { return 0 }
	rewritten := func(model string) string {
		out, _, _, ok := rewriteModel([]byte(`{"model":"`+model+`"}`), srv.planner.rewrites.Load(), first)
		if !ok {
			return model
		}
		return modelField(out).Name
	}
	if got := rewritten("other"); got != "other" {
		t.Fatalf("before any object: other -> %s", got)
	}
	if err := srv.SetModelRewrites(ModelRewriteRules{
		Exact: map[string][]RewriteTarget{"alias": {{"mistral", 1}}, "canary": {{"v2", 9}, {"v1", 1}}},
		Other: []RewriteTarget{{"default-model", 1}},
	}); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{"alias": "llama", "canary": "v2", "other": "default-model"} {
		if got := rewritten(in); got != want {
			t.Errorf("%s -> %s, want %s", in, got, want)
		}
	}
	want := `# HELP tollgate_model_rewrites Model-name rewrite rules in force, by source: flag (--model-rewrite) or inferencemodelrewrite (InferenceModelRewrite objects of the pool); match is exact (one per model name) or any (a rule without matches, 0 or 1).
# TYPE tollgate_model_rewrites gauge
tollgate_model_rewrites{match="any",source="inferencemodelrewrite"} 1
tollgate_model_rewrites{match="exact",source="flag"} 1
tollgate_model_rewrites{match="exact",source="inferencemodelrewrite"} 1
`
	if err := testutil.CollectAndCompare(newRewriteCollector(srv), strings.NewReader(want)); err != nil {
		t.Error(err)
	}

	tooMany := map[string][]RewriteTarget{}
	for i := range MaxModelRewrites { // plus the flag's name
		tooMany["m"+strconv.Itoa(i)] = []RewriteTarget{{"x", 1}}
	}
	for _, tt := range []struct {
		name  string
		rules ModelRewriteRules
		want  string
	}{
		{"too many", ModelRewriteRules{Exact: tooMany}, "exceed 1024"},
		{"no target", ModelRewriteRules{Exact: map[string][]RewriteTarget{"a": {}}}, "has 0 targets"},
		{"weight 0", ModelRewriteRules{Exact: map[string][]RewriteTarget{"a": {{"b", 0}}}}, "weight 0"},
		{"long name", ModelRewriteRules{Exact: map[string][]RewriteTarget{strings.Repeat("a", 257): {{"b", 1}}}}, "1 to 256 bytes"},
		{"bad other", ModelRewriteRules{Other: []RewriteTarget{{"", 1}}}, "any other model"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := srv.SetModelRewrites(tt.rules)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if got := rewritten("canary"); got != "v2" {
				t.Errorf("a rejected table changed the one in force: canary -> %s", got)
			}
		})
	}
	if err := srv.SetModelRewrites(ModelRewriteRules{}); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{"alias": "llama", "canary": "canary", "other": "other"} {
		if got := rewritten(in); got != want {
			t.Errorf("after the objects went: %s -> %s, want %s", in, got, want)
		}
	}
}
