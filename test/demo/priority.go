package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/test/envoysim"
	"github.com/tollgate/tollgate/test/mockworker"
)

// The priority scenario's deployment: two workers of 128 slots, so the SMG
// capacity is 256, above the 178 the default reservations need.
const (
	priorityWorkers = 2
	prioritySeqs    = 128
	// Rates at speed 1: a 1024-token bulk prompt prefills in 51 ms and its
	// 64 tokens take 0.68 s; an interactive request takes about 0.08 s.
	priorityPrefillRate = 20000
	priorityDecodeRate  = 100
)

// Tenant API keys of the priority scenario and of Serve. priority.yaml
// lists auth:acme (max class interactive) and auth:internal-cron (system);
// auth:free has no tenant policy, so --priority-scheduler-default-max-class
// (default) caps it.
var demoTenantKeys = []string{"acme:demo-acme-key", "internal-cron:demo-cron-key", "free:demo-free-key"}

// demoTrialKey is the serve demo's fourth tenant, whose budget in
// examples/tenant-rate-limits.yaml is two requests a minute.
const demoTrialKey = "trial:demo-trial-key"

// headerHold marks a request the workers park before its prefill until
// the scenario releases it.
const headerHold = "X-Demo-Hold"

// trafficClass is one kind of client in the priority scenario.
type trafficClass struct {
	// name labels the class in tables and progress lines; legend in
	// charts.
	name, legend string
	// tenant and key: the bearer token and the tenant it resolves to.
	tenant, key string
	// asked is the x-smg-priority header; effective is what the tenant
	// clamp leaves of it.
	asked     string
	effective sched.Priority
	stream    bool
	tokens    int
	maxTokens int
}

// priorityClasses are the scenario's clients, in series order.
var priorityClasses = []trafficClass{
	{name: "interactive", legend: "interactive (auth:acme)", tenant: "auth:acme", key: "demo-acme-key", asked: "interactive",
		effective: sched.PriorityInteractive, stream: true, tokens: 256, maxTokens: 8},
	{name: "default", legend: "default (auth:free asked system)", tenant: "auth:free", key: "demo-free-key", asked: "system",
		effective: sched.PriorityDefault, stream: true, tokens: 256, maxTokens: 8},
	{name: "bulk", legend: "bulk (auth:internal-cron)", tenant: "auth:internal-cron", key: "demo-cron-key", asked: "bulk",
		effective: sched.PriorityBulk, stream: false, tokens: 1024, maxTokens: 128},
}

// Class indexes into priorityClasses.
const (
	pcInteractive = iota
	pcClamped
	pcBulk
)

// phase1Workload is the priority scenario's first phase. Bulk jobs are
// submitted at once; interactive and clamped traffic comes from closed-loop
// users (each sends its next request an exponential think time after the
// previous one ended), so at most one request per user is in flight and
// phase 1 can never exhaust the interactive reservation, however slow the
// machine.
type phase1Workload struct {
	// bulk is the number of bulk jobs; more than twice the slots bulk may
	// hold, so that most of them queue.
	bulk int
	// users and perUser are the interactive and clamped users and the
	// requests each sends.
	users, perUser [2]int
	// think is the mean think time in model seconds (divided by the
	// speed).
	think float64
}

// defaultPhase1 is the demo's phase 1.
var defaultPhase1 = phase1Workload{bulk: 200, users: [2]int{16, 4}, perUser: [2]int{12, 10}, think: 0.15}

// requests is the number of requests the workload sends.
func (w phase1Workload) requests() int {
	return w.bulk + w.users[0]*w.perUser[0] + w.users[1]*w.perUser[1]
}

// priorityClass is one client class's results.
type priorityClass struct {
	Name      string
	Tenant    string
	Asked     string
	Effective string
	// Sent counts requests; Admitted those routed to a worker; OK those
	// answered 200 in full; Preempted the 503 scheduler_preempted answers;
	// Rejected the other failures by reason (queue_full, queue_timeout,
	// overloaded, other).
	Sent, Admitted, OK, Preempted int
	Rejected                      map[string]int
	// WaitP50 and WaitP99 are client-side, over phase 1: from sending the
	// request to tollgate's routing (or rejecting) answer.
	WaitP50, WaitP99 time.Duration
	// Server holds what tollgate counted for the effective class.
	Server serverClass
}

