package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tollgate/tollgate/sched/policy"
	"github.com/tollgate/tollgate/test/envoysim"
	"github.com/tollgate/tollgate/test/mockworker"
)

// The premium/regular workload of Dynamo's regression test
// (tests/router/test_policy_class.py).
const (
	// upstreamPerClass is the number of requests per class upstream sends.
	upstreamPerClass = 320
	// premiumPromptTokens is every request's prompt length: all uncached.
	premiumPromptTokens = 512
	// premiumSeqs is the worker's max_num_seqs and max_running_requests.
	premiumSeqs = 4
	// premiumBatchedTokens is the worker's max_num_batched_tokens.
	premiumBatchedTokens = 8192
	// premiumPrefillRate makes one 512-token prefill take 20 ms at speed 1,
	// so one arm takes a few seconds and each prefill is long next to the
	// request path through the simulated Envoy and tollgate.
	premiumPrefillRate = premiumPromptTokens / 0.020
)

// premiumClasses are the two policy families, in class-index order (the
// index is also the token id offset and the chart series).
var premiumClasses = []string{"premium", "regular"}

// premiumArm is the result of one arm of the premium/regular experiment.
type premiumArm struct {
	// File is the router policy file the arm ran with.
	File string
	// Quanta are the premium and regular quanta read from File.
	Quanta [2]uint64
	// PerClass is the number of requests per class.
	PerClass int
	// First counts premium and regular among the first PerClass
	// completions the client saw.
	First [2]int
	// RegularLeft is the number of regular requests not yet complete when
	// the client saw premium's last completion.
	RegularLeft int
	// PremiumDone is when the client saw premium's last completion.
	PremiumDone time.Duration
	// Outcomes counts every finished request; Non200 those not answered
	// 200 with a complete body.
	Outcomes, Non200 int
	// WorkerFirst counts premium and regular among the first PerClass
	// sequences the worker started: the scheduler's dispatch order seen
	// from the other side.
	WorkerFirst [2]int
	// Elapsed is the arm's duration, from the start gate to the last
	// completion.
	Elapsed time.Duration
	// Ingress counts the requests sent through gateway A and B (all
	// through A with one gateway); GatewayFirst counts premium and regular
	// of each gateway among the first PerClass completions.
	Ingress      [2]int
	GatewayFirst [2][2]int
	// With two gateways, each talks to its own tollgate replica: Scheduler
	// is the gateway whose replica was elected the scheduler, and Streams
	// the ext_proc streams each replica ended OK
	// (tollgate_extproc_streams_total), its gateway's ingress as the server
	// counted it.
	Scheduler int
	Streams   [2]int
	// Series are the cumulative completions per class over time;
	// GatewaySeries, with two gateways, per gateway and class (premium
	// through A, regular through A, then through B).
	Series, GatewaySeries []Series
}

// premiumConfig configures a premium run.
type premiumConfig struct {
	perClass int
	speed    float64
	seed     uint64
	examples string
	stdout   io.Writer
	terminal bool
	log      *slog.Logger
	// twoGateways sends the requests through two simulated Envoys, each
	// in front of its own tollgate replica (replica mode, gateway B's
	// replica the scheduler), gateway B getting every fourth request of
	// each class (3:1 ingress); false means one Envoy and one tollgate.
	twoGateways bool
}

// runPremium runs the equal-share arm, then the weighted arm.
func runPremium(ctx context.Context, cfg premiumConfig) ([]*premiumArm, error) {
	var arms []*premiumArm
	for _, f := range []string{fileEqualShare, filePremium4x} {
		arm, err := runPremiumArm(ctx, cfg, filepath.Join(cfg.examples, f))
		if err != nil {
			return nil, err
		}
		arms = append(arms, arm)
	}
	return arms, nil
}

