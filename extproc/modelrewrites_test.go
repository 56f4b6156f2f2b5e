package extproc

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate/tollgate/extproc/intake"
)

// The flag table wins for the names it holds, object rules fill the other
// names, and the rule without matches serves every name neither holds.
func TestServer_SetModelRewrites(t *testing.T) {
	srv, err := New(testConfig(func(c *Config) {
		c.ModelRewrites = map[string][]intake.RewriteTarget{"alias": {{Model: "llama", Weight: 1}}}
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, srv)
	first := func(uint64) uint64 { return 0 }
	rewritten := func(model string) string {
		body := []byte(`{"model":"` + model + `"}`)
		out, _, _, ok := srv.deps.planner.Rewrites().Rewrite(body, intake.ModelField(body), first)
		if !ok {
			return model
		}
		return intake.ModelField(out).Name
	}
	if got := rewritten("other"); got != "other" {
		t.Fatalf("before any object: other -> %s", got)
	}
	if _, err := srv.SetModelRewrites(intake.ModelRewriteRules{
		Exact: map[string][]intake.RewriteTarget{"alias": {{Model: "mistral", Weight: 1}}, "canary": {{Model: "v2", Weight: 9}, {Model: "v1", Weight: 1}}},
		Other: []intake.RewriteTarget{{Model: "default-model", Weight: 1}},
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
	if err := testutil.GatherAndCompare(srv.metrics.reg, strings.NewReader(want), "tollgate_model_rewrites"); err != nil {
		t.Error(err)
	}

	tooMany := map[string][]intake.RewriteTarget{}
	for i := range intake.MaxModelRewrites { // plus the flag's name
		tooMany[fmt.Sprintf("m%04d", i)] = []intake.RewriteTarget{{Model: "x", Weight: 1}}
	}
	if m, err := srv.SetModelRewrites(intake.ModelRewriteRules{Exact: tooMany}); err != nil || !slices.Equal(m.Dropped, []string{"m1023"}) {
		t.Fatalf("past the budget: dropped %v, %v; want m1023 left out", m.Dropped, err)
	}
	if _, err := srv.SetModelRewrites(intake.ModelRewriteRules{
		Exact: map[string][]intake.RewriteTarget{"alias": {{Model: "mistral", Weight: 1}}, "canary": {{Model: "v2", Weight: 9}, {Model: "v1", Weight: 1}}},
		Other: []intake.RewriteTarget{{Model: "default-model", Weight: 1}},
	}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		rules intake.ModelRewriteRules
		want  string
	}{
		{"no target", intake.ModelRewriteRules{Exact: map[string][]intake.RewriteTarget{"a": {}}}, "has 0 targets"},
		{"weight 0", intake.ModelRewriteRules{Exact: map[string][]intake.RewriteTarget{"a": {{Model: "b", Weight: 0}}}}, "weight 0"},
		{"long name", intake.ModelRewriteRules{Exact: map[string][]intake.RewriteTarget{strings.Repeat("a", 257): {{Model: "b", Weight: 1}}}}, "1 to 256 bytes"},
		{"bad other", intake.ModelRewriteRules{Other: []intake.RewriteTarget{{Model: "", Weight: 1}}}, "any other model"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := srv.SetModelRewrites(tt.rules)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if got := rewritten("canary"); got != "v2" {
				t.Errorf("a rejected table changed the one in force: canary -> %s", got)
			}
		})
	}
	if _, err := srv.SetModelRewrites(intake.ModelRewriteRules{}); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{"alias": "llama", "canary": "canary", "other": "other"} {
		if got := rewritten(in); got != want {
			t.Errorf("after the objects went: %s -> %s, want %s", in, got, want)
		}
	}
}
