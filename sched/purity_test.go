package sched

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPurity_StandardLibraryOnly fails when package sched (its non-test
// code) depends on anything outside the standard library.
func TestPurity_StandardLibraryOnly(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep != "github.com/tollgate/tollgate/sched" {
			t.Errorf("sched depends on %s, outside the standard library", dep)
		}
	}
}

// TestPurity_NoClockOrGlobalRand fails when non-test code of package sched
// reads the clock, sleeps, starts timers, uses the global random source or
// starts goroutines.
func TestPurity_NoClockOrGlobalRand(t *testing.T) {
	forbidden := map[string]map[string]bool{
		"time": {"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "AfterFunc": true,
			"NewTimer": true, "NewTicker": true, "Tick": true},
		"rand": {"Int": true, "IntN": true, "Int32": true, "Int32N": true, "Int64": true, "Int64N": true,
			"Uint32": true, "Uint32N": true, "Uint64": true, "Uint64N": true, "UintN": true, "N": true,
			"Float32": true, "Float64": true, "Perm": true, "Shuffle": true, "ExpFloat64": true, "NormFloat64": true},
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: goroutine started", fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if pkg, ok := n.X.(*ast.Ident); ok && forbidden[pkg.Name][n.Sel.Name] {
					t.Errorf("%s: %s.%s", fset.Position(n.Pos()), pkg.Name, n.Sel.Name)
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}