// runPremiumArm runs the workload once against a fresh stack configured
// with the router policy file at path.
func runPremiumArm(ctx context.Context, cfg premiumConfig, path string) (*premiumArm, error) {
	quanta, err := premiumQuanta(path)
	if err != nil {
		return nil, err
	}
	arm := &premiumArm{File: filepath.Base(path), PerClass: cfg.perClass, Quanta: quanta}

	spec := serverSpec{routerPolicy: path, seed: cfg.seed}
	var st *stack
	if cfg.twoGateways {
		arm.Scheduler = gatewaysScheduler
		st, err = startReplicaStack(ctx, spec, premiumWorker, cfg.speed, cfg.log, 2, gatewaysScheduler, 0)
	} else {
		st, err = startStack(ctx, spec, premiumWorker, cfg.speed, cfg.log)
	}
	if err != nil {
		return nil, err
	}
	defer st.close()
	sims := []*envoysim.Sim{st.sim}
	if cfg.twoGateways {
		sims = []*envoysim.Sim{st.replicas.reps[0].sim, st.replicas.reps[1].sim}
	}

	total := 2 * cfg.perClass
	specs := make([]*reqSpec, 0, total)
	for i := range cfg.perClass {
		// Even indexes send premium first, odd ones regular first.
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		for _, c := range order {
			specs = append(specs, &reqSpec{
				class:     c,
				id:        fmt.Sprintf("policy-class-%s-%04d", premiumClasses[c], i),
				header:    http.Header{"X-Dynamo-Meta-Policy-Class": {premiumClasses[c]}},
				tokenID:   1000 + 2*i + c,
				tokens:    premiumPromptTokens,
				maxTokens: 1,
				stream:    true,
			})
		}
	}

	label := fmt.Sprintf("%-16s", arm.File)
	rec := newRecorder(len(premiumClasses))
	start := make(chan struct{})
	errs := make(chan error, total)
	var wg sync.WaitGroup
	for j, s := range specs {
		g := 0
		if len(sims) > 1 && (j/2)%4 == 3 { // the fourth request of each class
			g = 1
		}
		arm.Ingress[g]++
		s.gateway = g
		wg.Go(func() {
			<-start
			if _, err := send(ctx, sims[g], rec, s); err != nil {
				errs <- err
			}
		})
	}
	rec.start = time.Now() // before any request goroutine reads it
	prog := startProgress(cfg.stdout, cfg.terminal, label, premiumClasses, total, rec)
	close(start)
	wg.Wait()
	prog.stop()
	arm.Elapsed = time.Since(rec.start)
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}

	list := rec.completions()
	arm.Outcomes = len(list)
	arm.Series = series(list, premiumClasses, palette)
	if len(sims) > 1 {
		arm.GatewaySeries = seriesBy(list, func(c completion) int { return 2*c.gateway + c.class },
			[]string{"premium via A", "regular via A", "premium via B", "regular via B"},
			[]string{palette[0], palette[1], palette[5], palette[4]})
	}
	arm.First, arm.RegularLeft, arm.PremiumDone = premiumSplit(list, cfg.perClass)
	for i, c := range list {
		if c.outcome != outcomeOK {
			arm.Non200++
		}
		if i < cfg.perClass {
			arm.GatewayFirst[c.gateway][c.class]++
		}
	}
	arm.WorkerFirst = workerSplit(st, cfg.perClass)
	if cfg.twoGateways {
		if arm.Streams, err = replicaStreams(ctx, st.replicas); err != nil {
			return nil, err
		}
	}
	return arm, nil
}

// premiumWorker is the experiment's one worker.
var premiumWorker = workerSpec{
	count:            1,
	maxNumSeqs:       premiumSeqs,
	maxBatchedTokens: premiumBatchedTokens,
	prefillRate:      premiumPrefillRate,
}

// premiumQuanta reads the premium and regular quanta of the router policy
// file at path.
func premiumQuanta(path string) (q [2]uint64, err error) {
	pc, err := policy.LoadRouterPolicy(path)
	if err != nil {
		return q, err
	}
	if pc.Root == nil {
		return q, fmt.Errorf("demo: %s has no root profile", path)
	}
	for i, name := range premiumClasses {
		for _, c := range pc.Root.Classes {
			if c.Name == name {
				q[i] = c.Quantum
			}
		}
		if q[i] == 0 {
			return q, fmt.Errorf("demo: %s has no policy class %q", path, name)
		}
	}
	return q, nil
}

// replicaStreams drains the two replicas once the clients are done, then
// reads how many ext_proc streams each ended OK: its gateway's ingress as
// the server counted it.
func replicaStreams(ctx context.Context, rs *replicaSet) (n [2]int, err error) {
	if err := rs.drainAll(ctx); err != nil {
		return n, err
	}
	for i, r := range rs.reps[:2] {
		sc, err := scrapeHandler(r.srv.MetricsHandler())
		if err != nil {
			return n, err
		}
		n[i] = int(sc.value("tollgate_extproc_streams_total", map[string]string{"code": "OK"}))
	}
	return n, nil
}

// premiumSplit counts each class among the first perClass completions and
// the regular requests left when premium's last one completed.
func premiumSplit(list []completion, perClass int) (first [2]int, regularLeft int, premiumDone time.Duration) {
	var done [2]int
	for i, c := range list {
		if i < perClass {
			first[c.class]++
		}
		done[c.class]++
		if c.class == 0 && done[0] == perClass {
			regularLeft = perClass - done[1]
			premiumDone = c.at
		}
	}
	return first, regularLeft, premiumDone
}

