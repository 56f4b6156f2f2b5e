package charttest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRenderedConfigPassesCheckConfig is the hook for running
// `tollgate check-config` on what the chart renders: it writes the rendered
// configuration files and the flags that name them, then stops.
//
// TODO(check-config): once cmd/tollgate has check-config, run it here (in
// process, through its run function) with checkConfigArgs and require
// success, and add a scenario with a broken file that must fail.
func TestRenderedConfigPassesCheckConfig(t *testing.T) {
	r := mustRender(t, values(t, scenarios["everything"]))
	dir := t.TempDir()
	for name, data := range r.configMap(t, "-config").Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, c := r.deployment(t)
	args := checkConfigArgs(c.Args, dir)
	if len(args) == 0 {
		t.Fatal("no arguments")
	}
	t.Skipf("TODO(check-config): run `tollgate check-config %s`", strings.Join(args, " "))
}

// checkConfigArgs rewrites the container's arguments to read the rendered
// files from dir instead of the pod's mount points.
func checkConfigArgs(args []string, dir string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		out = append(out, strings.ReplaceAll(a, "/etc/tollgate/config", dir))
	}
	return out
}
