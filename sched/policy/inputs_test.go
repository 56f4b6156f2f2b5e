package policy

import (
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/sched"
)

// headers is a Lookup over a fixed header set.
func headers(kv ...string) Lookup {
	m := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

func TestPolicyClass(t *testing.T) {
	for _, tt := range []struct {
		give    string
		present bool
		want    string
	}{
		{"premium", true, "premium"},
		{"  premium\t", true, "premium"},
		{"Premium", true, "Premium"}, // matching is case-sensitive, done by the profile
		{"", true, ""},
		{"premium", false, ""},
		{"Bearer abc", true, ""},
		{"bearer abc", true, ""},
		{"bearers", true, "bearers"},
	} {
		if got := PolicyClass(tt.give, tt.present); got != tt.want {
			t.Errorf("PolicyClass(%q, %v) = %q, want %q", tt.give, tt.present, got, tt.want)
		}
	}
}

func TestParseStrictPriority(t *testing.T) {
	for give, want := range map[string]uint32{"0": 0, "5": 5, " 7 ": 7, "+3": 3, "4294967295": math.MaxUint32} {
		if got, ok := ParseStrictPriority(give); !ok || got != want {
			t.Errorf("ParseStrictPriority(%q) = %d, %v; want %d", give, got, ok, want)
		}
	}
	for _, give := range []string{"", "malformed", "-1", "4294967296", "1.5", "0x10", "1 2"} {
		if _, ok := ParseStrictPriority(give); ok {
			t.Errorf("ParseStrictPriority(%q) accepted", give)
		}
	}
}

func TestParseRequestPriority(t *testing.T) {
	for give, want := range map[string]int32{"0": 0, "10": 10, "-3": -3, " 7\t": 7, "2147483647": math.MaxInt32, "-2147483648": math.MinInt32} {
		if got, ok := ParseRequestPriority(give); !ok || got != want {
			t.Errorf("ParseRequestPriority(%q) = %d, %v; want %d", give, got, ok, want)
		}
	}
	for _, give := range []string{"", "high", "2147483648", "1.5"} {
		if _, ok := ParseRequestPriority(give); ok {
			t.Errorf("ParseRequestPriority(%q) accepted", give)
		}
	}
}

func TestPriorityInputs(t *testing.T) {
	for _, tt := range []struct {
		name          string
		lookup        Lookup
		hints         AgentHints
		wantStrict    uint32
		wantHasStrict bool
		wantJump      float64
	}{
		{"nothing", headers(), AgentHints{}, 0, false, 0},
		{"headers", headers(HeaderStrictPriority, "2", HeaderRequestPriority, "10"), AgentHints{}, 2, true, 10},
		{"headers override the body", headers(HeaderStrictPriority, "2", HeaderRequestPriority, "10"),
			AgentHints{StrictPriority: ptr[uint32](9), Priority: ptr[int32](-3)}, 2, true, 10},
		{"malformed headers fall back to the body", headers(HeaderStrictPriority, "malformed", HeaderRequestPriority, "x"),
			AgentHints{StrictPriority: ptr[uint32](9), Priority: ptr[int32](4)}, 9, true, 4},
		{"malformed header without body", headers(HeaderStrictPriority, "-1"), AgentHints{}, 0, false, 0},
		{"negative priority clamps to zero", headers(HeaderRequestPriority, "-7"), AgentHints{}, 0, false, 0},
		{"negative body priority clamps to zero", headers(), AgentHints{Priority: ptr[int32](-3)}, 0, false, 0},
		{"latency sensitivity when no priority", headers(), AgentHints{LatencySensitivity: ptr(2.5)}, 0, false, 2.5},
		{"priority wins over latency sensitivity", headers(), AgentHints{Priority: ptr[int32](1), LatencySensitivity: ptr(2.5)}, 0, false, 1},
		{"negative latency sensitivity", headers(), AgentHints{LatencySensitivity: ptr(-1.0)}, 0, false, 0},
		{"NaN latency sensitivity", headers(), AgentHints{LatencySensitivity: ptr(math.NaN())}, 0, false, 0},
		{"infinite latency sensitivity", headers(), AgentHints{LatencySensitivity: ptr(math.Inf(1))}, 0, false, 0},
		{"strict zero is given", headers(HeaderStrictPriority, "0"), AgentHints{}, 0, true, 0},
	} {
		strict, has, jump := PriorityInputs(tt.lookup, tt.hints)
		if strict != tt.wantStrict || has != tt.wantHasStrict || jump != tt.wantJump {
			t.Errorf("%s: PriorityInputs = %d, %v, %v; want %d, %v, %v", tt.name, strict, has, jump, tt.wantStrict, tt.wantHasStrict, tt.wantJump)
		}
	}
}

func TestParsePinHeaders_Pin(t *testing.T) {
	for _, tt := range []struct {
		name       string
		lookup     Lookup
		bodyWorker string
		bodyRank   *uint32
		want       *sched.Pin
	}{
		{"no pin", headers(), "", nil, nil},
		{"worker header", headers(HeaderWorkerInstanceID, "w1"), "", nil, &sched.Pin{Worker: "w1"}},
		{"worker alias", headers(HeaderWorkerInstanceIDAlias, "w2"), "", nil, &sched.Pin{Worker: "w2"}},
		{"canonical wins over alias", headers(HeaderWorkerInstanceID, "w1", HeaderWorkerInstanceIDAlias, "w2"), "", nil, &sched.Pin{Worker: "w1"}},
		{"numeric worker id", headers(HeaderWorkerInstanceID, " 7587888766 "), "", nil, &sched.Pin{Worker: "7587888766"}},
		{"rank 0 is explicit", headers(HeaderWorkerInstanceID, "w1", HeaderDPRank, "0"), "", nil, &sched.Pin{Worker: "w1", Rank: 0, HasRank: true}},
		{"rank alias", headers(HeaderWorkerInstanceID, "w1", HeaderDPRankAlias, "3"), "", nil, &sched.Pin{Worker: "w1", Rank: 3, HasRank: true}},
		{"data-parallel-rank alias", headers(HeaderWorkerInstanceID, "w1", HeaderDataParallelRankAlias, "4"), "", nil, &sched.Pin{Worker: "w1", Rank: 4, HasRank: true}},
		{"rank alias order", headers(HeaderWorkerInstanceID, "w1", HeaderDPRankAlias, "3", HeaderDataParallelRankAlias, "4"), "", nil, &sched.Pin{Worker: "w1", Rank: 3, HasRank: true}},
		{"body pin", headers(), "w9", ptr[uint32](2), &sched.Pin{Worker: "w9", Rank: 2, HasRank: true}},
		{"headers override the body per field", headers(HeaderWorkerInstanceID, "w1"), "w9", ptr[uint32](2), &sched.Pin{Worker: "w1", Rank: 2, HasRank: true}},
		{"rank header overrides body rank", headers(HeaderDPRank, "5"), "w9", ptr[uint32](2), &sched.Pin{Worker: "w9", Rank: 5, HasRank: true}},
		{"rank alone pins nothing", headers(HeaderDPRank, "1"), "", nil, nil},
	} {
		h, err := ParsePinHeaders(tt.lookup)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		got := h.Pin(tt.bodyWorker, tt.bodyRank)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestParsePinHeaders_Malformed(t *testing.T) {
	for _, tt := range []struct {
		name   string
		lookup Lookup
		want   string
	}{
		{"empty worker", headers(HeaderWorkerInstanceID, "  "), `invalid x-dynamo-worker-instance-id header "  ": must be a worker id (visible ASCII, no spaces)`},
		{"worker with a space", headers(HeaderWorkerInstanceIDAlias, "w 1"), `invalid x-worker-instance-id header "w 1": must be a worker id (visible ASCII, no spaces)`},
		{"non-ASCII worker", headers(HeaderWorkerInstanceID, "wé"), `invalid x-dynamo-worker-instance-id header "wé": must be a worker id (visible ASCII, no spaces)`},
		{"malformed canonical does not fall back to the alias", headers(HeaderWorkerInstanceID, "", HeaderWorkerInstanceIDAlias, "w2"),
			`invalid x-dynamo-worker-instance-id header "": must be a worker id (visible ASCII, no spaces)`},
		{"rank not a number", headers(HeaderWorkerInstanceID, "w1", HeaderDPRank, "one"), `invalid x-dynamo-dp-rank header "one": must be an unsigned 32-bit integer`},
		{"negative rank", headers(HeaderWorkerInstanceID, "w1", HeaderDPRankAlias, "-1"), `invalid x-dp-rank header "-1": must be an unsigned 32-bit integer`},
		{"rank overflow", headers(HeaderWorkerInstanceID, "w1", HeaderDataParallelRankAlias, "4294967296"), `invalid x-data-parallel-rank header "4294967296": must be an unsigned 32-bit integer`},
		{"malformed rank without worker", headers(HeaderDPRank, "x"), `invalid x-dynamo-dp-rank header "x": must be an unsigned 32-bit integer`},
	} {
		h, err := ParsePinHeaders(tt.lookup)
		var pe *PinError
		if err == nil || err.Error() != tt.want || !errors.As(err, &pe) || h != (PinHeaders{}) {
			t.Errorf("%s: ParsePinHeaders = %+v, %v; want %s", tt.name, h, err, tt.want)
		}
	}
}
