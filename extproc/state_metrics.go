package extproc

import "github.com/prometheus/client_golang/prometheus"

// stateCollector exposes the server's own state at scrape time: the
// workers it routes to and its leadership. The alerting rules read these
// (no ready worker, leader flapping), so they are exported even when the
// dispatcher is not running yet.
type stateCollector struct {
	s                                   *Server
	workers, leader, leaderAcquisitions *prometheus.Desc
}

func newStateCollector(s *Server) *stateCollector {
	return &stateCollector{
		s:                  s,
		workers:            prometheus.NewDesc("tollgate_workers", "Workers in the routing set (ready endpoints from discovery, or the workers file).", nil, nil),
		leader:             prometheus.NewDesc("tollgate_leader", "1 while this replica serves ext_proc (it holds the leader lease, or runs without leader election), 0 while it stands by.", nil, nil),
		leaderAcquisitions: prometheus.NewDesc("tollgate_leader_acquisitions_total", "Times this replica went from standing by to leading.", nil, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.workers
	ch <- c.leader
	ch <- c.leaderAcquisitions
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.s.disp.serving()
	leader := 1.0
	if v.standby {
		leader = 0
	}
	ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(v.workers))
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(c.leaderAcquisitions, prometheus.CounterValue, float64(v.acquisitions))
}
