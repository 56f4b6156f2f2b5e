package extproc

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
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

// MaxWorkersFileBytes bounds the size of a workers file read.
const MaxWorkersFileBytes = 4 << 20

// LoadWorkersFile reads and validates a workers file:
//
//	workers:
//	- {id: w0, address: "10.0.0.7:8000", max_running_requests: 64, dp_size: 2, model: llama}
//
// It reports every problem of the file, joined, each as
// "PATH:LINE:COLUMN: problem" (see ParseWorkers).
func LoadWorkersFile(path string) ([]Worker, error) {
	data, err := readWorkersFile(path)
	if err != nil {
		return nil, err
	}
	return ParseWorkers(data, path)
}

// readWorkersFile reads at most MaxWorkersFileBytes of path; a longer file
// (or a device such as /dev/zero) is an error.
func readWorkersFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("extproc: workers file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxWorkersFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("extproc: workers file: %w", err)
	}
	if len(data) > MaxWorkersFileBytes {
		return nil, fmt.Errorf("extproc: workers file %s is larger than %d bytes", path, MaxWorkersFileBytes)
	}
	return data, nil
}

// ParseWorkers decodes and validates the content of a workers file; name
// is how problems name the file ("workers file" when empty). It is read as
// the policy files are (policy.YAMLReader): one YAML document with a
// workers key whose value is a list (workers: [] for none); an empty or
// null document, a null workers value, a second document, unknown and
// duplicate keys are errors. Every problem is reported, joined, each as
// "NAME:LINE:COLUMN: problem", in the file's order: the worker, the key,
// and the valid keys or the range.
func ParseWorkers(data []byte, name string) ([]Worker, error) {
	if name == "" {
		name = "workers file"
	}
	if len(data) > MaxWorkersFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, MaxWorkersFileBytes)
	}
	ws, problems := readWorkers(data)
	if len(problems) == 0 {
		return ws, nil
	}
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = p.in(name)
	}
	return nil, errors.Join(errs...)
}

// ValidateWorkers reports every problem of a worker set, joined: missing or
// duplicate ids, addresses that are not literal IP:port, DP ranges that
// overflow, empty taints, bad metrics URLs and KV-event endpoints. It is
// the check of every worker set, with no file positions: a workers file
// (ParseWorkers) adds them, Kubernetes discovery has none.
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

// target is where a dispatched or routed request goes.
type target struct {
	worker  string
	address string // canonical IP:port
	rank    uint32
	// multiRank is true when the worker has more than one DP rank, so the
	// rank header must be sent upstream.
	multiRank bool
	// fallbacks are the next-best workers, named after address in the
	// routing header and metadata (the endpoint picker protocol's list).
	fallbacks []target
}

// endpoints is the routing value: the address, then the fallbacks',
// comma-separated.
func (t *target) endpoints() string {
	if len(t.fallbacks) == 0 {
		return t.address
	}
	var b strings.Builder
	b.WriteString(t.address)
	for _, f := range t.fallbacks {
		b.WriteByte(',')
		b.WriteString(f.address)
	}
	return b.String()
}

// workerSet is a validated, immutable worker set: what the scheduler sees
// and how to reach each worker.
type workerSet struct {
	sched []sched.Worker
	// kv is every worker's KV-event configuration.
	kv []kvevents.Endpoint
	// byID maps an id to its address and rank count.
	byID map[string]workerAddr
	// targets are the workers' engine metrics endpoints.
	targets []enginemetrics.Target
}

type workerAddr struct {
	address string
	ap      netip.AddrPort
	ranks   uint32
}

// newWorkerSet validates ws and builds the set. ws is not retained.
func newWorkerSet(ws []Worker) (*workerSet, error) {
	if err := ValidateWorkers(ws); err != nil {
		return nil, err
	}
	s := &workerSet{sched: make([]sched.Worker, len(ws)), byID: make(map[string]workerAddr, len(ws)),
		kv: make([]kvevents.Endpoint, len(ws))}
	for i, w := range ws {
		ap, _ := parseAddress(w.Address) // validated above
		s.sched[i] = sched.Worker{
			ID:                 w.ID,
			Model:              w.Model,
			Taints:             slices.Clone(w.Taints),
			DPSize:             w.DPSize,
			DPStart:            w.DPStartRank,
			MaxRunningRequests: w.MaxRunningRequests,
			MaxBatchedTokens:   w.MaxNumBatchedTokens,
		}
		s.byID[w.ID] = workerAddr{address: ap.String(), ap: ap, ranks: max(w.DPSize, 1)}
		u, _ := enginemetrics.ResolveURL(ap.String(), w.MetricsURL) // validated above
		s.targets = append(s.targets, enginemetrics.Target{Worker: w.ID, URL: u, DPStart: w.DPStartRank, DPSize: w.DPSize})
		s.kv[i] = kvevents.Endpoint{Worker: w.ID, Address: ap.Addr().String(),
			Endpoint: w.KVEventsEndpoint, Replay: w.KVEventsReplayEndpoint, DPStart: w.DPStartRank, DPSize: w.DPSize}
	}
	return s, nil
}

// target resolves a scheduler decision to an address. ok is false for a
// worker that is not in the set.
func (s *workerSet) target(worker string, rank uint32) (target, bool) {
	a, ok := s.byID[worker]
	if !ok {
		return target{}, false
	}
	return target{worker: worker, address: a.address, rank: rank, multiRank: a.ranks > 1}, true
}

// withFallbacks returns t with the scheduler's fallbacks that can take
// the same request unchanged: none when t needs a DP-rank header (another
// worker would get that rank too), and only single-rank workers at
// another address.
func (s *workerSet) withFallbacks(t target, fbs []sched.RankRef) target {
	if t.multiRank || len(fbs) == 0 {
		return t
	}
	for _, f := range fbs {
		ft, ok := s.target(f.Worker, f.Rank)
		if ok && !ft.multiRank && ft.address != t.address {
			t.fallbacks = append(t.fallbacks, ft)
		}
	}
	return t
}

// allowed returns the IDs of the workers the subset admits, in the set's
// order; none when it admits no worker of the set.
func (s *workerSet) allowed(sub *subset) []string {
	var ids []string
	for _, w := range s.sched {
		if sub.admits(s.byID[w.ID].ap) {
			ids = append(ids, w.ID)
		}
	}
	return ids
}