// workerSplit counts each class among the first perClass sequences the
// worker started, from its request records.
func workerSplit(st *stack, perClass int) [2]int {
	recs := st.workers[0].w.Records()
	slices.SortStableFunc(recs, func(a, b mockworker.Record) int { return a.Admitted.Compare(b.Admitted) })
	var out [2]int
	n := 0
	for _, r := range recs {
		if r.Admitted.IsZero() || n == perClass {
			continue
		}
		n++
		if strings.HasPrefix(r.ID, "policy-class-premium-") {
			out[0]++
		} else {
			out[1]++
		}
	}
	return out
}

// printPremium prints the seed's table for the arms.
func printPremium(w io.Writer, arms []*premiumArm) {
	if len(arms) == 0 {
		return
	}
	n := arms[0].PerClass
	fmt.Fprintf(w, "\nPremium/regular: first %d of %d client completions (1 worker x %d sequences, %d-token uncached prompts)\n\n",
		n, 2*n, premiumSeqs, premiumPromptTokens)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "arm\tquanta\tpremium:regular\tideal\tupstream observed\tregular left\tupstream left\tworker started\toutcomes\tnon-200\ttime")
	for _, a := range arms {
		ideal, up, upLeft := idealSplit(a), "-", "-"
		if n == upstreamPerClass {
			up, upLeft = upstreamObserved(a.Quanta)
		}
		fmt.Fprintf(tw, "%s\t%d:%d\t%d:%d\t%s\t%s\t%d\t%s\t%d:%d\t%d\t%d\t%.1fs\n",
			a.File, a.Quanta[0], a.Quanta[1], a.First[0], a.First[1], ideal, up,
			a.RegularLeft, upLeft, a.WorkerFirst[0], a.WorkerFirst[1], a.Outcomes, a.Non200, a.Elapsed.Seconds())
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\n  regular left: regular requests not yet complete when premium's last completion was seen.\n")
	fmt.Fprintf(w, "  worker started: the class split of the first %d sequences the worker started (the dispatch order).\n", n)
}

// idealSplit is the DRR share of the first PerClass completions at equal
// request cost: PerClass split in the ratio of the quanta.
func idealSplit(a *premiumArm) string {
	q := float64(a.Quanta[0]) + float64(a.Quanta[1])
	p := int(float64(a.PerClass)*float64(a.Quanta[0])/q + 0.5)
	return fmt.Sprintf("%d:%d", p, a.PerClass-p)
}

// upstreamObserved returns Dynamo's published ranges over four runs for
// the two documented quanta, or "-".
func upstreamObserved(q [2]uint64) (split, left string) {
	switch q {
	case [2]uint64{512, 512}:
		return "159-161 : 159-161", "0-3"
	case [2]uint64{512, 128}:
		return "254-257 : 63-66", "237-240"
	}
	return "-", "-"
}

// premiumChart draws one panel per arm.
func premiumChart(arms []*premiumArm) Chart {
	c := Chart{Title: "Dynamo policy classes: premium vs regular under Deficit Round Robin"}
	if len(arms) > 0 {
		a := arms[0]
		c.Subtitle = fmt.Sprintf("%d premium and %d regular requests of %d uncached tokens are released together on one worker of %d sequences. "+
			"Whenever a prefill frees, DRR picks the next class by its quantum, so the first %d completions split in the ratio of the quanta.",
			a.PerClass, a.PerClass, premiumPromptTokens, premiumSeqs, a.PerClass)
	}
	for _, a := range arms {
		c.Panels = append(c.Panels, premiumPanel(a, fmt.Sprintf("%s, quanta %d:%d: first %d completions %d:%d (ideal %s)",
			a.File, a.Quanta[0], a.Quanta[1], a.PerClass, a.First[0], a.First[1], idealSplit(a)), a.Series))
	}
	return c
}

// premiumPanel draws series of a premium arm under title.
func premiumPanel(a *premiumArm, title string, series []Series) Panel {
	p := Panel{
		Title:  title,
		XLabel: "seconds since the start gate",
		YLabel: "completed requests",
		Series: slices.Clone(series),
	}
	for i := range p.Series {
		s := &p.Series[i]
		n := 0
		if len(s.Points) > 0 {
			n = int(s.Points[len(s.Points)-1].Y)
		}
		s.Legend = fmt.Sprintf("%s: %d requests", s.Name, n)
		if i < len(a.Quanta) && len(series) == len(a.Quanta) {
			s.Legend = fmt.Sprintf("%s (quantum %d): %d requests", s.Name, a.Quanta[i], n)
		}
	}
	if a.PremiumDone > 0 {
		p.Markers = []Marker{{X: a.PremiumDone.Seconds(), Label: fmt.Sprintf("premium done, %d regular left", a.RegularLeft)}}
	}
	return p
}
