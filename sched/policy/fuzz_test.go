package policy

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/sched"
)

func FuzzParseRouterPolicy(f *testing.F) {
	for _, name := range []string{
		"policy-class-queues.yaml", "premium_4x.yaml", "equal_share.yaml",
		"policy-class-queues-slo.yaml", "slo_rejection.yaml", "policy-class-queues-v1.7.yaml",
	} {
		f.Add(readExample(f, name))
	}
	for _, tests := range [][]struct{ name, doc, want string }{validationTests, parseErrorTests, flatValidationTests, flatParseErrorTests} {
		for _, tt := range tests {
			f.Add([]byte(tt.doc))
		}
	}
	f.Add([]byte(stdDoc(`{name: x, quantum: 1, prefill_busy_threshold: 10, busy_worker_ratio: 0.5, prefill_busy_threshold_frac: 1e-3}`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseRouterPolicy(data, "")
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "failed to parse router policy config <inline>: ") &&
				!strings.HasPrefix(msg, "invalid router policy config: ") {
				t.Fatalf("unexpected error form: %s", msg)
			}
			return
		}
		if cfg.Root == nil && len(cfg.Models) == 0 {
			t.Fatal("accepted a document with no profile")
		}
		if cfg.Schema != SchemaFamily && cfg.Schema != SchemaFlat {
			t.Fatalf("schema %q", cfg.Schema)
		}
		if cfg.Root != nil {
			checkProfile(t, cfg.Root)
		}
		for _, p := range cfg.Models {
			checkProfile(t, p)
		}
		checkRouterRoundTrip(t, cfg)
	})
}

// checkProfile asserts the invariants sched relies on and resolves a few
// requests, which must land in range.
func checkProfile(t *testing.T, p *sched.Profile) {
	t.Helper()
	if p.Flat {
		checkFlatProfile(t, p)
		return
	}
	if len(p.Classes) == 0 || len(p.Buckets) == 0 || p.Buckets[0].MinTokens != 0 {
		t.Fatalf("malformed profile %+v", p)
	}
	for i := 1; i < len(p.Buckets); i++ {
		if p.Buckets[i].MinTokens <= p.Buckets[i-1].MinTokens {
			t.Fatalf("buckets not increasing: %+v", p.Buckets)
		}
	}
	if _, ok := p.Matrix[p.DefaultFamily]; !ok {
		t.Fatalf("default family %q has no row", p.DefaultFamily)
	}
	for fam, row := range p.Matrix {
		if len(row) != len(p.Buckets) {
			t.Fatalf("family %q row %v for %d buckets", fam, row, len(p.Buckets))
		}
		for b, ci := range row {
			if c := p.Classes[ci]; c.Family != fam || c.Bucket != p.Buckets[b].Name {
				t.Fatalf("matrix[%q][%d] = %d is class %+v", fam, b, ci, c)
			}
		}
	}
	for name, ci := range p.Explicit {
		if c := p.Classes[ci]; c.Name != name || c.Family != "" {
			t.Fatalf("explicit %q = %d is class %+v", name, ci, c)
		}
	}
	for i := range p.Classes {
		if c := &p.Classes[i]; c.Quantum == 0 || c.SLO != 0 || c.QueuePolicy == sched.EDF {
			t.Fatalf("family class %+v", c)
		}
	}
	requests := []string{"", "unknown", p.DefaultFamily}
	for i := range p.Classes {
		requests = append(requests, p.Classes[i].Name, p.Classes[i].Family)
	}
	for _, r := range requests {
		for _, u := range []uint64{0, 1, p.Buckets[len(p.Buckets)-1].MinTokens, math.MaxUint64} {
			if ci := p.Resolve(r, u); ci < 0 || ci >= len(p.Classes) {
				t.Fatalf("Resolve(%q, %d) = %d out of range", r, u, ci)
			}
		}
	}
}

func FuzzParsePriorityConfig(f *testing.F) {
	f.Add(readExample(f, "priority.yaml"))
	for _, tt := range priorityParseErrors {
		f.Add([]byte(tt.doc))
	}
	f.Add([]byte("classes:\n" + fullBlock("bulk", "reserved_per_slot", "0.3") + fullBlock("system", "queue_timeout_secs", "0")))
	f.Add([]byte("tenant_policies:\n  \"ip:10.0.0.1\": {max_class: system}\n  anonymous: {max_class: bulk}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := ParsePriorityConfig(data, "")
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "parsing <inline>: ") && !strings.HasPrefix(msg, "class ") {
				t.Fatalf("unexpected error form: %s", msg)
			}
			return
		}
		for p, c := range file.Classes {
			if c.QueueTimeout <= 0 || c.StarvationThreshold <= 0 || !isFinite(c.ReservedPerSlot) || c.ReservedPerSlot < 0 {
				t.Fatalf("class %s accepted with %+v", sched.Priority(p), c)
			}
		}
		for k, p := range file.Tenants {
			if int(p) >= sched.NumPriorities {
				t.Fatalf("tenant %q has class %d", k, p)
			}
		}
		checkPriorityRoundTrip(t, file)
	})
}

func FuzzPriorityHeader(f *testing.F) {
	for _, tt := range priorityHeaderTests {
		f.Add(tt.give, tt.present)
	}
	f.Fuzz(func(t *testing.T, v string, present bool) {
		p, unknown := ParsePriorityHeader(v, present)
		if int(p) >= sched.NumPriorities {
			t.Fatalf("class %d out of range", p)
		}
		if !present && (p != sched.PriorityDefault || unknown) {
			t.Fatalf("absent header gave %s, %v", p, unknown)
		}
		if unknown && p != sched.PriorityDefault {
			t.Fatalf("unknown value gave %s", p)
		}
		trimmed := trimASCIISpace(v)
		if present && !unknown && trimmed != "" && visibleASCII(trimmed) && !equalFoldASCII(trimmed, p.String()) {
			t.Fatalf("%q parsed as %s", v, p)
		}
		// ASCII case never changes the answer.
		if p2, u2 := ParsePriorityHeader(upperASCII(v), present); p2 != p || u2 != unknown {
			t.Fatalf("%q gave %s, %v but its upper case gave %s, %v", v, p, unknown, p2, u2)
		}
	})
}

func upperASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
	return string(b)
}

// checkFlatProfile asserts a flat profile's invariants: every class named
// in Explicit at its index, a default in range, an SLO, and no matrix.
func checkFlatProfile(t *testing.T, p *sched.Profile) {
	t.Helper()
	if len(p.Classes) == 0 || len(p.Buckets) != 0 || p.Matrix != nil || p.DefaultFamily != "" || len(p.Explicit) != len(p.Classes) {
		t.Fatalf("malformed flat profile %+v", p)
	}
	if p.DefaultClass < 0 || p.DefaultClass >= len(p.Classes) || p.Resolve("", math.MaxUint64) != p.DefaultClass {
		t.Fatalf("default class %d of %d", p.DefaultClass, len(p.Classes))
	}
	for i := range p.Classes {
		c := &p.Classes[i]
		if c.Quantum == 0 || c.SLO <= 0 || c.SLO%time.Millisecond != 0 || c.Family != "" || c.Bucket != "" || c.BusyWorkerRatio != 0 {
			t.Fatalf("flat class %+v", c)
		}
		if p.Explicit[c.Name] != i || p.Resolve(c.Name, 0) != i {
			t.Fatalf("class %q is not resolved to its index %d", c.Name, i)
		}
		if p.Resolve(c.Name+"?", 0) != -1 { // '?' is no identifier character
			t.Fatalf("unknown name %q resolved", c.Name+"?")
		}
	}
}
