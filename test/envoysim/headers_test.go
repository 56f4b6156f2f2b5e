package envoysim

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHeaderMap_SetAddRemove(t *testing.T) {
	m := &headerMap{}
	m.add("X-A", "1")
	m.add("x-b", "2")
	m.add("x-a", "3")
	m.set("x-a", "4") // replaces the first value in place, drops the rest
	m.set("x-c", "5") // appends a new key
	m.add("x-b", "6")
	want := []headerEntry{{"x-a", "4"}, {"x-b", "2"}, {"x-c", "5"}, {"x-b", "6"}}
	if diff := cmp.Diff(want, m.entries, cmp.AllowUnexported(headerEntry{})); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	m.remove("X-B")
	if _, ok := m.get("x-b"); ok || len(m.entries) != 2 {
		t.Errorf("after remove: %v", m.entries)
	}
	if got := m.byteSize(); got != len("x-a4x-c5") {
		t.Errorf("byteSize = %d", got)
	}
}

func TestValidHeaderName(t *testing.T) {
	for name, want := range map[string]bool{
		"x-ok": true, "X-Mixed-Case": true, ":path": true, "": false, ":": false,
		"x a": false, "x:y": false, "x\x00": false, "::path": false,
	} {
		if got := validHeaderName(name); got != want {
			t.Errorf("validHeaderName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestSplit(t *testing.T) {
	tests := []struct {
		body string
		size int
		want []string
	}{
		{"", 4, []string{""}},
		{"abc", 0, []string{"abc"}},
		{"abcd", 4, []string{"abcd"}},
		{"abcdefghij", 4, []string{"abcd", "efgh", "ij"}},
	}
	for _, tt := range tests {
		var got []string
		for _, c := range split([]byte(tt.body), tt.size) {
			got = append(got, string(c))
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("split(%q, %d) (-want +got):\n%s", tt.body, tt.size, diff)
		}
	}
}
