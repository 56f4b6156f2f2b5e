package extproc

import (
	"strings"
	"testing"
)

func TestRewriteModel(t *testing.T) {
	table := map[string]string{"alias": "llama-3-8b", "same": "same"}
	for _, c := range []struct {
		name, in, want string
		changed        bool
	}{
		{"rewritten, other fields kept", `{"model":"alias","n":1.50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			`{"messages":[{"role":"user","content":"hi"}],"model":"llama-3-8b","n":1.50,"stream":true}`, true},
		{"outside the table", `{"model":"other"}`, "", false},
		{"rewritten to itself", `{"model":"same"}`, "", false},
		{"no model", `{"prompt":"x"}`, "", false},
		{"model not a string", `{"model":7}`, "", false},
		{"not an object", `["alias"]`, "", false},
		{"truncated", `{"model":"alias","prompt":"x`, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, ok := rewriteModel([]byte(c.in), table)
			if ok != c.changed || string(out) != c.want {
				t.Fatalf("rewriteModel = %s %v, want %s %v", out, ok, c.want, c.changed)
			}
		})
	}
}

func TestParseModelRewrite(t *testing.T) {
	if from, to, err := ParseModelRewrite(" alias = llama "); err != nil || from != "alias" || to != "llama" {
		t.Fatalf("got %q %q %v", from, to, err)
	}
	for _, bad := range []string{"alias", "=llama", "alias=", strings.Repeat("m", 257) + "=x"} {
		if _, _, err := ParseModelRewrite(bad); err == nil || !strings.Contains(err.Error(), "want FROM=TO") {
			t.Errorf("%.20q: %v", bad, err)
		}
	}
}

// The response keeps the client's name (GIE pkg/epp/handlers/server.go:
// 442-460 at 1748e829, rewriteModelName): both JSON spellings, in
// STREAMED and FULL_DUPLEX_STREAMED responses only.
func TestRestoreModel(t *testing.T) {
	x := &exchange{rewrittenFrom: "alias", rewrittenTo: "llama", respMode: modeStreamed}
	in := `data: {"model":"llama"}` + "\n\n" + `{"model": "llama","x":"llama"}`
	want := `data: {"model":"alias"}` + "\n\n" + `{"model": "alias","x":"llama"}`
	if got := string(x.restoreModel([]byte(in))); got != want {
		t.Fatalf("restoreModel = %s, want %s", got, want)
	}
	x.respMode = modeBuffered
	if got := string(x.restoreModel([]byte(in))); got != in {
		t.Fatalf("BUFFERED response changed: %s", got)
	}
}
