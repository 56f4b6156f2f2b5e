package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tollgate/tollgate/sched/policy"
	"github.com/tollgate/tollgate/test/mockworker"
)

// The noisy-neighbour scenario: one policy class, one worker whose busy
// gate queues everything past a few prefills, a tenant that floods the
// class and one that sends a little, spread over the same period.
const (
	noisyRequests = 500
	quietRequests = 50
	// fairThreshold is --router-queue-threshold: the worker is busy past
	// 0.1875 × 8192 = 1536 prefill tokens, three 512-token prompts.
	fairThreshold = 0.1875
)

// fairTenants are the two tenants, in series order, and their keys.
var (
	fairTenants    = []string{"noisy", "quiet"}
	fairTenantKeys = []string{"noisy:demo-noisy-key", "quiet:demo-quiet-key"}
)

// fairArm is one run of the noisy-neighbour workload.
type fairArm struct {
	// Mode is the --fairness value.
	Mode policy.FairnessMode
	// Sent counts each tenant's requests; Non200 those not answered 200.
	Sent   [2]int
	Non200 int
	// WaitP50 and WaitP99 are each tenant's client-side wait, from sending
	// the request to tollgate's routing answer.
	WaitP50, WaitP99 [2]time.Duration
	// Both counts the dispatches made while both tenants had requests
	// waiting; Share is each tenant's part of their uncached tokens.
	Both  int
	Share [2]float64
	// QuietDone is when the quiet tenant's last request completed;
	// Elapsed the whole run.
	QuietDone, Elapsed time.Duration
	Series             []Series
}

// fairConfig configures a noisy-neighbour run.
type fairConfig struct {
	noisy, quiet int
	speed        float64
	seed         uint64
	stdout       io.Writer
	terminal     bool
	log          *slog.Logger
}

// runFairness runs the workload with fairness off, then by tenant.
func runFairness(ctx context.Context, cfg fairConfig) ([]*fairArm, error) {
	var arms []*fairArm
	for _, mode := range []policy.FairnessMode{policy.FairnessNone, policy.FairnessTenant} {
		arm, err := runFairArm(ctx, cfg, mode)
		if err != nil {
			return nil, err
		}
		arms = append(arms, arm)
	}
	return arms, nil
}

// runFairArm runs the workload once on a fresh stack: the noisy tenant's
// requests all at the start gate, then, once they are queued in tollgate,
// the quiet tenant's evenly spread over part of the time the noisy backlog
// takes to drain.
func runFairArm(ctx context.Context, cfg fairConfig, mode policy.FairnessMode) (*fairArm, error) {
	frac := fairThreshold
	st, err := startStack(ctx, serverSpec{queueThreshold: &frac, tenantKeys: fairTenantKeys, seed: cfg.seed, fairness: mode}, workerSpec{
		count:            1,
		maxNumSeqs:       premiumSeqs,
		maxBatchedTokens: premiumBatchedTokens,
		prefillRate:      premiumPrefillRate,
	}, cfg.speed, cfg.log)
	if err != nil {
		return nil, err
	}
	defer st.close()

	arm := &fairArm{Mode: mode, Sent: [2]int{cfg.noisy, cfg.quiet}}
	prefill := time.Duration(float64(premiumPromptTokens) / premiumPrefillRate / cfg.speed * float64(time.Second))
	// The worker drains the noisy backlog at about two prefills per
	// prefill time (measured: 500 requests in 2.9 s at speed 1); the quiet
	// requests are spread over a quarter of noisy × prefill, so they
	// arrive while it lasts.
	gap := prefill * time.Duration(cfg.noisy) / time.Duration(4*cfg.quiet)

	spec := func(t, i int) *reqSpec {
		return &reqSpec{
			class:     t,
			id:        fmt.Sprintf("fair-%s-%04d", fairTenants[t], i),
			header:    http.Header{"Authorization": {"Bearer demo-" + fairTenants[t] + "-key"}},
			tokenID:   3000 + 2*i + t,
			tokens:    premiumPromptTokens,
			maxTokens: 1,
			stream:    true,
		}
	}
	var (
		mu   sync.Mutex
		sent = map[string]time.Time{}
	)
	do := func(s *reqSpec, rec *recorder) error {
		mu.Lock()
		sent[s.id] = time.Now()
		mu.Unlock()
		_, err := send(ctx, st.sim, rec, s)
		return err
	}
	rec := newRecorder(len(fairTenants))
	start := make(chan struct{})
	errs := make(chan error, cfg.noisy+cfg.quiet)
	var wg sync.WaitGroup
	for i := range cfg.noisy {
		wg.Go(func() {
			<-start
			if err := do(spec(0, i), rec); err != nil {
				errs <- err
			}
		})
	}
	flooded := make(chan struct{})
	for i := range cfg.quiet {
		wg.Go(func() {
			<-flooded
			if err := sleepFor(ctx, gap*time.Duration(i)); err != nil {
				errs <- err
				return
			}
			if err := do(spec(1, i), rec); err != nil {
				errs <- err
			}
		})
	}
	rec.start = time.Now()
	prog := startProgress(cfg.stdout, cfg.terminal, fmt.Sprintf("fairness %-7s ", mode), fairTenants, cfg.noisy+cfg.quiet, rec)
	close(start)
	// The quiet tenant starts once the flood has reached tollgate: every
	// noisy request is queued there or already at the worker.
	if err := waitFlooded(ctx, st, cfg.noisy); err != nil {
		errs <- err
	}
	close(flooded)
	wg.Wait()
	prog.stop()
	arm.Elapsed = time.Since(rec.start)
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}

	list := rec.completions()
	var waits [2][]time.Duration
	for _, c := range list {
		if c.outcome != outcomeOK {
			arm.Non200++
		}
		waits[c.class] = append(waits[c.class], c.wait)
		if c.class == 1 {
			arm.QuietDone = c.at
		}
	}
	for t := range waits {
		arm.WaitP50[t] = percentile(waits[t], 0.50)
		arm.WaitP99[t] = percentile(waits[t], 0.99)
	}
	arm.Both, arm.Share = backloggedShare(st.workers[0].w.Records(), sent)
	legends := []string{"noisy tenant (500 at once)", "quiet tenant (50 spread)"}
	arm.Series = series(list, legends, palette)
	return arm, nil
}

