package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/test/envoysim"
)

// The rolling-update scenario: tollgate replicas in replica mode, each
// behind its own simulated Envoy, in front of the premium/regular
// experiment's worker with premium_4x.yaml. Clients of both classes keep
// requests waiting in both for the whole run while every replica is
// replaced in turn, as a Kubernetes rolling update replaces pods.
const (
	rolloutReplicas = 3
	// rolloutClients is the clients of each class. Each sends one request
	// at a time, the next as soon as the last one ends: eight of each on
	// a worker of four sequences keep both classes waiting, so DRR
	// decides every dispatch.
	rolloutClients = 8
	// rolloutSteady is how long the load runs before the first roll and
	// after each.
	rolloutSteady = 1500 * time.Millisecond
	// rolloutDrainDelay is the replicas' --drain-delay. The demo's
	// Envoys stop picking a replica as its drain starts; the delay covers
	// the requests already on their way to it.
	rolloutDrainDelay = 200 * time.Millisecond
	// rolloutBin is the span over which the chart takes the longest gap
	// between routing answers.
	rolloutBin = 100 * time.Millisecond
)

// rolloutResult is the result of the rolling update.
type rolloutResult struct {
	// File is the router policy file; Quanta its premium and regular
	// quanta.
	File   string
	Quanta [2]uint64
	// Replicas and Clients (per class) are the run's sizes.
	Replicas, Clients int
	// Sent counts the requests sent; OK those answered 200 with a whole
	// body; Lost the others, transport errors included.
	Sent, OK, Lost int
	// Ingress counts the requests sent through each slot's Envoy.
	Ingress []int
	// Both counts premium and regular among the 200s that tollgate
	// routed while both classes had requests waiting, as the clients saw
	// it.
	Both [2]int
	// Steps is each replica's replacement, in order.
	Steps []rollStep
	// Elsewhere is the longest gap between routing answers away from
	// the handovers.
	Elsewhere time.Duration
	// Streams and StreamErrors are the ext_proc streams every replica
	// process ended, OK and otherwise (tollgate_extproc_streams_total),
	// read from each before it stopped; WorkerFinished is the requests
	// the worker finished.
	Streams, StreamErrors, WorkerFinished int
	// Elapsed is the run, from the start gate to the last completion.
	Elapsed time.Duration
	// Series are the cumulative completions per class; Gaps the longest
	// gap between routing answers in each rolloutBin, in milliseconds.
	Series []Series
	Gaps   []Point
}

// rollStep is one replica's replacement.
type rollStep struct {
	// Replica is the replica replaced; At when its roll began.
	Replica string
	At      time.Duration
	// To is the replica it handed the scheduler to, empty when it was a
	// front. HandoverAt is when it stepped down and Settled when the new
	// scheduler's settle window ended.
	To                  string
	HandoverAt, Settled time.Duration
	// Pause is the longest gap between routing answers that meets
	// [HandoverAt, Settled]: the admission pause as the clients saw it.
	Pause time.Duration
	// Links are the replicas' peer counters over the handover.
	Links peerCounts
	// OutAt is when its Envoy stopped picking it; Open the requests
	// going through the Envoy then; Drain how long Drain took; Out how
	// long it was out of rotation, the new replica's start included.
	OutAt      time.Duration
	Open       int
	Drain, Out time.Duration
}

// peerCounts are the replica-mode counters of a set of replicas.
type peerCounts struct {
	// Pauses and PauseSum are tollgate_peer_admission_pause_seconds'
	// count and sum: each a front's time without a scheduler link.
	Pauses   int
	PauseSum float64
	// Queued and InFlight are tollgate_peer_reregistered_requests_total.
	Queued, InFlight int
}

func (p peerCounts) sub(o peerCounts) peerCounts {
	return peerCounts{p.Pauses - o.Pauses, p.PauseSum - o.PauseSum, p.Queued - o.Queued, p.InFlight - o.InFlight}
}

// meanPause is the mean time a front was without a scheduler link.
func (p peerCounts) meanPause() time.Duration {
	if p.Pauses == 0 {
		return 0
	}
	return time.Duration(p.PauseSum / float64(p.Pauses) * float64(time.Second))
}

