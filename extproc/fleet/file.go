package fleet

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/sched/policy"
)

// MaxWorkersFileBytes bounds the size of a workers file read.
const MaxWorkersFileBytes = 4 << 20

// LoadWorkersFile reads and validates a workers file:
//
//	workers:
//	- {id: w0, address: "10.0.0.7:8000", max_running_requests: 64, dp_size: 2, model: llama}
//	- {id: p0, address: "10.0.0.8:8000", role: prefill}
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
		return nil, fmt.Errorf("fleet: workers file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxWorkersFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fleet: workers file: %w", err)
	}
	if len(data) > MaxWorkersFileBytes {
		return nil, fmt.Errorf("fleet: workers file %s is larger than %d bytes", path, MaxWorkersFileBytes)
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

// This file reads the workers file node by node with the policy files'
// reader (policy.YAMLReader), so that every problem carries its line and
// column, and lists every problem of the file, not only the first.

// workerKeys are the keys of a worker entry, in Worker's order; each is
// the json name of a Worker field (TestWorkerKeys_MatchTheJSONNames).
var workerKeys = []string{
	"id", "address", "max_running_requests", "max_num_batched_tokens", "dp_size", "dp_start_rank",
	"taints", "model", "role", "metrics_url", "kv_events_endpoint", "kv_events_replay_endpoint",
}

// zeroMeansDefault lists the worker keys whose zero value selects a default
// in Worker; written out as 0 they would silently mean something else.
var zeroMeansDefault = map[string]string{
	"max_running_requests":   "omit it for the default of 64 slots, or give a positive slot count",
	"max_num_batched_tokens": "omit it for the default of 10000000, or give a positive count",
	"dp_size":                "omit it for one rank, or give a positive rank count",
}

// errEmptyWorkers is the answer to a document that lists no workers list at
// all: an empty file is what a truncation or a write in progress looks
// like, so it never empties the fleet.
var errEmptyWorkers = errors.New("the workers file is empty or null; write \"workers: []\" for no workers, and replace the file atomically (write a new file, then rename it over the old one)")

// fileProblem is one problem of a workers file: where it is (line and
// column from 1; 0 when unknown) and what is wrong.
type fileProblem struct {
	line, col int
	msg       string
}

// in returns the problem as an error naming the file: "NAME:LINE:COLUMN:
// problem", without the parts that are unknown.
func (p fileProblem) in(name string) error {
	switch {
	case p.line > 0 && p.col > 0:
		return fmt.Errorf("%s:%d:%d: %s", name, p.line, p.col, p.msg)
	case p.line > 0:
		return fmt.Errorf("%s:%d: %s", name, p.line, p.msg)
	}
	return fmt.Errorf("%s: %s", name, p.msg)
}

// problemAt returns the problem msg at n's position.
func problemAt(n *yaml.Node, msg string) fileProblem {
	return fileProblem{line: n.Line, col: n.Column, msg: msg}
}

// decodeProblem turns a reader's error into a problem; prefix (the worker
// and key it is about) goes before its message.
func decodeProblem(prefix string, err error) fileProblem {
	if de, ok := errors.AsType[*policy.DecodeError](err); ok {
		return fileProblem{line: de.Line, col: de.Column, msg: prefix + de.Msg}
	}
	return fileProblem{msg: prefix + err.Error()}
}

// workerNodes is where a worker entry and its keys are in the file.
type workerNodes struct {
	item *yaml.Node
	// keys holds each key's value node (its key node when the value is
	// null).
	keys map[string]*yaml.Node
	// skip holds the keys that failed to decode: the checks of
	// checkWorkers would repeat their problem in other words. All is set
	// when the entry is not a mapping.
	skip map[string]bool
	all  bool
}

// at returns the node a problem about key points to: the key's value, or
// the entry when the key is absent.
func (n *workerNodes) at(key string) *yaml.Node {
	if v, ok := n.keys[key]; ok {
		return v
	}
	return n.item
}

// readWorkers reads and checks a workers file. It returns the workers
// when there is no problem, and otherwise every problem, in the file's
// order.
func readWorkers(data []byte) ([]Worker, []fileProblem) {
	r, root, err := policy.ReadYAML(data)
	if err != nil {
		return nil, []fileProblem{decodeProblem("", err)}
	}
	if root == nil {
		return nil, []fileProblem{{msg: errEmptyWorkers.Error()}}
	}
	var problems []fileProblem
	fields, errs := r.Object(root, []string{"workers"})
	for _, err := range errs {
		problems = append(problems, decodeProblem("", err))
	}
	var list *yaml.Node
	found := false
	for _, f := range fields {
		found = true
		if f.Value == nil {
			problems = append(problems, problemAt(f.KeyNode, `workers is null; write "workers: []" for no workers`))
		}
		list = f.Value
	}
	if !found && root.Kind == yaml.MappingNode {
		problems = append(problems, problemAt(root, `the workers file has no workers key; write "workers: []" for no workers`))
	}
	if list == nil {
		return nil, problems
	}
	items, err := r.Sequence(list)
	if err != nil {
		return nil, append(problems, decodeProblem("workers: ", err))
	}
	ws := make([]Worker, len(items))
	nodes := make([]workerNodes, len(items))
	for i, item := range items {
		problems = append(problems, readWorker(r, i, item, &ws[i], &nodes[i])...)
	}
	at := func(j int) string { return fmt.Sprintf(", line %d", nodes[j].at("id").Line) }
	checkWorkers(ws, at, func(i int, key, msg string) {
		if n := &nodes[i]; !n.all && !n.skip[key] {
			problems = append(problems, problemAt(n.at(key), workerName(ws[i].ID, i)+": "+msg))
		}
	})
	if len(problems) > 0 {
		slices.SortStableFunc(problems, func(a, b fileProblem) int {
			return cmp.Or(cmp.Compare(a.line, b.line), cmp.Compare(a.col, b.col))
		})
		return nil, problems
	}
	return ws, nil
}

// readWorker decodes entry i of the workers list into w and notes where
// its keys are in nodes. It returns the entry's problems, each naming the
// worker and the key.
func readWorker(r *policy.YAMLReader, i int, item *yaml.Node, w *Worker, nodes *workerNodes) []fileProblem {
	*nodes = workerNodes{item: item, keys: map[string]*yaml.Node{}, skip: map[string]bool{}}
	fields, errs := r.Object(item, workerKeys)
	target := item
	if target.Kind == yaml.AliasNode && target.Alias != nil {
		target = target.Alias
	}
	// An item that is no mapping is not an entry at all: its type is its
	// only problem.
	nodes.all = target.Kind == yaml.SequenceNode || (target.Kind == yaml.ScalarNode && target.ShortTag() != "!!null")
	type keyProblem struct {
		key string
		err error
	}
	var found []keyProblem
	for _, err := range errs {
		found = append(found, keyProblem{err: err})
	}
	for _, f := range fields {
		nodes.keys[f.Key] = cmp.Or(f.Value, f.KeyNode)
		if f.Value == nil {
			continue // null reads as absent
		}
		for _, err := range readWorkerKey(r, f.Key, f.Value, w) {
			found = append(found, keyProblem{key: f.Key, err: err})
			nodes.skip[f.Key] = true
		}
	}
	name := workerName(w.ID, i) + ": "
	problems := make([]fileProblem, len(found))
	for j, p := range found {
		prefix := name
		if p.key != "" {
			prefix += p.key + ": "
		}
		problems[j] = decodeProblem(prefix, p.err)
	}
	return problems
}

// readWorkerKey decodes one key of a worker entry into w.
func readWorkerKey(r *policy.YAMLReader, key string, n *yaml.Node, w *Worker) []error {
	var err error
	switch key {
	case "id":
		w.ID, err = r.String(n)
	case "address":
		w.Address, err = r.String(n)
	case "max_running_requests":
		var u uint64
		u, err = readCount(r, key, n, math.MaxUint32)
		w.MaxRunningRequests = uint32(u)
	case "max_num_batched_tokens":
		w.MaxNumBatchedTokens, err = readCount(r, key, n, math.MaxUint64)
	case "dp_size":
		var u uint64
		u, err = readCount(r, key, n, math.MaxUint32)
		w.DPSize = uint32(u)
	case "dp_start_rank":
		var u uint64
		u, err = r.Uint(n, 0, math.MaxUint32)
		w.DPStartRank = uint32(u)
	case "taints":
		var errs []error
		w.Taints, errs = readStrings(r, n)
		return errs
	case "model":
		w.Model, err = r.String(n)
	case "role":
		w.Role, err = r.String(n)
	case "metrics_url":
		w.MetricsURL, err = r.String(n)
	case "kv_events_endpoint":
		w.KVEventsEndpoint, err = r.String(n)
	case "kv_events_replay_endpoint":
		w.KVEventsReplayEndpoint, err = r.String(n)
	default:
		err = fmt.Errorf("no decoder for key %q", key) // workerKeys and this switch disagree
	}
	if err != nil {
		return []error{err}
	}
	return nil
}

// readCount decodes a count in [1, hi]; an explicit 0, which would quietly
// select a default, is a problem that says how to get the default.
func readCount(r *policy.YAMLReader, key string, n *yaml.Node, hi uint64) (uint64, error) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" && isZeroInt(n.Value) {
		return 0, &policy.DecodeError{Line: n.Line, Column: n.Column, Msg: "0 is not a valid value; " + zeroMeansDefault[key]}
	}
	return r.Uint(n, 1, hi)
}

// readStrings decodes a list of strings, with every item's problem.
func readStrings(r *policy.YAMLReader, n *yaml.Node) ([]string, []error) {
	items, err := r.Sequence(n)
	if err != nil {
		return nil, []error{err}
	}
	out := make([]string, 0, len(items))
	var errs []error
	for _, item := range items {
		s, err := r.String(item)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, s)
	}
	return out, errs
}

func isZeroInt(s string) bool {
	n, err := strconv.ParseInt(s, 0, 64)
	return err == nil && n == 0
}
