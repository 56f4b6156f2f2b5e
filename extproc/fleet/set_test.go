package fleet

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestApplier_OneValidationOneDiff: every consumer gets the same set and
// the same diff; a refused commit or an invalid set changes nothing.
func TestApplier_OneValidationOneDiff(t *testing.T) {
	initial, err := NewSet([]Worker{{ID: "a", Address: "10.0.0.1:8000"}, {ID: "b", Address: "10.0.0.2:8000"}})
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		IDs  []string
		Diff Diff
	}
	var got [2][]seen
	consumer := func(i int) Consumer {
		return func(s *Set, d Diff) {
			var ids []string
			for _, w := range s.Sched {
				ids = append(ids, w.ID)
			}
			got[i] = append(got[i], seen{ids, d})
		}
	}
	refuse := false
	commits := 0
	a := NewApplier(initial, func(*Set) error {
		if refuse {
			return errors.New("stopped")
		}
		commits++
		return nil
	}, consumer(0), consumer(1))
	if _, err := a.Apply([]Worker{{ID: "b", Address: "10.0.0.2:8000"}, {ID: "c", Address: "10.0.0.3:8000"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply([]Worker{{ID: "", Address: "10.0.0.3:8000"}}); err == nil {
		t.Fatal("invalid set applied")
	}
	refuse = true
	if _, err := a.Apply(nil); err == nil {
		t.Fatal("refused commit applied")
	}
	want := []seen{
		{[]string{"a", "b"}, Diff{Added: []string{"a", "b"}}},
		{[]string{"b", "c"}, Diff{Added: []string{"c"}, Removed: []string{"a"}}},
	}
	for i := range got {
		if d := cmp.Diff(want, got[i]); d != "" {
			t.Errorf("consumer %d (-want +got):\n%s", i, d)
		}
	}
	if commits != 1 {
		t.Errorf("%d commits, want 1", commits)
	}
}