// serverClass is tollgate's own account of one effective priority class,
// scraped from /metrics.
type serverClass struct {
	// Admitted, Preempted, QueueFull and QueueTimeout are
	// smg_scheduler_admit_total by outcome.
	Admitted, Preempted, QueueFull, QueueTimeout uint64
	// Queued is smg_scheduler_queue_wait_seconds_count (requests that
	// waited in the queue); MeanWait its sum / count.
	Queued   uint64
	MeanWait time.Duration
}

// priorityResult is the priority scenario's outcome.
type priorityResult struct {
	Classes []priorityClass
	// Capacity and Reserved are the SMG slot pool (Server.Stats).
	Capacity uint32
	Reserved [sched.NumPriorities]uint32
	// BulkSlots is the slots bulk could use on an idle fleet;
	// InteractiveSlots what interactive had once bulk filled them.
	BulkSlots, InteractiveSlots int
	// Preemptions is smg_scheduler_preemption_total over every label,
	// BulkByInteractive its {victim_class="bulk",by_class="interactive"}
	// series; Clamps is smg_scheduler_clamp_total for auth:free, system to
	// default.
	Preemptions, BulkByInteractive, Clamps uint64
	// Routed counts the admitted requests per worker address.
	Routed map[string]int
	// Phase2 is when the preemption phase started; PreemptedAt when the
	// victim's 503 reached its client; Elapsed the whole scenario.
	Phase2, PreemptedAt, Elapsed time.Duration
	Series                       []Series
}

// priorityConfig configures a priority run.
type priorityConfig struct {
	// phase1 is the first phase's workload; the zero value means
	// defaultPhase1.
	phase1   phase1Workload
	speed    float64
	seed     uint64
	examples string
	stdout   io.Writer
	terminal bool
	log      *slog.Logger
}

// runPriority runs the priority scenario on a fresh stack.
func runPriority(ctx context.Context, cfg priorityConfig) (*priorityResult, error) {
	if cfg.phase1 == (phase1Workload{}) {
		cfg.phase1 = defaultPhase1
	}
	gate := mockworker.NewGate()
	hold := func(ctx context.Context, info mockworker.RequestInfo) error {
		if info.Header.Get(headerHold) == "" {
			return nil
		}
		return gate.Wait(ctx, info)
	}
	st, err := startStack(ctx, serverSpec{
		priority:       true,
		priorityConfig: filepath.Join(cfg.examples, filePriority),
		tenantKeys:     demoTenantKeys,
		seed:           cfg.seed,
	}, workerSpec{
		count:       priorityWorkers,
		maxNumSeqs:  prioritySeqs,
		prefillRate: priorityPrefillRate,
		decodeRate:  priorityDecodeRate,
		hold:        hold,
	}, cfg.speed, cfg.log)
	if err != nil {
		return nil, err
	}
	defer st.close()

	stats, ok := st.srv.Stats(ctx)
	if !ok {
		return nil, errors.New("demo: tollgate is not serving")
	}
	res := &priorityResult{Capacity: stats.Capacity, Reserved: stats.Reserved}
	res.BulkSlots = slotsFor(stats, sched.PriorityBulk, [sched.NumPriorities]int{})
	var inflight [sched.NumPriorities]int
	inflight[sched.PriorityBulk] = res.BulkSlots
	res.InteractiveSlots = slotsFor(stats, sched.PriorityInteractive, inflight)
	if res.BulkSlots <= 0 || res.InteractiveSlots <= 0 {
		return nil, fmt.Errorf("demo: capacity %d with reservations %v leaves bulk %d and interactive %d slots; the scenario needs both",
			stats.Capacity, stats.Reserved, res.BulkSlots, res.InteractiveSlots)
	}

	names := make([]string, len(priorityClasses))
	legends := make([]string, len(priorityClasses))
	for i, c := range priorityClasses {
		names[i], legends[i] = c.name, c.legend
	}
	total := cfg.phase1.requests() + res.BulkSlots + res.InteractiveSlots + 1
	rec := newRecorder(len(priorityClasses))
	prog := startProgress(cfg.stdout, cfg.terminal, "priority.yaml   ", names, total, rec)
	err = runPriorityPhases(ctx, cfg, st, gate, rec, res)
	prog.stop()
	if err != nil {
		return nil, err
	}
	res.Elapsed = time.Since(rec.start)

	list := rec.completions()
	res.Series = series(list, legends, palette)
	res.Routed = map[string]int{}
	for _, c := range list {
		if c.outcome == outcomeOK || c.outcome == outcomePreempted {
			res.Routed[c.endpoint]++
		}
	}
	sc, err := scrapeMetrics(ctx, st.metricsAddr)
	if err != nil {
		return nil, err
	}
	res.Preemptions = uint64(sc.value("smg_scheduler_preemption_total", nil))
	res.BulkByInteractive = uint64(sc.value("smg_scheduler_preemption_total", map[string]string{"victim_class": "bulk", "by_class": "interactive"}))
	res.Clamps = uint64(sc.value("smg_scheduler_clamp_total", map[string]string{"tenant": "auth:free", "requested_class": "system", "effective_class": "default"}))
	for i, tc := range priorityClasses {
		res.Classes = append(res.Classes, summarize(tc, i, list, res.Phase2, sc))
	}
	return res, nil
}