// rolloutConfig configures a rolling update.
type rolloutConfig struct {
	clients  int
	steady   time.Duration
	speed    float64
	seed     uint64
	examples string
	stdout   io.Writer
	terminal bool
	log      *slog.Logger
}

// runRollout starts the replicas, tollgate-0 the scheduler, runs the load
// through all of them, and replaces each in turn.
func runRollout(ctx context.Context, cfg rolloutConfig) (*rolloutResult, error) {
	path := filepath.Join(cfg.examples, filePremium4x)
	quanta, err := premiumQuanta(path)
	if err != nil {
		return nil, err
	}
	st, err := startReplicaStack(ctx, serverSpec{routerPolicy: path, seed: cfg.seed}, premiumWorker, cfg.speed, cfg.log,
		rolloutReplicas, 0, rolloutDrainDelay)
	if err != nil {
		return nil, err
	}
	defer st.close()
	res := &rolloutResult{File: filepath.Base(path), Quanta: quanta, Replicas: rolloutReplicas, Clients: cfg.clients}
	ro := &roller{rs: st.replicas, lb: newFrontLB(st.replicas), res: res, steady: cfg.steady, rolled: make([]bool, rolloutReplicas)}
	ro.setNote("steady")

	rec := newRecorder(len(premiumClasses))
	var stop atomic.Bool
	var seq atomic.Int64
	start := make(chan struct{})
	errs := make(chan error, 2*cfg.clients)
	var wg sync.WaitGroup
	for c := range premiumClasses {
		for k := range cfg.clients {
			wg.Go(func() {
				<-start
				if err := rolloutClient(ctx, ro.lb, rec, c, k, &stop, &seq); err != nil {
					errs <- err
				}
			})
		}
	}
	rec.start = time.Now() // before any request goroutine reads it
	ro.start = rec.start
	prog := startProgressNote(cfg.stdout, cfg.terminal, fmt.Sprintf("%-16s", "rollout"), premiumClasses, 0, rec, ro.note)
	close(start)
	rollErr := ro.run(ctx)
	stop.Store(true) // each client ends after its request
	wg.Wait()
	prog.stop()
	res.Elapsed = time.Since(rec.start)
	close(errs)
	if rollErr != nil {
		return nil, interrupted(ctx, rollErr)
	}
	if err := <-errs; err != nil {
		return nil, err
	}

	// The replicas' own counts: drained, every stream has ended.
	if err := st.replicas.drainAll(ctx); err != nil {
		return nil, err
	}
	for _, r := range st.replicas.up() {
		if err := ro.countStreams(r); err != nil {
			return nil, err
		}
	}
	res.WorkerFinished = st.workers[0].w.Stats().Finished
	res.Ingress = ro.lb.sentCounts()
	summarizeRollout(res, rec.completions())
	return res, nil
}

// rolloutClient sends requests of class through the fronts one at a time
// until stop is set. A request that fails in transport is recorded as
// lost; only ctx's end is an error.
func rolloutClient(ctx context.Context, lb *frontLB, rec *recorder, class, k int, stop *atomic.Bool, seq *atomic.Int64) error {
	for n := 0; !stop.Load(); n++ {
		i := int(seq.Add(1))
		s := &reqSpec{
			class:     class,
			id:        fmt.Sprintf("rollout-%s-%05d", premiumClasses[class], i),
			header:    http.Header{"X-Dynamo-Meta-Policy-Class": {premiumClasses[class]}},
			tokenID:   100000 + i, // unique: nothing is cached
			tokens:    premiumPromptTokens,
			maxTokens: 1,
			stream:    true,
		}
		slot, sim := lb.pick(k + n)
		s.gateway = slot
		sent := time.Since(rec.start)
		resp, err := sim.Do(ctx, s.request())
		lb.done(slot)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("demo: request %s: %w", s.id, err)
			}
			rec.add(completion{class: class, outcome: outcomeOther, gateway: slot, sent: sent})
			if err := sleepFor(ctx, 10*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		rec.add(completion{class: class, outcome: classify(resp), status: resp.Status, wait: resp.Timings.Decision,
			endpoint: resp.Endpoint, gateway: slot, sent: sent})
	}
	return nil
}

