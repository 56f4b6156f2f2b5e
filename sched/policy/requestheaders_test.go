package policy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// lookupReaders call every function of the package that is given a
// Lookup, with lookup. TestRequestHeaders_Complete fails when a function
// taking a Lookup is missing here.
var lookupReaders = map[string]func(lookup Lookup){
	"PriorityInputs":  func(l Lookup) { PriorityInputs(l, AgentHints{}) },
	"ParsePinHeaders": func(l Lookup) { _, _ = ParsePinHeaders(l) },
	"FairnessKey": func(l Lookup) {
		for _, m := range []FairnessMode{FairnessNone, FairnessTenant, FairnessHeader} {
			_, _ = FairnessKey(m, l, "tenant")
		}
	},
	"Objectives.Objective": func(l Lookup) { _, _, _ = Objectives{"o": 0}.Objective(l) },
	"first":                func(l Lookup) {}, // a helper: its callers above pass the names
	"flowHeader":           func(l Lookup) {}, // likewise
}

// sourceFiles parses the package's non-test files.
func sourceFiles(t *testing.T) []*ast.File {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// lookupFuncs finds the functions and methods of the package (tests
// aside) that take a Lookup.
func lookupFuncs(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, f := range sourceFiles(t) {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			for _, p := range fd.Type.Params.List {
				if id, ok := p.Type.(*ast.Ident); ok && id.Name == "Lookup" {
					name := fd.Name.Name
					if fd.Recv != nil {
						name = recvType(fd.Recv.List[0].Type) + "." + name
					}
					names = append(names, name)
				}
			}
		}
	}
	slices.Sort(names)
	return names
}

func recvType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}

// headerConsts returns the values of the package's exported Header*
// constants.
func headerConsts(t *testing.T) []string {
	t.Helper()
	var vals []string
	for _, f := range sourceFiles(t) {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "Header") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s is not a string literal", n.Name)
					}
					v, _ := strconv.Unquote(lit.Value)
					vals = append(vals, v)
				}
			}
		}
	}
	return vals
}

// TestRequestHeaders_Complete: every header a Lookup is asked for, and
// every Header* constant, is on RequestHeaders' list, so a shell that keeps
// only the listed headers cannot drop one the policy reads.
func TestRequestHeaders_Complete(t *testing.T) {
	if got, want := lookupFuncs(t), slices.Sorted(maps.Keys(lookupReaders)); !slices.Equal(got, want) {
		t.Fatalf("functions taking a Lookup %v, lookupReaders covers %v: add the new one", got, want)
	}
	listed := RequestHeaders("X-Team")
	if !slices.Contains(listed, "x-team") {
		t.Errorf("the tenant header is not listed (lower case): %v", listed)
	}
	asked := map[string]bool{}
	record := func(name string) (string, bool) {
		asked[name] = true
		return "", false // absent: every function reads all its fallbacks
	}
	for _, read := range lookupReaders {
		read(record)
	}
	for _, v := range headerConsts(t) {
		asked[v] = true
	}
	asked["x-team"] = true
	if diff := cmp.Diff(slices.Sorted(maps.Keys(asked)), slices.Sorted(slices.Values(listed))); diff != "" {
		t.Errorf("headers read (-) against RequestHeaders (+):\n%s", diff)
	}
	if got := RequestHeaders(""); got[len(got)-1] != DefaultTenantHeader {
		t.Errorf("RequestHeaders(\"\") ends with %q, want the default tenant header", got[len(got)-1])
	}
	a, b := RequestHeaders("a"), RequestHeaders("b")
	if a[len(a)-1] != "a" || b[len(b)-1] != "b" {
		t.Errorf("the lists share their storage: %v %v", a, b)
	}
}
