package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// problems renders errors as "LL:CC msg", one each.
func problems(t *testing.T, errs ...error) []string {
	t.Helper()
	var out []string
	for _, err := range errs {
		de, ok := errors.AsType[*DecodeError](err)
		if !ok {
			t.Fatalf("%v is no *DecodeError", err)
		}
		if de.Path != "" {
			t.Errorf("%v has a path", err)
		}
		out = append(out, fmt.Sprintf("%02d:%02d %s", de.Line, de.Column, de.Msg))
	}
	return out
}

func TestYAMLReader_ObjectReportsEveryKeyProblem(t *testing.T) {
	r, root, err := ReadYAML([]byte("a: 1\nz: 2\nb: 3\na: 4\n<<: {c: 5}\ny: 6\n"))
	if err != nil {
		t.Fatal(err)
	}
	fields, errs := r.Object(root, []string{"a", "b"})
	want := []string{
		`04:01 duplicate key "a"`,
		`05:01 merge keys (<<) are not supported`,
		`02:01 unknown field "z", expected one of a, b`,
		`06:01 unknown field "y", expected one of a, b`,
	}
	if got := problems(t, errs...); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(fields) != 2 || fields[0].Key != "a" || fields[0].Value.Value != "1" || fields[1].Key != "b" {
		t.Errorf("fields %+v", fields)
	}
}

func TestYAMLReader_Scalars(t *testing.T) {
	r, root, err := ReadYAML([]byte("{n: 7, s: abc, f: 1.5, big: 300, nil: ~, l: [x]}"))
	if err != nil {
		t.Fatal(err)
	}
	fields, errs := r.Object(root, []string{"n", "s", "f", "big", "nil", "l"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	v := map[string]YAMLField{}
	for _, f := range fields {
		v[f.Key] = f
	}
	if u, err := r.Uint(v["n"].Value, 1, 10); err != nil || u != 7 {
		t.Errorf("n: %d %v", u, err)
	}
	if s, err := r.String(v["n"].Value); err != nil || s != "7" {
		t.Errorf("n as a string: %q %v", s, err)
	}
	if v["nil"].Value != nil {
		t.Errorf("null value %v, want nil", v["nil"].Value)
	}
	var got []error
	for _, c := range []struct {
		key    string
		lo, hi uint64
	}{{"s", 1, 10}, {"f", 0, 10}, {"big", 1, 255}, {"l", 0, 1}} {
		_, err := r.Uint(v[c.key].Value, c.lo, c.hi)
		got = append(got, err)
	}
	_, err = r.String(v["l"].Value)
	got = append(got, err)
	want := []string{
		`01:11 invalid type: string "abc", expected an integer in [1, 10]`,
		`01:19 invalid type: floating point 1.5, expected an integer in [0, 10]`,
		`01:29 invalid value: integer 300, expected an integer in [1, 255]`,
		`01:45 invalid type: sequence, expected an integer in [0, 1]`,
		`01:45 invalid type: sequence, expected a string`,
	}
	if g := problems(t, got...); strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems\n%s\nwant\n%s", strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
}

func TestReadYAML_Documents(t *testing.T) {
	for _, tt := range []struct {
		doc, want string // want "" means a nil root and no error
	}{
		{"", ""},
		{"~\n", ""},
		{"a: [1\n", "01:00 did not find expected ',' or ']'"},
		{"a: 1\n---\nb: 2\n", "02:01 more than one YAML document is not supported"},
	} {
		_, root, err := ReadYAML([]byte(tt.doc))
		if tt.want == "" {
			if err != nil || root != nil {
				t.Errorf("%q: root %v, error %v", tt.doc, root, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%q: accepted", tt.doc)
			continue
		}
		if got := problems(t, err)[0]; got != tt.want {
			t.Errorf("%q: %s, want %s", tt.doc, got, tt.want)
		}
	}
}