// frontLB is the clients' load balancing over the fronts: a request goes
// through one front's Envoy, round robin from a hint. A front taken out
// gets no new request, as Envoy stops picking a host that is not ready;
// its share goes to the others. It is safe for concurrent use.
type frontLB struct {
	mu   sync.Mutex
	sims []*envoysim.Sim // nil while out
	open []int           // requests going through each
	sent []int
}

func newFrontLB(rs *replicaSet) *frontLB {
	lb := &frontLB{open: make([]int, len(rs.reps)), sent: make([]int, len(rs.reps))}
	for _, r := range rs.reps {
		lb.sims = append(lb.sims, r.sim)
	}
	return lb
}

// pick returns the first front in rotation from hint, counted open until
// done. One front at most is out, so there is always one.
func (lb *frontLB) pick(hint int) (int, *envoysim.Sim) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for j := range lb.sims {
		i := (hint + j) % len(lb.sims)
		if lb.sims[i] != nil {
			lb.open[i]++
			lb.sent[i]++
			return i, lb.sims[i]
		}
	}
	panic("demo: every front is out of rotation")
}

func (lb *frontLB) done(i int) {
	lb.mu.Lock()
	lb.open[i]--
	lb.mu.Unlock()
}

// out takes front i out of rotation and returns its open requests.
func (lb *frontLB) out(i int) int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.sims[i] = nil
	return lb.open[i]
}

// in puts front i back, behind sim.
func (lb *frontLB) in(i int, sim *envoysim.Sim) {
	lb.mu.Lock()
	lb.sims[i] = sim
	lb.mu.Unlock()
}

// idle waits until no request goes through front i, at most 10 seconds.
func (lb *frontLB) idle(ctx context.Context, i int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		lb.mu.Lock()
		n := lb.open[i]
		lb.mu.Unlock()
		if n == 0 {
			return nil
		}
		if err := sleepFor(ctx, 2*time.Millisecond); err != nil {
			return fmt.Errorf("demo: %d requests still going through front %d: %w", n, i, err)
		}
	}
}

func (lb *frontLB) sentCounts() []int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return slices.Clone(lb.sent)
}

// roller replaces the replicas one by one and records each step. Only
// run's goroutine uses it, except note.
type roller struct {
	rs     *replicaSet
	lb     *frontLB
	res    *rolloutResult
	steady time.Duration
	start  time.Time
	// rolled marks the slots whose replica is new.
	rolled []bool
	// status is what the progress line says the roll is doing.
	status atomic.Pointer[string]
}

func (ro *roller) setNote(s string) { ro.status.Store(&s) }

// note is the progress line's note: the scheduler and the step.
func (ro *roller) note() string {
	s := ro.status.Load()
	if s == nil {
		return ""
	}
	return "| " + *s
}

func (ro *roller) since() time.Duration { return time.Since(ro.start) }

// run lets the load run, then replaces each replica in slot order, the
// load running again after each.
func (ro *roller) run(ctx context.Context) error {
	if err := sleepFor(ctx, ro.steady); err != nil {
		return err
	}
	for i := range ro.rs.reps {
		step, err := ro.roll(ctx, i)
		ro.res.Steps = append(ro.res.Steps, step)
		if err != nil {
			return err
		}
		ro.setNote(fmt.Sprintf("%s replaced; scheduler %s", step.Replica, ro.rs.reps[ro.rs.leader].id))
		if err := sleepFor(ctx, ro.steady); err != nil {
			return err
		}
	}
	return nil
}

