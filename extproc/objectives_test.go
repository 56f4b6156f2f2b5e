package extproc

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

// Objectives installed at run time map the objective header like
// --objective-class does; the flags win, the tenant clamp still applies,
// and a new mapping replaces the old one whole.
func TestExchange_InstalledObjectives(t *testing.T) {
	cfg := fairnessConfig(t, policy.FairnessNone) // flags: chat=interactive, batch=bulk
	submit := func(t *testing.T, p *exchangeDeps, headers ...string) sched.Priority {
		t.Helper()
		x := newExchange(p, &fakeEnv{dest: fleet.Target{Worker: "w0", Address: "10.0.0.7:8000"}, destOK: true}, nil, 7)
		env := x.env.(*fakeEnv)
		feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false, headers...))
		feed(t, x, reqBody(chatBody, true))
		if len(env.submits) != 1 {
			t.Fatalf("%d submits", len(env.submits))
		}
		return env.submits[0].Priority
	}
	_, _, p := newTestExchange(t, cfg)
	if got := submit(t, p, "x-llm-d-inference-objective", "summarise"); got != sched.PriorityDefault {
		t.Fatalf("before install: %v, want default", got)
	}
	if _, err := p.planner.Objectives().Set(policy.Objectives{
		"summarise": sched.PriorityBulk, "chat": sched.PriorityBulk, "assist": sched.PriorityInteractive,
	}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		headers []string
		want    sched.Priority
	}{
		{"installed name", []string{"x-llm-d-inference-objective", "summarise"}, sched.PriorityBulk},
		{"older header", []string{"x-gateway-inference-objective", "assist"}, sched.PriorityInteractive},
		{"the flag wins", []string{"x-llm-d-inference-objective", "chat"}, sched.PriorityInteractive},
		{"flag-only name kept", []string{"x-llm-d-inference-objective", "batch"}, sched.PriorityBulk},
		{"the tenant clamp applies", []string{"x-smg-tenant-id", "red", "x-llm-d-inference-objective", "assist"}, sched.PriorityDefault},
		{"x-smg-priority wins", []string{"x-smg-priority", "bulk", "x-llm-d-inference-objective", "assist"}, sched.PriorityBulk},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := submit(t, p, tt.headers...); got != tt.want {
				t.Errorf("priority %v, want %v", got, tt.want)
			}
		})
	}

	// A new mapping replaces the old one: summarise is gone.
	if _, err := p.planner.Objectives().Set(policy.Objectives{"assist": sched.PriorityInteractive}); err != nil {
		t.Fatal(err)
	}
	if got := submit(t, p, "x-llm-d-inference-objective", "summarise"); got != sched.PriorityDefault {
		t.Errorf("after removal: %v, want default", got)
	}
}

// TestServer_SetObjectivesMergesOverFlags: the server alone merges the
// flags over what discovery found, and answers what a flag shadowed and
// which names the shared budget left out (by name order).
func TestServer_SetObjectivesMergesOverFlags(t *testing.T) {
	srv, err := New(fairnessConfig(t, policy.FairnessNone), nil) // flags: chat=interactive, batch=bulk
	if err != nil {
		t.Fatal(err)
	}
	found := policy.Objectives{"chat": sched.PriorityBulk, "batch": sched.PriorityBulk}
	for i := range policy.MaxObjectives {
		found[fmt.Sprintf("o%04d", i)] = sched.PriorityDefault
	}
	m, err := srv.SetObjectives(found)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"chat": "--objective-class maps chat to interactive"}; !maps.Equal(m.Shadowed, want) {
		t.Errorf("shadowed %v, want %v (batch agrees with its flag)", m.Shadowed, want)
	}
	if want := []string{"o1022", "o1023"}; !slices.Equal(m.Dropped, want) {
		t.Errorf("dropped %v, want %v", m.Dropped, want)
	}
	cur := srv.deps.planner.Objectives().Current()
	if m.Total != policy.MaxObjectives || len(cur) != policy.MaxObjectives || cur["chat"] != sched.PriorityInteractive || m.FromFlags != 2 {
		t.Errorf("merge %d names (%d from flags), chat %v", len(cur), m.FromFlags, cur["chat"])
	}
}

func TestServer_SetObjectivesRejectsBadMappings(t *testing.T) {
	srv, err := New(fairnessConfig(t, policy.FairnessNone), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.SetObjectives(policy.Objectives{"assist": sched.PriorityInteractive}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		obj  policy.Objectives
		want string
	}{
		{"long name", policy.Objectives{strings.Repeat("a", 257): sched.PriorityBulk}, "more than 256"},
		{"empty name", policy.Objectives{"": sched.PriorityBulk}, "empty"},
		{"spaces", policy.Objectives{" a": sched.PriorityBulk}, "surrounding spaces"},
		{"bad class", policy.Objectives{"a": sched.NumPriorities}, "not a priority class"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := srv.SetObjectives(tt.obj)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if got := srv.deps.planner.Objectives().Current(); len(got) != 3 || got["assist"] != sched.PriorityInteractive {
				t.Errorf("a rejected mapping changed the one in force to %v", got)
			}
		})
	}
}

func TestMetrics_Objectives(t *testing.T) {
	srv, err := New(fairnessConfig(t, policy.FairnessNone), nil) // flags: chat=interactive, batch=bulk
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, srv)
	if _, err := srv.SetObjectives(policy.Objectives{"assist": sched.PriorityInteractive, "chat": sched.PriorityBulk, "plain": sched.PriorityDefault}); err != nil {
		t.Fatal(err)
	}
	want := `# HELP tollgate_objectives Objective header values mapped to each priority class, by source: flag (--objective-class) or inferenceobjective (InferenceObjective objects of the pool).
# TYPE tollgate_objectives gauge
tollgate_objectives{class="bulk",source="flag"} 1
tollgate_objectives{class="bulk",source="inferenceobjective"} 0
tollgate_objectives{class="default",source="flag"} 0
tollgate_objectives{class="default",source="inferenceobjective"} 1
tollgate_objectives{class="interactive",source="flag"} 1
tollgate_objectives{class="interactive",source="inferenceobjective"} 1
tollgate_objectives{class="system",source="flag"} 0
tollgate_objectives{class="system",source="inferenceobjective"} 0
`
	if err := testutil.GatherAndCompare(srv.metrics.reg, strings.NewReader(want), "tollgate_objectives"); err != nil {
		t.Error(err)
	}
}
