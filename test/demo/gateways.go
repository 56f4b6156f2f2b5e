package demo

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
)

// gatewaysScheduler is the gateway whose tollgate replica is elected the
// scheduler: B's, so that gateway A's three quarters of the requests reach
// it over the peer channel.
const gatewaysScheduler = 1

// gatewayNames name the two gateways by index.
var gatewayNames = []string{"A", "B"}

// runGateways runs the weighted premium/regular arm (premium_4x.yaml)
// with its requests arriving through two simulated Envoys, 3:1, each in
// front of its own tollgate replica; one replica schedules for both.
func runGateways(ctx context.Context, cfg premiumConfig) (*premiumArm, error) {
	cfg.twoGateways = true
	return runPremiumArm(ctx, cfg, filepath.Join(cfg.examples, filePremium4x))
}

// printGateways prints the two-gateway table.
func printGateways(w io.Writer, a *premiumArm) {
	fmt.Fprintf(w, "\nPremium/regular through two gateways, two tollgate replicas, one scheduler: first %d of %d client completions\n\n", a.PerClass, 2*a.PerClass)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "arm\tquanta\tingress A:B\tstreams A:B\tpremium:regular\tideal\tper-replica queues (Dynamo #15187)\tA's\tB's\tregular left\tworker started\toutcomes\tnon-200\ttime")
	g := a.GatewayFirst
	fmt.Fprintf(tw, "%s, 2 replicas\t%d:%d\t%d:%d\t%d:%d\t%d:%d\t%s\t163:162\t%d:%d\t%d:%d\t%d\t%d:%d\t%d\t%d\t%.1fs\n",
		a.File, a.Quanta[0], a.Quanta[1], a.Ingress[0], a.Ingress[1], a.Streams[0], a.Streams[1], a.First[0], a.First[1], idealSplit(a),
		g[0][0], g[0][1], g[1][0], g[1][1], a.RegularLeft, a.WorkerFirst[0], a.WorkerFirst[1], a.Outcomes, a.Non200, a.Elapsed.Seconds())
	_ = tw.Flush()
	front := 1 - a.Scheduler
	fmt.Fprintf(w, "\n  Gateway %s talks to %s, a front that hands its requests to the scheduler over the peer channel; gateway %s\n",
		gatewayNames[front], replicaID(front), gatewayNames[a.Scheduler])
	fmt.Fprintf(w, "  talks to %s, the elected scheduler, which queues and arbitrates for both: the 4:1 split holds.\n", replicaID(a.Scheduler))
	fmt.Fprintf(w, "  streams: ext_proc streams each replica ended OK (tollgate_extproc_streams_total). A's and B's: each\n")
	fmt.Fprintf(w, "  gateway's premium:regular among the first %d completions.\n", a.PerClass)
}

// gatewaysChart draws the two-gateway arm: completions per class, then
// per gateway and class.
func gatewaysChart(a *premiumArm) Chart {
	c := Chart{
		Title: "Two gateways, two tollgate replicas, one scheduler: premium vs regular at 3:1 ingress",
		Subtitle: fmt.Sprintf("%s (quanta %d:%d): %d premium and %d regular requests through two simulated Envoys, "+
			"gateway A getting %d and gateway B %d (every fourth request of each class). Each gateway talks to its own "+
			"tollgate replica; %s, elected, schedules for both, and %s hands it its requests over the peer channel.",
			a.File, a.Quanta[0], a.Quanta[1], a.PerClass, a.PerClass, a.Ingress[0], a.Ingress[1],
			replicaID(a.Scheduler), replicaID(1-a.Scheduler)),
		Panels: []Panel{premiumPanel(a, fmt.Sprintf("both gateways: first %d completions %d:%d (ideal %s)",
			a.PerClass, a.First[0], a.First[1], idealSplit(a)), a.Series)},
	}
	if len(a.GatewaySeries) > 0 {
		g := a.GatewayFirst
		c.Panels = append(c.Panels, premiumPanel(a, fmt.Sprintf("each gateway: of the first %d completions, A's %d:%d and B's %d:%d",
			a.PerClass, g[0][0], g[0][1], g[1][0], g[1][1]), a.GatewaySeries))
	}
	return c
}
