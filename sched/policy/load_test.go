package policy

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/sched"
)

func TestLoad(t *testing.T) {
	pc, pf, err := Load(Files{RouterPolicy: "../../examples/premium_4x.yaml", QueuePolicy: "fcfs",
		PriorityEnabled: true, PriorityConfig: "../../examples/priority.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if pc.Root == nil || len(pc.Root.Classes) != 2 || pc.Fallback == nil || !pc.Fallback.Synthetic {
		t.Fatalf("policy %+v", pc)
	}
	if pf == nil || pf.Tenants["auth:acme"] != sched.PriorityInteractive {
		t.Fatalf("priority file %+v", pf)
	}

	pc, pf, err = Load(Files{QueuePolicy: "wspt", PriorityEnabled: true})
	if err != nil || pc.Root != nil || pc.Fallback.Classes[0].QueuePolicy != sched.WSPT || pf == nil {
		t.Fatalf("no files: %+v %+v %v", pc, pf, err)
	}
	if _, pf, err = Load(Files{QueuePolicy: "fcfs"}); err != nil || pf != nil {
		t.Fatalf("priority off: file %+v, err %v", pf, err)
	}
}

func TestLoad_ReportsEveryProblem(t *testing.T) {
	_, _, err := Load(Files{RouterPolicy: "/no/such/policy.yaml", QueuePolicy: "lifo", PriorityConfig: "p.yaml"})
	for _, want := range []string{"failed to read router policy config /no/such/policy.yaml", "lifo",
		"--priority-scheduler-config needs --priority-scheduler-enabled"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}