// roll replaces slot i's replica as a rolling update does: the scheduler
// first hands over to another replica, then its Envoy stops picking it,
// it drains (its requests finish, scheduled by the other replica) and
// stops, and a new replica with the same identity starts and is put back
// once it reaches the scheduler.
func (ro *roller) roll(ctx context.Context, i int) (rollStep, error) {
	rs := ro.rs
	r := rs.reps[i]
	step := rollStep{Replica: r.id, At: ro.since()}
	var before peerCounts
	if rs.leader == i {
		to := ro.successor(i)
		ro.setNote(fmt.Sprintf("%s hands the scheduler over to %s", r.id, rs.reps[to].id))
		var err error
		if before, err = peerCountsOf(rs.up()); err != nil {
			return step, err
		}
		step.HandoverAt = ro.since()
		if err := rs.handover(ctx, to); err != nil {
			return step, err
		}
		step.To, step.Settled = rs.reps[to].id, rs.settled.Sub(ro.start)
		if err := rs.waitLinked(ctx); err != nil {
			return step, err
		}
	}
	ro.setNote(fmt.Sprintf("draining %s; scheduler %s", r.id, rs.reps[rs.leader].id))
	step.Open = ro.lb.out(i)
	out := time.Now()
	step.OutAt = out.Sub(ro.start)
	if err := r.srv.Drain(ctx); err != nil {
		return step, fmt.Errorf("demo: draining %s: %w", r.id, err)
	}
	step.Drain = time.Since(out)
	if err := ro.lb.idle(ctx, i); err != nil {
		return step, err
	}
	if step.To != "" {
		// Read after the drain, long after every replica linked to the
		// new scheduler and observed its gap; nothing relinks meanwhile.
		after, err := peerCountsOf(rs.up())
		if err != nil {
			return step, err
		}
		step.Links = after.sub(before)
	}
	if err := ro.countStreams(r); err != nil {
		return step, err
	}
	rs.remove(i)
	ro.setNote(fmt.Sprintf("starting a new %s; scheduler %s", r.id, rs.reps[rs.leader].id))
	if err := rs.start(ctx, i); err != nil {
		return step, err
	}
	if err := rs.waitLinked(ctx); err != nil {
		return step, err
	}
	ro.rolled[i] = true
	ro.lb.in(i, rs.reps[i].sim)
	step.Out = time.Since(out)
	return step, nil
}

// successor is the replica the scheduler at slot i hands over to: a new
// one if any is up (it stays), else the next slot.
func (ro *roller) successor(i int) int {
	for j, r := range ro.rs.reps {
		if j != i && r != nil && ro.rolled[j] {
			return j
		}
	}
	return (i + 1) % len(ro.rs.reps)
}

// countStreams adds the ext_proc streams r ended to the result.
func (ro *roller) countStreams(r *replica) error {
	sc, err := scrapeHandler(r.srv.MetricsHandler())
	if err != nil {
		return err
	}
	ok := sc.value("tollgate_extproc_streams_total", map[string]string{"code": "OK"})
	ro.res.Streams += int(ok)
	ro.res.StreamErrors += int(sc.value("tollgate_extproc_streams_total", nil) - ok)
	return nil
}

// peerCountsOf sums the replica-mode counters of reps.
func peerCountsOf(reps []*replica) (peerCounts, error) {
	var p peerCounts
	for _, r := range reps {
		sc, err := scrapeHandler(r.srv.MetricsHandler())
		if err != nil {
			return p, err
		}
		n, sum := sc.histogram("tollgate_peer_admission_pause_seconds", nil)
		p.Pauses += int(n)
		p.PauseSum += sum
		p.Queued += int(sc.value("tollgate_peer_reregistered_requests_total", map[string]string{"state": "queued"}))
		p.InFlight += int(sc.value("tollgate_peer_reregistered_requests_total", map[string]string{"state": "in_flight"}))
	}
	return p, nil
}

// summarizeRollout computes the client-side results from the completions.
func summarizeRollout(res *rolloutResult, list []completion) {
	res.Sent = len(list)
	for _, c := range list {
		if c.outcome == outcomeOK {
			res.OK++
		} else {
			res.Lost++
		}
	}
	res.Both = bothWaiting(list)
	ans := answers(list)
	var windows [][2]time.Duration
	for i := range res.Steps {
		s := &res.Steps[i]
		if s.To != "" {
			s.Pause = longestGap(ans, s.HandoverAt, s.Settled)
			windows = append(windows, [2]time.Duration{s.HandoverAt, s.Settled})
		}
	}
	for k := 1; k < len(ans); k++ {
		meets := false
		for _, w := range windows {
			meets = meets || (ans[k-1] <= w[1] && ans[k] >= w[0])
		}
		if !meets {
			res.Elsewhere = max(res.Elsewhere, ans[k]-ans[k-1])
		}
	}
	res.Gaps = binnedGaps(ans, rolloutBin)
	res.Series = series(list, premiumClasses, palette)
}

// answers returns when the clients got tollgate's routing answer for
// each request answered 200, in order.
func answers(list []completion) []time.Duration {
	var out []time.Duration
	for _, c := range list {
		if c.outcome == outcomeOK {
			out = append(out, c.sent+c.wait)
		}
	}
	slices.Sort(out)
	return out
}

