package demo

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
)

// runGateways runs the weighted premium/regular arm (premium_4x.yaml)
// with its requests arriving through two simulated Envoys, 3:1.
func runGateways(ctx context.Context, cfg premiumConfig) (*premiumArm, error) {
	cfg.twoGateways = true
	return runPremiumArm(ctx, cfg, filepath.Join(cfg.examples, filePremium4x))
}

// printGateways prints the two-gateway table.
func printGateways(w io.Writer, a *premiumArm) {
	fmt.Fprintf(w, "\nPremium/regular through two gateways: first %d of %d client completions\n\n", a.PerClass, 2*a.PerClass)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "arm\tquanta\tingress A:B\tpremium:regular\tideal\tper-replica queues (Dynamo #15187)\tregular left\tworker started\toutcomes\tnon-200\ttime")
	fmt.Fprintf(tw, "%s, 2 gateways\t%d:%d\t%d:%d\t%d:%d\t%s\t163:162\t%d\t%d:%d\t%d\t%d\t%.1fs\n",
		a.File, a.Quanta[0], a.Quanta[1], a.Ingress[0], a.Ingress[1], a.First[0], a.First[1], idealSplit(a),
		a.RegularLeft, a.WorkerFirst[0], a.WorkerFirst[1], a.Outcomes, a.Non200, a.Elapsed.Seconds())
	_ = tw.Flush()
	fmt.Fprintf(w, "\n  Both gateways talk to the one tollgate, which queues and arbitrates for both: the 4:1 split holds.\n")
}

// gatewaysChart draws the two-gateway arm: completions per class, then
// per gateway and class.
func gatewaysChart(a *premiumArm) Chart {
	c := Chart{
		Title: "One scheduler for two gateways: premium vs regular at 3:1 ingress",
		Subtitle: fmt.Sprintf("%s (quanta %d:%d): %d premium and %d regular requests through two simulated Envoys, "+
			"gateway A getting %d and gateway B %d (every fourth request of each class). "+
			"Both are clients of the one tollgate, which queues and arbitrates for both.",
			a.File, a.Quanta[0], a.Quanta[1], a.PerClass, a.PerClass, a.Ingress[0], a.Ingress[1]),
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
