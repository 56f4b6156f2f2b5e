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

// gatewaysChart draws the two-gateway arm.
func gatewaysChart(a *premiumArm) Chart {
	c := premiumChart([]*premiumArm{a})
	c.Title = "Premium vs regular through two gateways (3:1 ingress), one tollgate: cumulative completions"
	return c
}