// waitFlooded waits until n requests are queued in tollgate or at the
// worker.
func waitFlooded(ctx context.Context, st *stack, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		s, ok := st.srv.Stats(ctx)
		if !ok {
			return fmt.Errorf("demo: tollgate stopped before the flood was queued: %w", ctx.Err())
		}
		var queued uint64
		for _, q := range s.Queues {
			queued += q.Requests
		}
		if int(queued)+len(st.workers[0].w.Records()) >= n {
			return nil
		}
		if err := sleepFor(ctx, 5*time.Millisecond); err != nil {
			return fmt.Errorf("demo: the flood of %d requests did not reach tollgate: %w", n, err)
		}
	}
}

// backloggedShare walks the worker's admissions in order and counts the
// uncached tokens each tenant received at the dispatches made while both
// tenants had a request waiting: sent, and reaching the worker no earlier
// than the dispatched one.
func backloggedShare(recs []mockworker.Record, sent map[string]time.Time) (both int, share [2]float64) {
	type req struct {
		tenant        int
		sent, arrived time.Time
		tokens        int
	}
	var rs []req
	for _, r := range recs {
		s, ok := sent[r.ID]
		if !ok || r.Arrival.IsZero() {
			continue
		}
		t := 0
		if len(r.ID) > 10 && r.ID[:10] == "fair-quiet" {
			t = 1
		}
		rs = append(rs, req{tenant: t, sent: s, arrived: r.Arrival, tokens: r.PromptTokens - r.CachedTokens})
	}
	slices.SortFunc(rs, func(a, b req) int { return a.arrived.Compare(b.arrived) })
	var tokens [2]float64
	for _, d := range rs {
		// d's tenant was waiting (for d); the other one if it had a
		// request sent before d reached the worker and reaching it after.
		var waiting [2]bool
		waiting[d.tenant] = true
		for _, o := range rs {
			if !o.sent.After(d.arrived) && o.arrived.After(d.arrived) {
				waiting[o.tenant] = true
			}
		}
		if waiting[0] && waiting[1] {
			both++
			tokens[d.tenant] += float64(d.tokens)
		}
	}
	if sum := tokens[0] + tokens[1]; sum > 0 {
		share = [2]float64{tokens[0] / sum, tokens[1] / sum}
	}
	return both, share
}

// printFairness prints the noisy-neighbour table.
func printFairness(w io.Writer, arms []*fairArm) {
	if len(arms) == 0 {
		return
	}
	fmt.Fprintf(w, "\nNoisy neighbour in one policy class (1 worker x %d sequences, %d-token uncached prompts)\n\n", premiumSeqs, premiumPromptTokens)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "--fairness\ttenant\trequests\twait p50\twait p99\tshare while both backlogged\tdispatches counted\tquiet done\tnon-200\ttime")
	for _, a := range arms {
		for t, name := range fairTenants {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.1f%%\t%d\t%.2fs\t%d\t%.1fs\n", a.Mode, name, a.Sent[t],
				a.WaitP50[t].Round(time.Millisecond), a.WaitP99[t].Round(time.Millisecond), 100*a.Share[t], a.Both,
				a.QuietDone.Seconds(), a.Non200, a.Elapsed.Seconds())
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\n  wait: client side, from sending the request to tollgate's routing answer.\n")
	fmt.Fprintf(w, "  share: uncached tokens dispatched to each tenant while both had requests waiting.\n")
}

// fairChart draws one panel per arm.
func fairChart(arms []*fairArm) Chart {
	c := Chart{Title: "Noisy neighbour in one policy class: cumulative completions"}
	if len(arms) > 0 {
		c.Subtitle = fmt.Sprintf("One worker, one policy class whose busy gate queues everything past three prefills. "+
			"Tenant auth:noisy sends %d requests at once, auth:quiet %d spread over the same period. --fairness none is "+
			"Dynamo's FCFS lane; --fairness tenant runs DRR over uncached tokens between the tenants' flows.", arms[0].Sent[0], arms[0].Sent[1])
	}
	for _, a := range arms {
		p := Panel{
			Title: fmt.Sprintf("--fairness %s: the quiet tenant waits p50 %s, p99 %s",
				a.Mode, a.WaitP50[1].Round(time.Millisecond), a.WaitP99[1].Round(time.Millisecond)),
			XLabel: "seconds since the start gate",
			YLabel: "completed requests",
			Series: slices.Clone(a.Series),
		}
		for t, how := range []string{"at once", "spread out"} {
			if t < len(p.Series) {
				p.Series[t].Legend = fmt.Sprintf("%s tenant: %d requests %s, %.0f%% of the service while both wait",
					fairTenants[t], a.Sent[t], how, 100*a.Share[t])
			}
		}
		if a.QuietDone > 0 {
			p.Markers = []Marker{{X: a.QuietDone.Seconds(), Label: "quiet tenant done"}}
		}
		c.Panels = append(c.Panels, p)
	}
	return c
}
