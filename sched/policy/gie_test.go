package policy

import (
	"math"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/sched"
)

func lookupOf(h map[string]string) Lookup {
	return func(name string) (string, bool) {
		v, ok := h[name]
		return v, ok
	}
}

func TestFairnessKey(t *testing.T) {
	long := strings.Repeat("x", MaxFairnessIDBytes+1)
	tests := []struct {
		name    string
		mode    FairnessMode
		headers map[string]string
		want    string
		wantErr string
	}{
		{"off", FairnessNone, map[string]string{HeaderFairnessID: "a"}, "", ""},
		{"tenant ignores the header", FairnessTenant, map[string]string{HeaderFairnessID: "a"}, "tenant-1", ""},
		{"header", FairnessHeader, map[string]string{HeaderFairnessID: " a "}, "a", ""},
		{"newer name first", FairnessHeader, map[string]string{HeaderFairnessID: "a", HeaderFairnessIDLegacy: "b"}, "a", ""},
		{"older name", FairnessHeader, map[string]string{HeaderFairnessIDLegacy: "b"}, "b", ""},
		{"empty value falls through", FairnessHeader, map[string]string{HeaderFairnessID: " ", HeaderFairnessIDLegacy: "b"}, "b", ""},
		{"no header: the tenant", FairnessHeader, nil, "tenant-1", ""},
		{"too long", FairnessHeader, map[string]string{HeaderFairnessID: long}, "", "x-llm-d-inference-fairness-id is 257 bytes long, more than 256"},
		{"not ASCII", FairnessHeader, map[string]string{HeaderFairnessIDLegacy: "é"}, "", "x-gateway-inference-fairness-id must be visible ASCII"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FairnessKey(tt.mode, lookupOf(tt.headers), "tenant-1")
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("FairnessKey = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestParseFairnessMode(t *testing.T) {
	for s, want := range map[string]FairnessMode{"": FairnessNone, "none": FairnessNone, "tenant": FairnessTenant, "header": FairnessHeader} {
		if got, err := ParseFairnessMode(s); err != nil || got != want {
			t.Errorf("ParseFairnessMode(%q) = %v, %v", s, got, err)
		}
		if s != "" && want.String() != s {
			t.Errorf("%v.String() = %q", want, want.String())
		}
	}
	if _, err := ParseFairnessMode("tenants"); err == nil || !strings.Contains(err.Error(), `invalid --fairness "tenants"`) {
		t.Fatalf("error %v", err)
	}
}

func TestObjectives(t *testing.T) {
	o := Objectives{}
	for _, s := range []string{"chat=interactive", " batch = BULK"} {
		name, p, err := ParseObjective(s)
		if err != nil {
			t.Fatal(err)
		}
		o[name] = p
	}
	if o["batch"] != sched.PriorityBulk || o["chat"] != sched.PriorityInteractive {
		t.Fatalf("objectives %v", o)
	}
	for _, bad := range []string{"chat", "=bulk", "chat=urgent"} {
		if _, _, err := ParseObjective(bad); err == nil {
			t.Errorf("ParseObjective(%q) accepted", bad)
		}
	}
	tests := []struct {
		name    string
		headers map[string]string
		want    sched.Priority
		found   bool
		wantErr bool
	}{
		{"absent", nil, 0, false, false},
		{"mapped", map[string]string{HeaderObjective: "chat"}, sched.PriorityInteractive, true, false},
		{"older name", map[string]string{HeaderObjectiveLegacy: "batch"}, sched.PriorityBulk, true, false},
		{"newer name wins", map[string]string{HeaderObjective: "batch", HeaderObjectiveLegacy: "chat"}, sched.PriorityBulk, true, false},
		{"unmapped keeps the class", map[string]string{HeaderObjective: "other"}, 0, false, false},
		{"too long", map[string]string{HeaderObjective: strings.Repeat("a", 300)}, 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, found, err := o.Objective(lookupOf(tt.headers))
			if (err != nil) != tt.wantErr || found != tt.found || (found && p != tt.want) {
				t.Fatalf("Objective = %v, %v, %v", p, found, err)
			}
		})
	}
	if _, found, _ := Objectives(nil).Objective(lookupOf(map[string]string{HeaderObjective: "chat"})); found {
		t.Fatal("an empty mapping found an objective")
	}
}

func TestObjectiveClass(t *testing.T) {
	p := func(v int64) *int64 { return &v }
	for _, tt := range []struct {
		priority *int64
		want     sched.Priority
	}{
		{nil, sched.PriorityDefault},
		{p(0), sched.PriorityDefault},
		{p(-1), sched.PriorityBulk},
		{p(math.MinInt64), sched.PriorityBulk},
		{p(1), sched.PriorityInteractive},
		{p(math.MaxInt64), sched.PriorityInteractive}, // never system
	} {
		if got := ObjectiveClass(tt.priority); got != tt.want {
			t.Errorf("ObjectiveClass(%v) = %v, want %v", tt.priority, got, tt.want)
		}
	}
}