// longestGap is the longest time between consecutive answers (sorted)
// whose span meets [from, to].
func longestGap(ans []time.Duration, from, to time.Duration) time.Duration {
	var g time.Duration
	for k := 1; k < len(ans); k++ {
		if ans[k-1] <= to && ans[k] >= from {
			g = max(g, ans[k]-ans[k-1])
		}
	}
	return g
}

// binnedGaps is, for each bin of answers (sorted) that has any, the
// longest gap ending in it, in milliseconds, at the bin's end.
func binnedGaps(ans []time.Duration, bin time.Duration) []Point {
	var out []Point
	for k := 1; k < len(ans); k++ {
		g := float64(ans[k]-ans[k-1]) / float64(time.Millisecond)
		x := float64(ans[k].Truncate(bin)+bin) / float64(time.Second)
		if n := len(out); n > 0 && out[n-1].X == x {
			out[n-1].Y = max(out[n-1].Y, g)
			continue
		}
		out = append(out, Point{X: x, Y: g})
	}
	return out
}

// bothWaiting counts each class among the requests answered 200 at a
// moment when both classes had a request waiting: sent by then and not
// yet answered (the request itself counts for its class).
func bothWaiting(list []completion) (n [2]int) {
	var sent, answered [2][]time.Duration
	for _, c := range list {
		sent[c.class] = append(sent[c.class], c.sent)
		answered[c.class] = append(answered[c.class], c.sent+c.wait)
	}
	for c := range sent {
		slices.Sort(sent[c])
		slices.Sort(answered[c])
	}
	waiting := func(c int, t time.Duration) bool {
		s, _ := slices.BinarySearch(sent[c], t+1)   // sent at or before t
		a, _ := slices.BinarySearch(answered[c], t) // answered before t
		return s > a
	}
	for _, c := range list {
		if t := c.sent + c.wait; c.outcome == outcomeOK && waiting(0, t) && waiting(1, t) {
			n[c.class]++
		}
	}
	return n
}

// premiumShare is premium's part of n.
func premiumShare(n [2]int) float64 {
	if n[0]+n[1] == 0 {
		return 0
	}
	return float64(n[0]) / float64(n[0]+n[1])
}

// quantaShare is premium's DRR share at equal request cost: its quantum's
// part of both.
func quantaShare(q [2]uint64) float64 {
	return float64(q[0]) / (float64(q[0]) + float64(q[1]))
}

// printRollout prints the rolling-update tables.
func printRollout(w io.Writer, res *rolloutResult) {
	fmt.Fprintf(w, "\nRolling update of %d tollgate replicas under load (%s, %d premium and %d regular clients)\n\n",
		res.Replicas, res.File, res.Clients, res.Clients)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "sent\tcompleted 200\tlost\tpremium:regular while both waited\tideal\tingress by front\ttollgate streams OK\tother streams\tworker finished\ttime")
	ingress := ""
	for i, n := range res.Ingress {
		if i > 0 {
			ingress += ":"
		}
		ingress += fmt.Sprint(n)
	}
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d:%d (%.1f%% premium)\t%.0f%%\t%s\t%d\t%d\t%d\t%.1fs\n",
		res.Sent, res.OK, res.Lost, res.Both[0], res.Both[1], 100*premiumShare(res.Both), 100*quantaShare(res.Quanta),
		ingress, res.Streams, res.StreamErrors, res.WorkerFinished, res.Elapsed.Seconds())
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "replica\tat\thanded the scheduler to\tadmission pause (clients)\trelinked, mean gap (server)\tre-registered queued:in flight\topen when out\tdrain\tout of rotation")
	for _, s := range res.Steps {
		to, pause, links, rereg := "- (a front)", "-", "-", "-"
		if s.To != "" {
			to, pause = s.To, fmt.Sprintf("%d ms", s.Pause.Milliseconds())
			links = fmt.Sprintf("%d, %.1f ms", s.Links.Pauses, float64(s.Links.meanPause())/float64(time.Millisecond))
			rereg = fmt.Sprintf("%d:%d", s.Links.Queued, s.Links.InFlight)
		}
		fmt.Fprintf(tw, "%s\t%.1fs\t%s\t%s\t%s\t%s\t%d\t%d ms\t%d ms\n", s.Replica, s.At.Seconds(), to, pause, links, rereg,
			s.Open, s.Drain.Milliseconds(), s.Out.Milliseconds())
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\n  lost: requests not answered 200 with a whole body, transport errors included (the goal is 0).\n")
	fmt.Fprintf(w, "  while both waited: the 200s routed while each class had a request sent and not yet routed, as the clients saw it.\n")
	fmt.Fprintf(w, "  admission pause: the longest time between two routing answers (any front) around the handover, as the clients\n")
	fmt.Fprintf(w, "  saw them. The new scheduler holds submits until every front it knows has re-registered, at most %d ms.\n", extproc.DefaultSettle.Milliseconds())
	fmt.Fprintf(w, "  Away from the handovers the longest gap was %d ms.\n", res.Elsewhere.Milliseconds())
	fmt.Fprintf(w, "  relinked, mean gap: tollgate_peer_admission_pause_seconds over the handover, summed over the replicas: how many\n")
	fmt.Fprintf(w, "  linked to the new scheduler, and the mean time each was without one. re-registered: the requests the fronts handed\n")
	fmt.Fprintf(w, "  the new scheduler (tollgate_peer_reregistered_requests_total).\n")
	fmt.Fprintf(w, "  open when out: requests going through the replica's Envoy when it stopped picking it; Drain waited for them.\n")
	fmt.Fprintf(w, "  tollgate streams: tollgate_extproc_streams_total of every replica process, read before each stopped.\n")
}

