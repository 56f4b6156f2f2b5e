package main

import (
	"strings"
	"testing"
)

func TestCheckConfig_FairnessFlags(t *testing.T) {
	code, out, _ := runArgs(t, "check-config",
		"--fairness", "tenants",
		"--fairness-max-flows", "0",
		"--fairness-weight", "gold=0",
		"--fairness-weight", "silver",
		"--objective-class", "chat=urgent",
	)
	if code != 1 {
		t.Fatalf("code %d, want 1; output:\n%s", code, out)
	}
	for _, want := range []string{
		`invalid --fairness "tenants": must be none, tenant or header`,
		"--fairness-max-flows must be in [1, 65536], got 0",
		`invalid --fairness-weight "gold=0"`,
		`invalid --fairness-weight "silver"`,
		`invalid --objective-class "chat=urgent"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runArgs(t, "check-config", "--fairness", "header", "--fairness-weight", "gold=3",
		"--fairness-max-flows", "64", "--objective-class", "chat=interactive")
	if code != 0 {
		t.Fatalf("valid fairness flags: code %d, output:\n%s", code, out)
	}
}

func TestFairnessOptions_Apply(t *testing.T) {
	o := fairnessOptions{mode: "tenant", maxFlows: 64, weights: stringList{"gold=3", "silver=2"}, objectives: stringList{"batch=bulk"}}
	var s setup
	if err := o.apply(&s.cfg); err != nil {
		t.Fatal(err)
	}
	f := s.cfg.Sched.Fairness
	if s.cfg.Fairness.String() != "tenant" || f.MaxFlows != 64 || f.Weights["gold"] != 3 || f.Weights["silver"] != 2 || s.cfg.Objectives["batch"].String() != "bulk" {
		t.Fatalf("config %+v, objectives %v", f, s.cfg.Objectives)
	}
}
