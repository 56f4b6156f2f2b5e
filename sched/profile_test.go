package sched_test

import (
	"math"
	"testing"

	"github.com/tollgate/tollgate/sched"
)

// sampleProfile is the Dynamo sample's root profile, built by hand: families
// standard and latency over buckets cached (0) and uncached (3072), and the
// explicit class custom_priority.
func sampleProfile() *sched.Profile {
	return &sched.Profile{
		Classes: []sched.ClassSpec{
			{Name: "cached", Family: "standard", Bucket: "cached", Quantum: 2048},
			{Name: "uncached", Family: "standard", Bucket: "uncached", Quantum: 512},
			{Name: "latency_cached", Family: "latency", Bucket: "cached", Quantum: 4096},
			{Name: "latency_uncached", Family: "latency", Bucket: "uncached", Quantum: 1024},
			{Name: "custom_priority", Quantum: 4096},
		},
		Buckets:       []sched.Bucket{{MinTokens: 0, Name: "cached"}, {MinTokens: 3072, Name: "uncached"}},
		DefaultFamily: "standard",
		Matrix:        map[string][]int{"standard": {0, 1}, "latency": {2, 3}},
		Explicit:      map[string]int{"custom_priority": 4},
	}
}

func TestProfile_Resolve(t *testing.T) {
	p := sampleProfile()
	for _, tt := range []struct {
		requested string
		uncached  uint64
		want      string
	}{
		{"", 0, "cached"},
		{"", 3071, "cached"},
		{"", 3072, "uncached"},
		{"", math.MaxUint64, "uncached"},
		{"latency", 0, "latency_cached"},
		{"latency", 3072, "latency_uncached"},
		{"unknown", 0, "cached"},
		{"Latency", 5000, "uncached"}, // matching is case-sensitive
		{"cached", math.MaxUint64, "uncached"},
		{"custom_priority", math.MaxUint64, "custom_priority"},
	} {
		if got := p.Classes[p.Resolve(tt.requested, tt.uncached)].Name; got != tt.want {
			t.Errorf("Resolve(%q, %d) = %s, want %s", tt.requested, tt.uncached, got, tt.want)
		}
	}
}

func TestProfile_ResolveManyBuckets(t *testing.T) {
	p := &sched.Profile{
		Classes:       []sched.ClassSpec{{Name: "a", Family: "f", Bucket: "a"}, {Name: "b", Family: "f", Bucket: "b"}, {Name: "c", Family: "f", Bucket: "c"}},
		Buckets:       []sched.Bucket{{MinTokens: 0, Name: "a"}, {MinTokens: 10, Name: "b"}, {MinTokens: 100, Name: "c"}},
		DefaultFamily: "f",
		Matrix:        map[string][]int{"f": {0, 1, 2}},
	}
	for uncached, want := range map[uint64]int{0: 0, 9: 0, 10: 1, 99: 1, 100: 2, math.MaxUint64: 2} {
		if got := p.Resolve("", uncached); got != want {
			t.Errorf("Resolve(%d) = %d, want %d", uncached, got, want)
		}
	}
}

func TestSyntheticProfile(t *testing.T) {
	frac := 2.0
	p := sched.SyntheticProfile(&frac, sched.WSPT)
	if len(p.Classes) != 1 || p.Classes[0].Name != "default" || p.Classes[0].Quantum != 1 ||
		p.Classes[0].QueuePolicy != sched.WSPT || *p.Classes[0].BusyThresholdFrac != 2 || !p.Classes[0].Queues() {
		t.Fatalf("SyntheticProfile = %+v", p.Classes)
	}
	for _, r := range []string{"", "premium", "default"} {
		if got := p.Resolve(r, math.MaxUint64); got != 0 {
			t.Errorf("Resolve(%q) = %d, want 0", r, got)
		}
	}
	if sched.SyntheticProfile(nil, sched.FCFS).Classes[0].Queues() {
		t.Error("no threshold must mean no queueing")
	}
}

func TestPolicyConfig_ProfileFor(t *testing.T) {
	root, model, fallback := sampleProfile(), sampleProfile(), sched.SyntheticProfile(nil, sched.FCFS)
	cfg := &sched.PolicyConfig{Root: root, Models: map[string]*sched.Profile{"m": model}, Fallback: fallback}
	if cfg.ProfileFor("m") != model || cfg.ProfileFor("other") != root {
		t.Error("a model profile, else the root")
	}
	cfg.Root = nil
	if cfg.ProfileFor("other") != fallback {
		t.Error("no root: the fallback")
	}
	cfg.Fallback = nil
	if p := cfg.ProfileFor("other"); !p.Synthetic || p.Classes[0].QueuePolicy != sched.FCFS || p.Classes[0].Queues() {
		t.Errorf("no fallback: the default synthetic profile, got %+v", p)
	}
}
