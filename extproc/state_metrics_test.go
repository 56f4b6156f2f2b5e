package extproc

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestStateMetrics_WorkersAndLeadership(t *testing.T) {
	s, err := New(Config{}, oneWorker)
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, s)
	expect := func(workers, leader, acquisitions string) {
		t.Helper()
		want := `
# HELP tollgate_workers Workers in the routing set (ready endpoints from discovery, or the workers file).
# TYPE tollgate_workers gauge
tollgate_workers ` + workers + `
# HELP tollgate_leader 1 while this replica serves ext_proc (it holds the leader lease, or runs without leader election), 0 while it stands by.
# TYPE tollgate_leader gauge
tollgate_leader ` + leader + `
# HELP tollgate_leader_acquisitions_total Times this replica went from standing by to leading.
# TYPE tollgate_leader_acquisitions_total counter
tollgate_leader_acquisitions_total ` + acquisitions + `
`
		if err := testutil.GatherAndCompare(s.metrics.reg, strings.NewReader(want),
			"tollgate_workers", "tollgate_leader", "tollgate_leader_acquisitions_total"); err != nil {
			t.Error(err)
		}
	}
	expect("1", "1", "0")
	ctx := t.Context()
	for _, active := range []bool{false, false, true, true, false, true} {
		if err := s.SetActive(ctx, active); err != nil {
			t.Fatal(err)
		}
	}
	expect("1", "1", "2") // standby→leading twice; repeated calls change nothing
	if err := s.SetActive(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := s.SetWorkers(nil); err != nil {
		t.Fatal(err)
	}
	expect("0", "0", "2")
}
