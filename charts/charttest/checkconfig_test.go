package charttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// checkConfigScenario is the richest value set whose files a test can
// materialise: every config file, tenant keys and an integration. (TLS
// needs certificates from a Secret, which a render does not contain.)
const checkConfigScenario = sampleConfig + `
integration: istio
tenants:
  apiKeys:
  - {id: team-a, key: s3cret-a}
  - {id: team-b, key: s3cret-b}
`

// TestRenderedConfigPassesCheckConfig runs the real `tollgate check-config`
// on the files and arguments the chart renders, and on a broken variant
// that it must reject.
func TestRenderedConfigPassesCheckConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tollgate binary")
	}
	bin := filepath.Join(t.TempDir(), "tollgate")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "../../cmd/tollgate")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	t.Run("rendered values pass", func(t *testing.T) {
		args := materialise(t, mustRender(t, values(t, checkConfigScenario)))
		out, err := exec.CommandContext(t.Context(), bin, append([]string{"check-config"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tollgate check-config %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if !strings.Contains(string(out), "configuration ok") {
			t.Fatalf("unexpected output: %s", out)
		}
	})
	// Each broken value passes the chart's schema; only tollgate's own
	// checks catch it.
	for name, tc := range map[string]struct{ old, new, want string }{
		"zero quantum":        {"quantum: 512", "quantum: 0", `policy class "premium" quantum must be greater than zero`},
		"too little capacity": {"max_running_requests: 128", "max_running_requests: 50", "sum of class reservations (142) exceeds capacity (100)"},
	} {
		t.Run(name, func(t *testing.T) {
			broken := strings.ReplaceAll(checkConfigScenario, tc.old, tc.new)
			args := materialise(t, mustRender(t, values(t, broken)))
			out, err := exec.CommandContext(t.Context(), bin, append([]string{"check-config"}, args...)...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("check-config output lacks %q (err %v):\n%s", tc.want, err, out)
			}
		})
	}
}

// materialise writes the rendered configuration files and tenant keys to a
// temporary directory and returns the container's arguments rewritten to
// read them there.
func materialise(t *testing.T, r *rendered) []string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range r.configMap(t, "-config").Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range r.secrets {
		for name, data := range s.Data {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		for name, data := range s.StringData {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, c := r.deployment(t)
	out := make([]string, 0, len(c.Args))
	for _, a := range c.Args {
		a = strings.ReplaceAll(a, "/etc/tollgate/config", dir)
		a = strings.ReplaceAll(a, "/etc/tollgate/tenants", dir)
		out = append(out, a)
	}
	return out
}
