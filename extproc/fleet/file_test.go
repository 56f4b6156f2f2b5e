package fleet

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestParseWorkers_ProblemsNameFileLineAndColumn: each problem of a
// workers file reads "FILE:LINE:COLUMN: worker: key: what is wrong", with
// the valid keys or the range, as the policy files' problems do.
func TestParseWorkers_ProblemsNameFileLineAndColumn(t *testing.T) {
	const lim = "expected one of id, address, max_running_requests, max_num_batched_tokens, dp_size, dp_start_rank, taints, model, role, metrics_url, kv_events_endpoint, kv_events_replay_endpoint"
	tests := []struct {
		name, yaml, want string
	}{
		{"not an integer", "workers:\n- id: w0\n  address: 10.0.0.1:80\n  max_running_requests: abc\n",
			`w.yaml:4:25: worker "w0": max_running_requests: invalid type: string "abc", expected an integer in [1, 4294967295]`},
		{"quoted integer", "workers:\n- {id: w0, address: 10.0.0.1:80, max_running_requests: \"8\"}\n",
			`w.yaml:2:56: worker "w0": max_running_requests: invalid type: string "8", expected an integer in [1, 4294967295]`},
		{"float", "workers:\n- {id: w0, address: 10.0.0.1:80, max_running_requests: 1.5}\n",
			`w.yaml:2:56: worker "w0": max_running_requests: invalid type: floating point 1.5, expected an integer in [1, 4294967295]`},
		{"too large", "workers:\n- {id: w0, address: 10.0.0.1:80, max_running_requests: 4294967296}\n",
			`w.yaml:2:56: worker "w0": max_running_requests: invalid value: integer 4294967296, expected an integer in [1, 4294967295]`},
		{"negative", "workers:\n- {id: w0, address: 10.0.0.1:80, dp_start_rank: -1}\n",
			`w.yaml:2:49: worker "w0": dp_start_rank: invalid value: integer -1, expected an integer in [0, 4294967295]`},
		{"explicit zero", "workers:\n- {id: w0, address: 10.0.0.1:80, max_num_batched_tokens: 0}\n",
			`w.yaml:2:58: worker "w0": max_num_batched_tokens: 0 is not a valid value; omit it for the default of 10000000, or give a positive count`},
		{"unknown key", "workers:\n- id: w0\n  address: 10.0.0.1:80\n  gpus: 8\n",
			`w.yaml:4:3: worker "w0": unknown field "gpus", ` + lim},
		{"unknown top-level key", "workers: []\nfleet: a\n",
			`w.yaml:2:1: unknown field "fleet", expected one of workers`},
		{"duplicate key", "workers:\n- id: w0\n  address: 10.0.0.1:80\n  id: w1\n",
			`w.yaml:4:3: worker "w0": duplicate key "id"`},
		{"duplicate id", "workers:\n- id: w0\n  address: 10.0.0.1:80\n- id: w0\n  address: 10.0.0.2:80\n",
			`w.yaml:4:7: worker "w0": duplicate id (also worker 0, line 2)`},
		{"hostname", "workers:\n- id: gpu-a\n  address: gpu-a.svc:8000\n",
			`w.yaml:3:12: worker "gpu-a": address "gpu-a.svc:8000" is not a literal IP:port (hostnames are not resolved; Envoy's ORIGINAL_DST cluster needs an IP)`},
		{"port zero", "workers:\n- {id: w0, address: 10.0.0.1:0}\n",
			`w.yaml:2:21: worker "w0": address "10.0.0.1:0" has port 0`},
		{"no address", "workers:\n- id: w0\n  model: m\n",
			`w.yaml:2:3: worker "w0": address is required`},
		{"id not a string", "workers:\n- {id: [a], address: 10.0.0.1:80}\n",
			`w.yaml:2:8: worker 0: id: invalid type: sequence, expected a string`},
		{"taint not a string", "workers:\n- {id: w0, address: 10.0.0.1:80, taints: [a, {b: c}]}\n",
			`w.yaml:2:46: worker "w0": taints: invalid type: map, expected a string`},
		{"empty taint", "workers:\n- {id: w0, address: 10.0.0.1:80, taints: [\"\"]}\n",
			`w.yaml:2:42: worker "w0": taints contain an empty value`},
		{"unknown role", "workers:\n- id: w0\n  address: 10.0.0.1:80\n  role: prefill-decode\n",
			`w.yaml:4:9: worker "w0": role "prefill-decode" is not one of both, prefill, decode`},
		{"role not a string", "workers:\n- {id: w0, address: 10.0.0.1:80, role: [prefill]}\n",
			`w.yaml:2:40: worker "w0": role: invalid type: sequence, expected a string`},
		{"dp_size too large", "workers:\n- {id: w0, address: 10.0.0.1:80, dp_size: 16385}\n",
			`w.yaml:2:43: worker "w0": dp_size 16385 exceeds 16384`},
		{"kv endpoint", "workers:\n- {id: w0, address: 10.0.0.1:80, kv_events_endpoint: 10.0.0.1:5557}\n",
			`w.yaml:2:54: worker "w0": kv_events_endpoint: "10.0.0.1:5557": want tcp://HOST:PORT or ipc://PATH`},
		{"entry not a map", "workers:\n- w0\n",
			`w.yaml:2:3: worker 0: invalid type: string "w0", expected a map`},
		{"workers not a list", "workers: {id: w0}\n",
			`w.yaml:1:10: workers: invalid type: map, expected a sequence`},
		{"workers null", "workers: ~\n",
			`w.yaml:1:1: workers is null; write "workers: []" for no workers`},
		{"no workers key", "{}\n",
			`w.yaml:1:1: the workers file has no workers key; write "workers: []" for no workers`},
		{"two documents", "workers: []\n---\nworkers: []\n",
			`w.yaml:2:1: more than one YAML document is not supported`},
		{"syntax", "workers:\n- {id: w0\n",
			`w.yaml:1: did not find expected ',' or '}'`},
		{"empty", "",
			`w.yaml: the workers file is empty or null; write "workers: []" for no workers, and replace the file atomically (write a new file, then rename it over the old one)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseWorkers([]byte(tt.yaml), "w.yaml")
			if err == nil {
				t.Fatal("accepted")
			}
			if err.Error() != tt.want {
				t.Errorf("error\n %s\nwant\n %s", err, tt.want)
			}
		})
	}
}

// TestLoadWorkersFile_EveryProblemInOneRun: one read lists every problem
// of the file, each under the file's path, in the file's order; a key
// that failed to decode is not reported again by the checks.
func TestLoadWorkersFile_EveryProblemInOneRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "workers.yaml")
	const doc = `workers:
  - id: w1
    address: 10.0.0.1:8000
    max_running_requests: abc
    gpus: 8
  - id: w1
    address: worker-2.local:8000
    dp_size: 0
  - model: llama
    max_num_batched_tokens: -5
  - id: w4
    address: [10.0.0.4, 8000]
    kv_events_replay_endpoint: tcp://10.0.0.4:5558
`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadWorkersFile(path)
	if err == nil {
		t.Fatal("accepted")
	}
	want := []string{
		`:4:27: worker "w1": max_running_requests: invalid type: string "abc", expected an integer in [1, 4294967295]`,
		`:5:5: worker "w1": unknown field "gpus", expected one of id, address, max_running_requests, max_num_batched_tokens, dp_size, dp_start_rank, taints, model, role, metrics_url, kv_events_endpoint, kv_events_replay_endpoint`,
		`:6:9: worker "w1": duplicate id (also worker 0, line 2)`,
		`:7:14: worker "w1": address "worker-2.local:8000" is not a literal IP:port (hostnames are not resolved; Envoy's ORIGINAL_DST cluster needs an IP)`,
		`:8:14: worker "w1": dp_size: 0 is not a valid value; omit it for one rank, or give a positive rank count`,
		`:9:5: worker 2: id is required`,
		`:9:5: worker 2: address is required`,
		`:10:29: worker 2: max_num_batched_tokens: invalid value: integer -5, expected an integer in [1, 18446744073709551615]`,
		`:12:14: worker "w4": address: invalid type: sequence, expected a string`,
		`:13:32: worker "w4": kv_events_replay_endpoint without kv_events_endpoint`,
	}
	for i := range want {
		want[i] = path + want[i]
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("problems\n %s\nwant\n %s", strings.Join(got, "\n "), strings.Join(want, "\n "))
	}
}

// TestValidateWorkers_WithoutPositions: the same checks apply to workers
// that come from no file (Kubernetes discovery), without positions.
func TestValidateWorkers_WithoutPositions(t *testing.T) {
	err := ValidateWorkers([]Worker{
		{ID: "a", Address: "10.0.0.1:80"},
		{ID: "a", Address: "host:80"},
		{Address: "10.0.0.2:80", KVEventsReplayEndpoint: "tcp://10.0.0.2:5558"},
		{ID: "d", Address: "10.0.0.3:80", Role: "Decode"},
	})
	want := `worker "a": duplicate id (also worker 0)
worker "a": address "host:80" is not a literal IP:port (hostnames are not resolved; Envoy's ORIGINAL_DST cluster needs an IP)
worker 2: id is required
worker 2: kv_events_replay_endpoint without kv_events_endpoint
worker "d": role "Decode" is not one of both, prefill, decode`
	if err == nil || err.Error() != want {
		t.Fatalf("error\n%v\nwant\n%s", err, want)
	}
}

// TestWorkerKeys_MatchTheJSONNames: the workers file's keys are Worker's
// json names, in order, and each decodes into its field.
func TestWorkerKeys_MatchTheJSONNames(t *testing.T) {
	typ := reflect.TypeFor[Worker]()
	var names []string
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		names = append(names, name)
	}
	if !slices.Equal(names, workerKeys) {
		t.Fatalf("workerKeys %v, Worker's json names %v", workerKeys, names)
	}
	ws, err := ParseWorkers([]byte(`workers:
- id: w0
  address: 10.0.0.7:8000
  max_running_requests: 1
  max_num_batched_tokens: 2
  dp_size: 3
  dp_start_rank: 4
  taints: [t]
  model: m
  role: prefill
  metrics_url: /m
  kv_events_endpoint: tcp://10.0.0.7:5557
  kv_events_replay_endpoint: tcp://10.0.0.7:5558
`), "")
	if err != nil {
		t.Fatal(err)
	}
	v := reflect.ValueOf(ws[0])
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("key %s did not set %s", workerKeys[i], typ.Field(i).Name)
		}
	}
}

// TestParseWorkers_NullReadsAsAbsent: a null value is an absent key (its
// default), as before; an integer id is its text.
func TestParseWorkers_NullReadsAsAbsent(t *testing.T) {
	ws, err := ParseWorkers([]byte("workers:\n- {id: 7, address: 10.0.0.1:80, max_running_requests: null, model: ~, taints: null}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if w := ws[0]; w.ID != "7" || w.MaxRunningRequests != 0 || w.Model != "" || w.Taints != nil {
		t.Fatalf("%+v", w)
	}
}
