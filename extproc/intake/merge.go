package intake

import (
	"maps"
	"slices"
)

// Merge is the answer to a table found outside the flags.
type Merge struct {
	// Total is the number of names in force, and FromFlags how many of
	// them come from the flags.
	Total, FromFlags int
	// Shadowed maps each found name whose value a flag overrides to what
	// the flag says.
	Shadowed map[string]string
	// Dropped are the found names past the shared budget of names, in
	// name order; the flags' names always fit.
	Dropped []string
}

// mergeOver is the merge both tables make of the operator's flags over
// the names found outside them: a name both hold keeps the flag's value
// (Shadowed says so, in describe's words, when the found value differs),
// and the other found names fill, in name order, the budget the flags'
// names leave; the rest are Dropped.
func mergeOver[V any](flags, found map[string]V, budget int, equal func(a, b V) bool, describe func(name string, flag V) string) (map[string]V, Merge) {
	merged := make(map[string]V, len(flags)+len(found))
	m := Merge{Shadowed: make(map[string]string)}
	room := budget - len(flags)
	for _, name := range slices.Sorted(maps.Keys(found)) {
		if v, ok := flags[name]; ok {
			if !equal(v, found[name]) {
				m.Shadowed[name] = describe(name, v)
			}
			continue
		}
		if room <= 0 {
			m.Dropped = append(m.Dropped, name)
			continue
		}
		room--
		merged[name] = found[name]
	}
	maps.Copy(merged, flags)
	m.Total, m.FromFlags = len(merged), len(flags)
	return merged, m
}
