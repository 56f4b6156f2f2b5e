package policy

import (
	"testing"

	"github.com/tollgate/tollgate/sched"
)

// priorityHeaderTests follows upstream's class.rs unit tests plus the
// header-path rules (absent, non-visible ASCII).
var priorityHeaderTests = []struct {
	give        string
	present     bool
	want        sched.Priority
	wantUnknown bool
}{
	{"system", true, sched.PrioritySystem, false},
	{"interactive", true, sched.PriorityInteractive, false},
	{"default", true, sched.PriorityDefault, false},
	{"bulk", true, sched.PriorityBulk, false},
	{"Bulk", true, sched.PriorityBulk, false},
	{"INTERACTIVE", true, sched.PriorityInteractive, false},
	{"SyStEm", true, sched.PrioritySystem, false},
	{"DEFAULT", true, sched.PriorityDefault, false},
	{"  bulk  ", true, sched.PriorityBulk, false},
	{"\tinteractive\n", true, sched.PriorityInteractive, false},
	{"urgent", true, sched.PriorityDefault, true},
	{"123", true, sched.PriorityDefault, true},
	{"bulk!", true, sched.PriorityDefault, true},
	{"sys tem", true, sched.PriorityDefault, true},
	{"", true, sched.PriorityDefault, false},
	{"   ", true, sched.PriorityDefault, false},
	{"", false, sched.PriorityDefault, false},
	{"system", false, sched.PriorityDefault, false}, // absent: the value is ignored
	{"bülk", true, sched.PriorityDefault, false},    // not visible ASCII: treated as absent
	{"ſystem", true, sched.PriorityDefault, false},  // U+017F folds to s in Unicode, not in ASCII
	{"sys\x00tem", true, sched.PriorityDefault, false},
	{"\x7fbulk", true, sched.PriorityDefault, false},
	{"bulk\tbulk", true, sched.PriorityDefault, true},
}

func TestParsePriorityHeader(t *testing.T) {
	for _, tt := range priorityHeaderTests {
		got, unknown := ParsePriorityHeader(tt.give, tt.present)
		if got != tt.want || unknown != tt.wantUnknown {
			t.Errorf("ParsePriorityHeader(%q, %v) = %s, %v; want %s, %v", tt.give, tt.present, got, unknown, tt.want, tt.wantUnknown)
		}
	}
}

func TestParseDefaultMaxClass(t *testing.T) {
	for give, want := range map[string]sched.Priority{
		"": sched.PriorityDefault, "default": sched.PriorityDefault, "system": sched.PrioritySystem,
		"Interactive": sched.PriorityInteractive, " bulk ": sched.PriorityBulk,
	} {
		got, err := ParseDefaultMaxClass(give)
		if err != nil || got != want {
			t.Errorf("ParseDefaultMaxClass(%q) = %s, %v; want %s", give, got, err, want)
		}
	}
	for _, give := range []string{"urgent", "sys", "ſystem", "high"} {
		if _, err := ParseDefaultMaxClass(give); err == nil ||
			err.Error() != `invalid --priority-scheduler-default-max-class "`+give+`": must be one of system, interactive, default, bulk` {
			t.Errorf("ParseDefaultMaxClass(%q) error = %v", give, err)
		}
	}
}

func TestClamp(t *testing.T) {
	file := &PriorityFile{Tenants: map[string]sched.Priority{
		"auth:acme":          sched.PriorityInteractive,
		"auth:internal-cron": sched.PrioritySystem,
		"ip:10.0.0.9":        sched.PriorityBulk,
	}}
	for _, tt := range []struct {
		name        string
		requested   sched.Priority
		tenant      string
		file        *PriorityFile
		defaultMax  sched.Priority
		want        sched.Priority
		wantClamped bool
	}{
		{"unlisted tenant is capped at the default max", sched.PrioritySystem, "auth:other", file, sched.PriorityDefault, sched.PriorityDefault, true},
		{"below the cap is unchanged", sched.PriorityBulk, "auth:other", file, sched.PriorityDefault, sched.PriorityBulk, false},
		{"at the cap is not clamped", sched.PriorityDefault, "auth:other", file, sched.PriorityDefault, sched.PriorityDefault, false},
		{"listed tenant uses its max_class", sched.PrioritySystem, "auth:acme", file, sched.PriorityDefault, sched.PriorityInteractive, true},
		{"listed tenant may exceed the default max", sched.PriorityInteractive, "auth:acme", file, sched.PriorityDefault, sched.PriorityInteractive, false},
		{"system tenant keeps system", sched.PrioritySystem, "auth:internal-cron", file, sched.PriorityBulk, sched.PrioritySystem, false},
		{"a listing can lower below the default max", sched.PriorityDefault, "ip:10.0.0.9", file, sched.PrioritySystem, sched.PriorityBulk, true},
		{"tenant keys are exact", sched.PrioritySystem, "auth:Acme", file, sched.PriorityDefault, sched.PriorityDefault, true},
		{"no file", sched.PrioritySystem, "auth:acme", nil, sched.PriorityInteractive, sched.PriorityInteractive, true},
	} {
		got, clamped := Clamp(tt.requested, tt.tenant, tt.file, tt.defaultMax)
		if got != tt.want || clamped != tt.wantClamped {
			t.Errorf("%s: Clamp = %s, %v; want %s, %v", tt.name, got, clamped, tt.want, tt.wantClamped)
		}
	}
}