// slotsFor is SMG's slot formula: the slots class p may take given the
// in-flight counts, capacity - total in flight - the unused reservations
// of every higher class.
func slotsFor(s sched.Stats, p sched.Priority, inflight [sched.NumPriorities]int) int {
	free := int(s.Capacity)
	for _, n := range inflight {
		free -= n
	}
	for h := p + 1; h < sched.NumPriorities; h++ {
		free -= max(0, int(s.Reserved[h])-inflight[h])
	}
	return max(0, free)
}

// runPriorityPhases runs phase 1 (bulk backlog with interactive and
// clamped traffic passing it) and then phase 2 (the preemption).
func runPriorityPhases(ctx context.Context, cfg priorityConfig, st *stack, gate *mockworker.Gate, rec *recorder, res *priorityResult) (err error) {
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	// However it ends, nothing stays parked and every request goroutine
	// has returned.
	defer func() {
		gate.Open()
		wg.Wait()
		if err == nil {
			select {
			case err = <-errs:
			default:
			}
		}
	}()
	launch := func(s *reqSpec, done func(*envoysim.Response)) {
		wg.Go(func() {
			resp, err := send(ctx, st.sim, rec, s)
			if err != nil {
				fail(err)
				return
			}
			if done != nil {
				done(resp)
			}
		})
	}

	// Phase 1: every bulk job at once, and the interactive and clamped
	// users.
	for i := range cfg.phase1.bulk {
		launch(newPrioritySpec(pcBulk, fmt.Sprintf("bulk-%03d", i), 10000+i, nil), nil)
	}
	for k, class := range []int{pcInteractive, pcClamped} {
		for u := range cfg.phase1.users[k] {
			rng := rand.New(rand.NewPCG(cfg.seed, uint64(k*1000+u)))
			wg.Go(func() {
				for j := range cfg.phase1.perUser[k] {
					think := time.Duration(rng.ExpFloat64() * cfg.phase1.think / cfg.speed * float64(time.Second))
					if err := sleepFor(ctx, think); err != nil {
						fail(err)
						return
					}
					id := fmt.Sprintf("%s-u%02d-%02d", priorityClasses[class].tenant[len("auth:"):], u, j)
					s := newPrioritySpec(class, id, 40000+10000*k+100*u+j, nil)
					if _, err := send(ctx, st.sim, rec, s); err != nil {
						fail(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}

	// Phase 2: bulk jobs fill every slot bulk may use and park before
	// their first token; an interactive burst fills every slot left to
	// interactive; one more interactive request finds none and preempts
	// the newest bulk job.
	res.Phase2 = time.Since(rec.start)
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	hold := http.Header{headerHold: {"1"}}
	for i := range res.BulkSlots {
		launch(newPrioritySpec(pcBulk, fmt.Sprintf("bulk-held-%03d", i), 20000+i, hold), nil)
	}
	if err := gate.WaitParked(waitCtx, res.BulkSlots); err != nil {
		return fmt.Errorf("demo: %d bulk jobs did not all reach the workers: %w", res.BulkSlots, err)
	}
	for i := range res.InteractiveSlots {
		launch(newPrioritySpec(pcInteractive, fmt.Sprintf("interactive-burst-%03d", i), 30000+i, hold), nil)
	}
	if err := gate.WaitParked(waitCtx, res.BulkSlots+res.InteractiveSlots); err != nil {
		return fmt.Errorf("demo: the interactive burst did not all reach the workers (%d parked): %w", len(gate.Parked()), err)
	}
	preemptor := make(chan *envoysim.Response, 1)
	launch(newPrioritySpec(pcInteractive, "interactive-preemptor", 39999, nil), func(r *envoysim.Response) { preemptor <- r })
	var first *envoysim.Response
	select {
	case first = <-preemptor:
	case <-waitCtx.Done():
		return fmt.Errorf("demo: the preempting request did not finish: %w", waitCtx.Err())
	}
	if classify(first) != outcomeOK {
		return fmt.Errorf("demo: the preempting interactive request got status %d (%s)", first.Status, first.Details)
	}
	gate.Open()
	wg.Wait()
	for _, c := range rec.completions() {
		if c.outcome == outcomePreempted {
			res.PreemptedAt = c.at
			break
		}
	}
	return nil
}

// newPrioritySpec builds a request of class c with a distinct prompt.
func newPrioritySpec(c int, id string, tokenID int, extra http.Header) *reqSpec {
	tc := priorityClasses[c]
	h := http.Header{
		"Authorization":  {"Bearer " + tc.key},
		"X-Smg-Priority": {tc.asked},
	}
	for k, vs := range extra {
		h[k] = vs
	}
	return &reqSpec{class: c, id: id, header: h, tokenID: tokenID, tokens: tc.tokens, maxTokens: tc.maxTokens, stream: tc.stream}
}

// sleepFor waits for d or until ctx ends.
func sleepFor(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// summarize computes one class's client-side results and reads the
// server's counts for its effective class from sc. Waits are taken from
// phase 1, the steady traffic that ended before phase2.
func summarize(tc trafficClass, idx int, list []completion, phase2 time.Duration, sc scrape) priorityClass {
	pc := priorityClass{Name: tc.name, Tenant: tc.tenant, Asked: tc.asked, Effective: tc.effective.String(), Rejected: map[string]int{}}
	var waits []time.Duration
	for _, c := range list {
		if c.class != idx {
			continue
		}
		pc.Sent++
		if c.at < phase2 {
			waits = append(waits, c.wait)
		}
		switch c.outcome {
		case outcomeOK:
			pc.OK++
			pc.Admitted++
		case outcomePreempted:
			pc.Preempted++
			pc.Admitted++
		case outcomeQueueFull, outcomeQueueTimeout, outcomeOverloaded, outcomeOther:
			for _, r := range rejectReasons {
				if r.o == c.outcome {
					pc.Rejected[r.name]++
				}
			}
		}
	}
	pc.WaitP50 = percentile(waits, 0.50)
	pc.WaitP99 = percentile(waits, 0.99)
	cl := map[string]string{"class": pc.Effective}
	admit := func(outcome string) uint64 {
		return uint64(sc.value("smg_scheduler_admit_total", map[string]string{"class": pc.Effective, "outcome": outcome}))
	}
	pc.Server.Admitted = admit("admitted")
	pc.Server.Preempted = admit("preempted")
	pc.Server.QueueFull = admit("rejected_queue_full")
	pc.Server.QueueTimeout = admit("rejected_queue_timeout")
	n, sum := sc.histogram("smg_scheduler_queue_wait_seconds", cl)
	pc.Server.Queued = n
	if n > 0 {
		pc.Server.MeanWait = time.Duration(sum / float64(n) * float64(time.Second))
	}
	return pc
}

// printPriority prints the per-class table and the server cross-checks.
func printPriority(w io.Writer, r *priorityResult) {
	fmt.Fprintf(w, "\nPriority admission (%s): %d workers x %d slots, capacity %d; reserved system %d, interactive %d, default %d, bulk %d\n",
		filePriority, priorityWorkers, prioritySeqs, r.Capacity,
		r.Reserved[sched.PrioritySystem], r.Reserved[sched.PriorityInteractive], r.Reserved[sched.PriorityDefault], r.Reserved[sched.PriorityBulk])
	fmt.Fprintf(w, "bulk may hold %d slots on an idle fleet; with those taken, interactive still has %d.\n\n", r.BulkSlots, r.InteractiveSlots)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "class\ttenant\tasked\tsent\tadmitted\tcompleted\tpreempted\trejected\twait p50\twait p99\t|\tserver: admitted\tpreempted\trejected\tqueued\tmean queue wait")
	for _, c := range r.Classes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t|\t%d\t%d\t%d\t%d\t%s\n",
			c.Effective, c.Tenant, c.Asked, c.Sent, c.Admitted, c.OK, c.Preempted, rejectedText(c.Rejected),
			fmtDuration(c.WaitP50), fmtDuration(c.WaitP99),
			c.Server.Admitted, c.Server.Preempted, c.Server.QueueFull+c.Server.QueueTimeout, c.Server.Queued, fmtDuration(c.Server.MeanWait))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\n  class: the effective class after the tenant clamp; asked: the x-smg-priority header sent.\n")
	fmt.Fprintf(w, "  wait: client side, phase 1, from sending the request to tollgate's routing answer (queue time plus ext_proc round trips).\n")
	fmt.Fprintf(w, "  server: smg_scheduler_admit_total by outcome and smg_scheduler_queue_wait_seconds from tollgate's /metrics.\n")
	fmt.Fprintf(w, "  tenant clamp: auth:free asked for system; smg_scheduler_clamp_total{tenant=\"auth:free\",requested_class=\"system\",effective_class=\"default\"} = %d\n", r.Clamps)
	fmt.Fprintf(w, "  preemption: request %d of the interactive burst found no slot; smg_scheduler_preemption_total = %d, of which {victim_class=\"bulk\",by_class=\"interactive\"} %d\n",
		r.InteractiveSlots+1, r.Preemptions, r.BulkByInteractive)
	addrs := make([]string, 0, len(r.Routed))
	for a := range r.Routed {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	fmt.Fprintf(w, "  routed (x-gateway-destination-endpoint):")
	for _, a := range addrs {
		fmt.Fprintf(w, " %s %d", a, r.Routed[a])
	}
	fmt.Fprintln(w)
}

// rejectedText renders rejections by reason, "0" for none.
func rejectedText(m map[string]int) string {
	var parts []string
	for _, r := range rejectReasons {
		if n := m[r.name]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, r.name))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

// fmtDuration prints a duration with about three significant digits.
func fmtDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

// priorityChart draws the scenario's one panel.
func priorityChart(r *priorityResult) Chart {
	p := Panel{
		Title:  fmt.Sprintf("%s: capacity %d, bulk held to %d slots; one preemption", filePriority, r.Capacity, r.BulkSlots),
		XLabel: "seconds since the start",
		YLabel: "completed requests",
		Series: slices.Clone(r.Series),
		Markers: []Marker{
			{X: r.Phase2.Seconds(), Label: fmt.Sprintf("phase 2: bulk fills %d slots, interactive burst of %d", r.BulkSlots, r.InteractiveSlots+1)},
		},
	}
	for i := range p.Series {
		s := &p.Series[i]
		s.Legend = fmt.Sprintf("%s: %d requests", s.Name, len(s.Points)-1)
	}
	if r.PreemptedAt > 0 {
		p.Markers = append(p.Markers, Marker{X: r.PreemptedAt.Seconds(), Label: "one bulk job preempted"})
	}
	return Chart{
		Title: "SMG priority admission: reservations, tenant clamp, preemption",
		Subtitle: "Phase 1: a batch tenant submits bulk jobs at once while interactive users (auth:acme) and users of auth:free " +
			"(no tenant policy: asks for system, clamped to default) keep sending. Phase 2: bulk fills every slot it may use " +
			"and stalls before its first token; an interactive burst fills the rest and one more preempts a bulk job.",
		Panels: []Panel{p},
	}
}
