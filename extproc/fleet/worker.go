package fleet

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/tollgate/tollgate/extproc/engine/enginemetrics"
	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/sched"
)

// Worker is one model server as the workers file (or a discovery source)
// describes it. Workers reach the scheduler through Server.SetWorkers, which
// validates the whole set before swapping it in atomically.
type Worker struct {
	// ID is what pins name (x-dynamo-worker-instance-id); unique in a set.
	ID string `json:"id"`
	// Address is the literal IP:port Envoy's ORIGINAL_DST cluster connects
	// to. Hostnames are rejected: Envoy would not resolve them.
	Address string `json:"address"`
	// MaxRunningRequests is the worker's SMG slot count; 0 means
	// sched.DefaultMaxRunningRequests.
	MaxRunningRequests uint32 `json:"max_running_requests,omitempty"`
	// MaxNumBatchedTokens is Dynamo's max_num_batched_tokens; 0 means
	// sched.DefaultMaxBatchedTokens.
	MaxNumBatchedTokens uint64 `json:"max_num_batched_tokens,omitempty"`
	// DPSize is the number of data-parallel ranks; 0 means 1.
	DPSize uint32 `json:"dp_size,omitempty"`
	// DPStartRank is the first rank.
	DPStartRank uint32 `json:"dp_start_rank,omitempty"`
	// Taints are matched against a request's required taints.
	Taints []string `json:"taints,omitempty"`
	// Model is the served model name; empty serves every model.
	Model string `json:"model,omitempty"`
	// Role is the worker's part in prefill/decode disaggregation (see
	// ParseRole): "both" (also when empty), "prefill" or "decode".
	Role string `json:"role,omitempty"`
	// MetricsURL overrides where the engine's Prometheus metrics are read:
	// empty means http://ADDRESS/metrics, ":PORT/PATH" or "/PATH" are
	// relative to the address, else an absolute http(s) URL.
	MetricsURL string `json:"metrics_url,omitempty"`
	// KVEventsEndpoint is the engine's KV-event PUB endpoint,
	// tcp://IP:PORT, of its first DP rank (rank i publishes on PORT+i).
	KVEventsEndpoint string `json:"kv_events_endpoint,omitempty"`
	// KVEventsReplayEndpoint is the engine's replay ROUTER endpoint,
	// offset by rank the same way.
	KVEventsReplayEndpoint string `json:"kv_events_replay_endpoint,omitempty"`
}

// ValidateWorkers reports every problem of a worker set, joined: missing or
// duplicate ids, addresses that are not literal IP:port, DP ranges that
// overflow, empty taints, unknown roles, bad metrics URLs and KV-event
// endpoints. It is the check of every worker set, with no file positions: a
// workers file (ParseWorkers) adds them, Kubernetes discovery has none.
func ValidateWorkers(ws []Worker) error {
	var errs []error
	checkWorkers(ws, nil, func(i int, _, msg string) {
		errs = append(errs, fmt.Errorf("%s: %s", workerName(ws[i].ID, i), msg))
	})
	return errors.Join(errs...)
}

// workerName names a worker in problems: by its id, else by its index.
func workerName(id string, i int) string {
	if id != "" {
		return fmt.Sprintf("worker %q", id)
	}
	return fmt.Sprintf("worker %d", i)
}

// checkWorkers calls bad with every problem of ws: the worker's index, the
// key the problem is about (the worker file's key, which locates it in a
// file) and the message. where, if not nil, says where worker j is, for a
// duplicate id's message.
func checkWorkers(ws []Worker, where func(j int) string, bad func(i int, key, msg string)) {
	seen := make(map[string]int, len(ws))
	for i, w := range ws {
		switch {
		case w.ID == "":
			bad(i, "id", "id is required")
		case strings.TrimSpace(w.ID) != w.ID:
			bad(i, "id", "id has surrounding whitespace")
		}
		if j, dup := seen[w.ID]; dup && w.ID != "" {
			also := fmt.Sprintf("worker %d", j)
			if where != nil {
				also += where(j)
			}
			bad(i, "id", fmt.Sprintf("duplicate id (also %s)", also))
		} else {
			seen[w.ID] = i
		}
		if _, err := parseAddress(w.Address); err != nil {
			bad(i, "address", err.Error())
		}
		if w.DPSize > sched.MaxDPSize {
			bad(i, "dp_size", fmt.Sprintf("dp_size %d exceeds %d", w.DPSize, sched.MaxDPSize))
		}
		if uint64(w.DPStartRank)+uint64(max(w.DPSize, 1)) > 1<<32 {
			bad(i, "dp_start_rank", fmt.Sprintf("dp_start_rank %d + dp_size %d overflows a 32-bit rank", w.DPStartRank, w.DPSize))
		}
		if slices.Contains(w.Taints, "") {
			bad(i, "taints", "taints contain an empty value")
		}
		if _, err := ParseRole(w.Role); err != nil {
			bad(i, "role", err.Error())
		}
		if w.MetricsURL != "" {
			if _, err := enginemetrics.ResolveURL(w.Address, w.MetricsURL); err != nil {
				bad(i, "metrics_url", err.Error())
			}
		}
		if key, err := checkKVEndpoints(w); err != nil {
			bad(i, key, err.Error())
		}
	}
}

// ParseRole returns the role a worker's role value names, in sched.Role's
// spellings: "both" (also ""), "prefill" or "decode".
func ParseRole(s string) (sched.Role, error) {
	if s == "" {
		return sched.RoleBoth, nil
	}
	names := make([]string, 0, sched.NumRoles)
	for r := range sched.NumRoles {
		if r.String() == s {
			return r, nil
		}
		names = append(names, r.String())
	}
	return 0, fmt.Errorf("role %q is not one of %s", s, strings.Join(names, ", "))
}

// checkKVEndpoints validates a worker's KV-event endpoints; key is the
// one a problem is about.
func checkKVEndpoints(w Worker) (key string, err error) {
	if w.KVEventsEndpoint != "" {
		if err := kvevents.CheckEndpoint(w.KVEventsEndpoint); err != nil {
			return "kv_events_endpoint", fmt.Errorf("kv_events_endpoint: %w", err)
		}
	}
	if w.KVEventsReplayEndpoint != "" {
		if w.KVEventsEndpoint == "" {
			return "kv_events_replay_endpoint", errors.New("kv_events_replay_endpoint without kv_events_endpoint")
		}
		if err := kvevents.CheckEndpoint(w.KVEventsReplayEndpoint); err != nil {
			return "kv_events_replay_endpoint", fmt.Errorf("kv_events_replay_endpoint: %w", err)
		}
	}
	return "", nil
}

// parseAddress accepts a literal IP:port with a non-zero port.
func parseAddress(a string) (netip.AddrPort, error) {
	if a == "" {
		return netip.AddrPort{}, errors.New("address is required")
	}
	ap, err := netip.ParseAddrPort(a)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q is not a literal IP:port (hostnames are not resolved; Envoy's ORIGINAL_DST cluster needs an IP)", a)
	}
	if ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("address %q has port 0", a)
	}
	if ap.Addr().Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("address %q has an IPv6 zone, which Envoy does not accept", a)
	}
	return ap, nil
}
