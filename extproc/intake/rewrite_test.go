package intake

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// rewriteModel reads a body's model field and rewrites it, as an exchange
// does for a request outside admission.
func rewriteModel(body []byte, table *rewriteRules, draw func(uint64) uint64) (out []byte, from, to string, ok bool) {
	return rewriteField(body, ModelField(body), table, draw)
}

func TestRewriteModel(t *testing.T) {
	table := map[string][]RewriteTarget{"alias": {{"llama-3-8b", 1}}, "same": {{"same", 1}}}
	for _, c := range []struct {
		name, in, want string
		changed        bool
	}{
		{"rewritten, other fields kept", `{"model":"alias","n":1.50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"llama-3-8b","n":1.50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, true},
		{"spacing and order kept", "{ \"stream\" : true,\n  \"model\" : \"alias\" }", "{ \"stream\" : true,\n  \"model\" : \"llama-3-8b\" }", true},
		{"the last of repeated models", `{"model":"x","model":"alias"}`, `{"model":"x","model":"llama-3-8b"}`, true},
		{"trailing garbage", `{"model":"alias"} x`, "", false},
		{"outside the table", `{"model":"other"}`, "", false},
		{"rewritten to itself", `{"model":"same"}`, "", false},
		{"no model", `{"prompt":"x"}`, "", false},
		{"model not a string", `{"model":7}`, "", false},
		{"not an object", `["alias"]`, "", false},
		{"truncated", `{"model":"alias","prompt":"x`, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, from, to, ok := rewriteModel([]byte(c.in), &rewriteRules{exact: table}, func(uint64) uint64 { return 0 })
			if ok != c.changed || string(out) != c.want {
				t.Fatalf("rewriteModel = %s %v, want %s %v", out, ok, c.want, c.changed)
			}
			if ok && (from != "alias" || to != "llama-3-8b") {
				t.Errorf("rewrote %q to %q, want alias to llama-3-8b", from, to)
			}
		})
	}
}

func TestParseModelRewrite(t *testing.T) {
	for in, want := range map[string][]RewriteTarget{
		" alias = llama ":          {{"llama", 1}},
		"alias=llama*3, mistral*1": {{"llama", 3}, {"mistral", 1}},
		"alias=org/llama:8b*2":     {{"org/llama:8b", 2}},
	} {
		from, ts, err := ParseModelRewrite(in)
		if err != nil || from != "alias" || !cmp.Equal(ts, want) {
			t.Errorf("%q: %q %v %v, want %v", in, from, ts, err, want)
		}
	}
	for _, bad := range []string{"alias", "=llama", "alias=", "alias=llama,", "alias=llama*0", "alias=llama*x", "alias=llama*1000001", strings.Repeat("m", 257) + "=x"} {
		if _, _, err := ParseModelRewrite(bad); err == nil || !strings.Contains(err.Error(), "want FROM=TO") {
			t.Errorf("%.20q: %v", bad, err)
		}
	}
	if err := ValidRewrites(map[string][]RewriteTarget{"a": nil}); err == nil || !strings.Contains(err.Error(), "has 0 targets") {
		t.Errorf("a rewrite without target accepted: %v", err)
	}
	if _, _, err := ParseModelRewrite("alias=" + strings.Repeat("m,", MaxRewriteTargets) + "m"); err == nil || !strings.Contains(err.Error(), "targets exceed") {
		t.Errorf("%d targets: %v", MaxRewriteTargets+1, err)
	}
}

// Weighted targets split requests by weight, as an InferenceModelRewrite
// rule's targets do (GIE pkg/epp/requestcontrol/director.go:276, applyWeightedModelRewrite, at
// 1748e829).
func TestPickTarget(t *testing.T) {
	ts := []RewriteTarget{{"a", 3}, {"b", 1}, {"c", 6}}
	got := map[string]int{}
	for r := range uint64(10) {
		got[pickTarget(ts, func(n uint64) uint64 {
			if n != 10 {
				t.Fatalf("draw over %d, want the weights' sum 10", n)
			}
			return r
		})]++
	}
	if want := map[string]int{"a": 3, "b": 1, "c": 6}; !cmp.Equal(got, want) {
		t.Fatalf("every draw once picks %v, want %v", got, want)
	}
}

// modelField reads the model as admission's parse does: the exact key, the
// last when repeated, nothing from a body that is not a JSON object.
func TestModelOf(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":"llama","messages":[]}`: "llama",
		`{"model":"a","model":"b"}`:       "b",
		`{"MODEL":"llama"}`:               "",
		`{"model":7}`:                     "",
		`{"model":"llama"} trailing`:      "",
		`{"model":"llama"`:                "",
		``:                                "",
	} {
		if got := ModelField([]byte(body)).Name; got != want {
			t.Errorf("ModelField(%s).Name = %q, want %q", body, got, want)
		}
	}
}