// rolloutChart draws the completions per class with the handovers marked,
// then the longest gap between routing answers.
func rolloutChart(res *rolloutResult) Chart {
	var handovers, rolls []Marker
	for _, s := range res.Steps {
		if s.To != "" {
			handovers = append(handovers, Marker{X: s.HandoverAt.Seconds(),
				Label: fmt.Sprintf("%s → %s, %d ms pause", s.Replica, s.To, s.Pause.Milliseconds())})
		}
		rolls = append(rolls, Marker{X: s.OutAt.Seconds(), Label: fmt.Sprintf("%s out for %d ms", s.Replica, s.Out.Milliseconds())})
	}
	done := Panel{
		Title: fmt.Sprintf("%d sent, %d completed 200, %d lost; %.1f%% premium while both classes waited (ideal %.0f%%)",
			res.Sent, res.OK, res.Lost, 100*premiumShare(res.Both), 100*quantaShare(res.Quanta)),
		XLabel:  "seconds since the start gate",
		YLabel:  "completed requests",
		Series:  slices.Clone(res.Series),
		Markers: handovers,
	}
	for i := range done.Series {
		s := &done.Series[i]
		n := len(s.Points) - 1
		if i < len(res.Quanta) {
			s.Legend = fmt.Sprintf("%s (quantum %d): %d requests", s.Name, res.Quanta[i], n)
		}
	}
	longest := 0.0
	for _, p := range res.Gaps {
		longest = max(longest, p.Y)
	}
	gaps := Panel{
		Title:   fmt.Sprintf("longest gap between routing answers in each %d ms; each replica's time out of rotation", rolloutBin.Milliseconds()),
		XLabel:  "seconds since the start gate",
		YLabel:  "gap (ms)",
		Markers: rolls,
		Series: []Series{{Name: "gap", Color: palette[2], Points: res.Gaps,
			Legend: fmt.Sprintf("all fronts: the longest %.0f ms", longest)}},
	}
	return Chart{
		Title: fmt.Sprintf("Rolling update of %d tollgate replicas under steady load", res.Replicas),
		Subtitle: fmt.Sprintf("%d replicas in replica mode, each behind its own simulated Envoy, in front of one worker of %d sequences "+
			"(%s, quanta %d:%d); %d premium and %d regular clients send one request at a time through all the fronts. "+
			"Each replica in turn hands the scheduler over if it holds it, drains, stops and comes back new; "+
			"its Envoy's share goes to the others meanwhile.",
			res.Replicas, premiumSeqs, res.File, res.Quanta[0], res.Quanta[1], res.Clients, res.Clients),
		Panels: []Panel{done, gaps},
	}
}
