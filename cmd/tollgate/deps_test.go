package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// modulePath is this module's path; its test/ tree holds the harnesses.
const modulePath = "github.com/tollgate/tollgate"

// TestBinaryLinksNoTestHarness lists every package the tollgate binary is
// built from (`go list -deps`) and fails if one is under the module's
// test/ tree (envoysim, mockworker, the demo...).
func TestBinaryLinksNoTestHarness(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the go command is needed to list the binary's packages: %v", err)
		}
		t.Skipf("install Go (the go command on PATH) to list the binary's packages: %v", err)
	}
	cmd := exec.CommandContext(t.Context(), goBin, "list", "-deps", "-f", "{{.ImportPath}}", ".")
	cmd.Stderr = t.Output()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	var own int
	for _, p := range deps {
		if p == modulePath+"/test" || strings.HasPrefix(p, modulePath+"/test/") {
			t.Errorf("the tollgate binary links %s", p)
		}
		if strings.HasPrefix(p, modulePath+"/") {
			own++
		}
	}
	// The listing must be the real one: the binary's own packages are in it.
	if own == 0 || !strings.Contains(string(out), modulePath+"/extproc\n") {
		t.Fatalf("go list -deps printed none of the module's packages:\n%s", out)
	}
}
