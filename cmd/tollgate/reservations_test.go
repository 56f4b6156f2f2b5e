package main

import (
	"strings"
	"testing"
)

// A priority file that keeps every class but lowers nothing, and one
// whose shares add up to more than every slot.
const (
	tightPriority = `classes:
  interactive: {reserved_floor: 0, reserved_per_slot: 0.6, queue_size: 10, queue_timeout_secs: 1, starvation_threshold_secs: 1, can_preempt: true}
  default: {reserved_floor: 0, reserved_per_slot: 0.5, queue_size: 10, queue_timeout_secs: 1, starvation_threshold_secs: 1, can_preempt: false}
`
	twoSmallWorkers = "workers:\n  - {id: w1, address: 127.0.0.1:18001, max_running_requests: 64}\n  - {id: w2, address: 127.0.0.1:18002}\n"
)

// TestCheckConfig_ReservationsNameTheFilesAndTheFix: the reservations
// problem keeps SMG's text, then says which classes add up and from which
// file, which workers make the capacity, and what to change.
func TestCheckConfig_ReservationsNameTheFilesAndTheFix(t *testing.T) {
	workers := writeFile(t, "workers.yaml", twoSmallWorkers)
	tight := writeFile(t, "priority.yaml", tightPriority)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"built-in classes, two workers", []string{"--workers", workers},
			"sum of class reservations (173) exceeds capacity (128): system 32 (reserved_floor) + interactive 128 (reserved_floor) + default 13 (reserved_per_slot 0.1 × 128)" +
				" from the built-in class defaults (no --priority-scheduler-config) against 128 slots from " + workers + " (w1: 64, w2: 64 by default);" +
				" the classes need at least 178 slots: raise the workers' max_running_requests (or add workers)," +
				" or lower the classes' reserved_floor / reserved_per_slot in a --priority-scheduler-config file"},
		{"a priority file no capacity fits", []string{"--workers", workers, "--priority-scheduler-config", tight},
			"sum of class reservations (173) exceeds capacity (128): system 32 (reserved_floor) + interactive 77 (reserved_per_slot 0.6 × 128) + default 64 (reserved_per_slot 0.5 × 128)" +
				" from " + tight + " (classes it does not name keep the built-in defaults) against 128 slots from " + workers + " (w1: 64, w2: 64 by default);" +
				" no capacity up to 65535 slots fits these classes: lower the classes' reserved_floor / reserved_per_slot in " + tight},
		{"no workers", []string{"--max-concurrent-requests", "50"},
			"sum of class reservations (87) exceeds capacity (50): system 32 (reserved_floor) + interactive 50 (reserved_floor 128, at most the capacity) + default 5 (reserved_per_slot 0.1 × 50)" +
				" from the built-in class defaults (no --priority-scheduler-config) against 50 slots of --max-concurrent-requests, the capacity while no worker is known;" +
				" the classes need at least 178 slots: raise --max-concurrent-requests or list workers with --workers," +
				" or lower the classes' reserved_floor / reserved_per_slot in a --priority-scheduler-config file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, _ := runArgs(t, append([]string{"check-config", "--priority-scheduler-enabled"}, tt.args...)...)
			if code != 1 || !strings.Contains(out, "problem: "+tt.want+"\n") {
				t.Fatalf("code %d, want 1 and the problem\n%s\noutput:\n%s", code, tt.want, out)
			}
		})
	}
}

// TestServe_ReservationsNameTheFilesAndTheFix: serve refuses the same
// configuration with the same explanation.
func TestServe_ReservationsNameTheFilesAndTheFix(t *testing.T) {
	workers := writeFile(t, "workers.yaml", twoSmallWorkers)
	code, _, errs := runArgs(t, "serve", "--workers", workers, "--priority-scheduler-enabled", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errs, "sum of class reservations (173) exceeds capacity (128): system 32") ||
		!strings.Contains(errs, "against 128 slots from "+workers+" (w1: 64, w2: 64 by default)") {
		t.Fatalf("code %d, stderr:\n%s", code, errs)
	}
}

// TestCheckConfig_WorkersFileProblems: check-config lists every problem of
// the workers file, one each, under the file's path, line and column.
func TestCheckConfig_WorkersFileProblems(t *testing.T) {
	workers := writeFile(t, "workers.yaml", `workers:
  - id: w1
    address: 127.0.0.1:18001
    max_running_requests: abc
  - id: w1
    address: worker.local:8000
    slots: 8
`)
	code, out, _ := runArgs(t, "check-config", "--workers", workers)
	want := []string{
		"problem: " + workers + `:4:27: worker "w1": max_running_requests: invalid type: string "abc", expected an integer in [1, 4294967295]`,
		"problem: " + workers + `:5:9: worker "w1": duplicate id (also worker 0, line 2)`,
		"problem: " + workers + `:6:14: worker "w1": address "worker.local:8000" is not a literal IP:port (hostnames are not resolved; Envoy's ORIGINAL_DST cluster needs an IP)`,
		"problem: " + workers + `:7:5: worker "w1": unknown field "slots", expected one of id, address, max_running_requests, max_num_batched_tokens, dp_size, dp_start_rank, taints, model, role, metrics_url, kv_events_endpoint, kv_events_replay_endpoint`,
	}
	if code != 1 || !strings.Contains(out, strings.Join(want, "\n")+"\n") {
		t.Fatalf("code %d, want 1 and\n%s\noutput:\n%s", code, strings.Join(want, "\n"), out)
	}
}
