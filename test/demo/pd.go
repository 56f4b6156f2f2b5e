package demo

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/test/envoysim"
	"github.com/tollgate/tollgate/test/mockworker"
)

// The prefill/decode scenario: the same four workers and the same steady
// mix of short and long prompts, run with every worker serving whole
// requests, then with one prefill-role worker and three decode-role ones,
// so that tollgate splits every long prompt.
const (
	pdWorkers = 4
	pdSeqs    = 8
	// pdPrefill is the split arm's prefill-role workers (the first ones);
	// the rest are decode-role.
	pdPrefill = 1
	// Each worker runs one shared batch, as vLLM does with chunked
	// prefill (mockworker.BatchConfig): a step carries one decode token of
	// every sequence past its prefill, then prefill chunks, oldest first,
	// up to pdBatchedTokens tokens (vLLM's max_num_batched_tokens), and
	// lasts pdStepOverhead + tokens / pdStepRate at speed 1. A sequence
	// decoding alone gets a token every 5.0 ms; a long prompt alone
	// prefills in 4 steps of 2,048 tokens, 225 ms; a step that carries a
	// 2,048-token chunk lasts 56 ms, and so does the token gap of every
	// sequence decoding in it.
	pdBatchedTokens = 2048
	pdStepOverhead  = 5 * time.Millisecond
	pdStepRate      = 40000
	pdShortTokens   = 100
	pdLongTokens    = 8192
	pdMaxTokens     = 32
	// pdLongEvery makes every twentieth request a long prompt.
	pdLongEvery = 20
	// pdRequests are sent one every pdGap at speed 1: a long prompt every
	// 360 ms, 22,800 prompt tokens per second to prefill, and 53 short
	// requests per second. Split, the one prefill worker prefills each
	// long prompt in 225 ms, 62% of its time, and the decode workers
	// compute the short prompts and each long prompt's last token: the
	// split matches the work. Aggregated, each worker prefills a long
	// prompt every 1.44 s on average, in 5 steps shared with the
	// sequences decoding beside it (4 when none is). A shared batch
	// bounds a worker's prefill throughput (about 36,000 tokens per
	// second here): the one long prompt in five this scenario sent when
	// each sequence had its own times would need three prefill workers.
	pdRequests = 800
	pdGap      = 18 * time.Millisecond
)

// pdBatch is the workers' shared batch.
func pdBatch() *mockworker.BatchConfig {
	return &mockworker.BatchConfig{MaxNumBatchedTokens: pdBatchedTokens, StepOverhead: pdStepOverhead, TokensPerSec: pdStepRate}
}

// The prompt kinds, in series order.
const (
	pdShort = iota
	pdLong
)

var pdKinds = []string{"short", "long"}

// The tollgate metrics the scenario reads.
const (
	metricSplits   = "tollgate_pd_split_requests_total"
	metricDecision = "tollgate_decision_latency_seconds"
)

// pdKindResult is one prompt kind's figures in one arm, client side.
type pdKindResult struct {
	// Requests counts the kind's requests; Non200 those not answered 200
	// with every token; Split those whose decode worker was named a
	// prefill worker.
	Requests, Non200, Split int
	// TTFT is every time to first token, ITL every gap between two tokens
	// of a request, both sorted.
	TTFT, ITL                    []time.Duration
	TTFT50, TTFT99, ITL50, ITL99 time.Duration
	// SlotWait99 is the p99 of the time a request waited for engine slots
	// (its prefill half's too), from the workers' records.
	SlotWait99 time.Duration
}

// pdArm is one run of the scenario.
type pdArm struct {
	Name string
	// Prefill counts the prefill-role workers.
	Prefill int
	// Batch is the workers' shared batch; nil when each sequence was
	// timed on its own.
	Batch *mockworker.BatchConfig
	Kinds [2]pdKindResult
	// Splits is tollgate_pd_split_requests_total; PrefillServed counts the
	// prefill halves the workers served and Steps the steps their batches
	// ran.
	Splits, PrefillServed, Steps int
	// DecisionP50 is tollgate_decision_latency_seconds' median.
	DecisionP50 time.Duration
	Elapsed     time.Duration
}

// workers describes the arm's fleet.
func (a *pdArm) workers() string {
	if a.Prefill == 0 {
		return fmt.Sprintf("%d both", pdWorkers)
	}
	return fmt.Sprintf("%d prefill, %d decode", a.Prefill, pdWorkers-a.Prefill)
}

// pdConfig configures a prefill/decode run.
type pdConfig struct {
	requests int
	speed    float64
	seed     uint64
	stdout   io.Writer
	terminal bool
	log      *slog.Logger
}

// runPD runs the workload aggregated, then split.
func runPD(ctx context.Context, cfg pdConfig) ([]*pdArm, error) {
	var arms []*pdArm
	for _, prefill := range []int{0, pdPrefill} {
		arm, err := runPDArm(ctx, cfg, prefill)
		if err != nil {
			return nil, err
		}
		arms = append(arms, arm)
	}
	return arms, nil
}

// pdRoles are the workers' roles with prefill prefill-role workers: the
// first ones, the rest decode-role; all both without any.
func pdRoles(prefill int) []mockworker.Role {
	roles := make([]mockworker.Role, pdWorkers)
	for i := range roles {
		switch {
		case prefill == 0:
			roles[i] = mockworker.RoleBoth
		case i < prefill:
			roles[i] = mockworker.RolePrefill
		default:
			roles[i] = mockworker.RoleDecode
		}
	}
	return roles
}

// runPDArm runs the workload once on a fresh stack with prefill
// prefill-role workers.
func runPDArm(ctx context.Context, cfg pdConfig, prefill int) (*pdArm, error) {
	arm := &pdArm{Name: "aggregated", Prefill: prefill, Batch: pdBatch()}
	if prefill > 0 {
		arm.Name = "split"
	}
	st, err := startStack(ctx, serverSpec{seed: cfg.seed}, workerSpec{
		count: pdWorkers, maxNumSeqs: pdSeqs, maxBatchedTokens: pdBatchedTokens, batch: arm.Batch, roles: pdRoles(prefill),
	}, cfg.speed, cfg.log)
	if err != nil {
		return nil, err
	}
	defer st.close()
	front, err := startFront(ctx, st.sim)
	if err != nil {
		return nil, err
	}
	defer front.close()

	rec := newRecorder(len(pdKinds))
	results := make([]pdResult, cfg.requests)
	prog := startProgress(cfg.stdout, cfg.terminal, fmt.Sprintf("%-10s", arm.Name), pdKinds, cfg.requests, rec)
	err = sendSteady(ctx, cfg, rec.start, func(i int) error {
		r, err := front.stream(ctx, pdRequest(i))
		results[i] = r
		if err == nil {
			rec.add(completion{class: r.kind, outcome: r.outcome(), status: r.status, endpoint: r.endpoint})
		}
		return err
	})
	prog.stop()
	arm.Elapsed = time.Since(rec.start)
	if err != nil {
		return nil, interrupted(ctx, err)
	}
	arm.summarize(results, slotWaits(st))
	return arm, arm.readServer(ctx, st)
}

// sendSteady calls send(i) for each of the cfg.requests requests on a
// goroutine of its own, one every pdGap/speed from start, and returns the
// first error once every call has returned.
func sendSteady(ctx context.Context, cfg pdConfig, start time.Time, send func(i int) error) error {
	gap := time.Duration(float64(pdGap) / cfg.speed)
	errs := make(chan error, cfg.requests)
	var wg sync.WaitGroup
	for i := range cfg.requests {
		if err := sleepFor(ctx, time.Until(start.Add(gap*time.Duration(i)))); err != nil {
			errs <- err
			break
		}
		wg.Go(func() {
			if err := send(i); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// pdRequest is request i: a unique long prompt every pdLongEvery
// requests, a unique short one otherwise, streamed.
func pdRequest(i int) *reqSpec {
	kind, tokens := pdShort, pdShortTokens
	if i%pdLongEvery == pdLongEvery-1 {
		kind, tokens = pdLong, pdLongTokens
	}
	return &reqSpec{
		class:     kind,
		id:        fmt.Sprintf("pd-%s-%04d", pdKinds[kind], i),
		tokenID:   7000 + i,
		tokens:    tokens,
		maxTokens: pdMaxTokens,
		stream:    true,
	}
}

// summarize computes each kind's figures from the client's results and
// the slot waits by request ID.
func (a *pdArm) summarize(results []pdResult, waits map[string]time.Duration) {
	var slot [2][]time.Duration
	for _, r := range results {
		slot[r.kind] = append(slot[r.kind], waits[r.id])
		k := &a.Kinds[r.kind]
		k.Requests++
		if r.outcome() != outcomeOK {
			k.Non200++
		}
		if r.split {
			k.Split++
		}
		if r.tokens > 0 {
			k.TTFT = append(k.TTFT, r.ttft)
		}
		k.ITL = append(k.ITL, r.gaps...)
	}
	for i := range a.Kinds {
		k := &a.Kinds[i]
		k.TTFT50, k.TTFT99 = percentile(k.TTFT, 0.50), percentile(k.TTFT, 0.99)
		k.ITL50, k.ITL99 = percentile(k.ITL, 0.50), percentile(k.ITL, 0.99)
		k.SlotWait99 = percentile(slot[i], 0.99)
	}
}

// slotWaits returns, by request ID, how long each request waited for a
// running slot on the engines it reached: its destination and, split, its
// prefill worker (whose record has the same ID).
func slotWaits(st *stack) map[string]time.Duration {
	waits := map[string]time.Duration{}
	for _, sw := range st.workers {
		for _, r := range sw.w.Records() {
			if !r.Admitted.IsZero() {
				waits[r.ID] += r.Admitted.Sub(r.Arrival)
			}
		}
	}
	return waits
}

// readServer reads the split counter and the decision latency from
// tollgate's /metrics, and the prefill halves and the batches' steps from
// the workers' counters.
func (a *pdArm) readServer(ctx context.Context, st *stack) error {
	sc, err := scrapeMetrics(ctx, st.metricsAddr)
	if err != nil {
		return err
	}
	a.Splits = int(sc.value(metricSplits, nil))
	a.DecisionP50 = time.Duration(histogramQuantile(sc, metricDecision, 0.5) * float64(time.Second))
	for _, sw := range st.workers {
		ws := sw.w.Stats()
		a.PrefillServed += ws.PrefillServed
		a.Steps += ws.Steps
	}
	return nil
}

// histogramQuantile estimates quantile q (0..1) of histogram name's
// observations by linear interpolation within the bucket that holds it,
// as PromQL's histogram_quantile does; 0 without observations.
func histogramQuantile(sc scrape, name string, q float64) float64 {
	le := map[float64]float64{}
	for _, m := range sc.matching(name, nil) {
		for _, b := range m.GetHistogram().GetBucket() {
			le[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
	}
	count, _ := sc.histogram(name, nil)
	if count == 0 {
		return 0
	}
	rank := q * float64(count)
	lower, below := 0.0, 0.0
	for _, b := range slices.Sorted(maps.Keys(le)) {
		if le[b] >= rank {
			switch {
			case math.IsInf(b, 1):
				return lower // beyond the last finite bound
			case le[b] == below:
				return b
			}
			return lower + (b-lower)*(rank-below)/(le[b]-below)
		}
		lower, below = b, le[b]
	}
	return lower
}

// pdResult is one streamed request as the client saw it.
type pdResult struct {
	id       string
	kind     int
	status   int
	endpoint string
	// split is whether the decode worker was named a prefill worker.
	split bool
	// ttft is from sending the request to the first token; gaps are the
	// times between consecutive tokens.
	ttft   time.Duration
	gaps   []time.Duration
	tokens int
	// done is whether the stream ended with [DONE].
	done bool
}

// outcome is how the request ended: 200 with every token is outcomeOK.
func (r pdResult) outcome() outcome {
	truncated := r.status == http.StatusOK && (!r.done || r.tokens != pdMaxTokens)
	return classify(&envoysim.Response{Status: r.status, Reset: truncated})
}

// httpFront serves a simulated Envoy over HTTP on loopback, so that a
// client reads each streamed token as it arrives.
type httpFront struct {
	url    string
	hs     *http.Server
	client *http.Client
	done   chan struct{} // closed when Serve returns
}

// startFront serves sim on 127.0.0.1:0; close stops it.
func startFront(ctx context.Context, sim *envoysim.Sim) (*httpFront, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: front listener: %w", err)
	}
	f := &httpFront{
		url:    "http://" + l.Addr().String(),
		hs:     &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 10 * time.Second},
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}},
		done:   make(chan struct{}),
	}
	go func() {
		defer close(f.done)
		_ = f.hs.Serve(l)
	}()
	return f, nil
}

// close closes the client's connections, then the server.
func (f *httpFront) close() {
	f.client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.hs.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = f.hs.Close()
	}
	<-f.done
}

// stream sends spec through the front and times its server-sent events.
// It fails only when the request could not be sent.
func (f *httpFront) stream(ctx context.Context, spec *reqSpec) (pdResult, error) {
	res := pdResult{id: spec.id, kind: spec.class}
	r := spec.request()
	req, err := http.NewRequestWithContext(ctx, r.Method, f.url+r.Path, bytes.NewReader(r.Body))
	if err != nil {
		return res, fmt.Errorf("demo: request %s: %w", spec.id, err)
	}
	req.Header = r.Header
	start := time.Now()
	resp, err := f.client.Do(req)
	if err != nil {
		return res, fmt.Errorf("demo: request %s: %w", spec.id, err)
	}
	defer func() { _ = resp.Body.Close() }()
	res.status, res.endpoint = resp.StatusCode, resp.Header.Get(HeaderEndpoint)
	res.split = resp.Header.Get(headerPrefiller) != ""
	last := start
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		now := time.Now()
		switch {
		case string(data) == "[DONE]":
			res.done = true
		case bytes.Contains(data, []byte(`"choices"`)):
			if res.tokens == 0 {
				res.ttft = now.Sub(start)
			} else {
				res.gaps = append(res.gaps, now.Sub(last))
			}
			last = now
			res.tokens++
		}
	}
	return res, nil // a broken stream lacks [DONE]
}

// ms formats d in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", d.Seconds()*1000) }

// printPD prints one row per arm and prompt kind, then each arm's split
// cross-check and decision latency.
func printPD(w io.Writer, arms []*pdArm) {
	if len(arms) == 0 {
		return
	}
	fmt.Fprintf(w, "\nPrefill/decode disaggregation (%d workers x %d sequences; prompts of %d and %d tokens, %d output tokens each)\n\n",
		pdWorkers, pdSeqs, pdShortTokens, pdLongTokens, pdMaxTokens)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "arm\tworkers\tprompts\trequests\tsplit\tTTFT p50\tTTFT p99\tITL p50\tITL p99\tslot wait p99\tnon-200")
	for _, a := range arms {
		for i, k := range a.Kinds {
			name, workers := a.Name, a.workers()
			if i > 0 {
				name, workers = "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\n", name, workers, pdKinds[i], k.Requests, k.Split,
				ms(k.TTFT50), ms(k.TTFT99), ms(k.ITL50), ms(k.ITL99), ms(k.SlotWait99), k.Non200)
		}
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "arm\tsplit seen by the client\t"+metricSplits+"\tprefill halves served\tdecision latency p50\tsplit as expected\tengine steps\ttime")
	for _, a := range arms {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f µs\t%s\t%d\t%.1fs\n", a.Name, a.Kinds[pdShort].Split+a.Kinds[pdLong].Split, a.Splits,
			a.PrefillServed, a.DecisionP50.Seconds()*1e6, yesNo(a.splitAsExpected()), a.Steps, a.Elapsed.Seconds())
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\n  TTFT: from sending the request to its first streamed token; ITL: between two tokens of a request. Both client\n")
	fmt.Fprintf(w, "  side, through the simulated Envoy, whose every chunk passes tollgate's ext_proc.\n")
	fmt.Fprintf(w, "  split: the decode worker got x-prefiller-host-port (%d or more uncached tokens with a prefill worker in the fleet);\n", sched.DefaultPDThreshold)
	fmt.Fprintf(w, "  as expected: every long prompt split and no short one with a prefill worker, nothing split without.\n")
	fmt.Fprintf(w, "  slot wait: time in the engines' queues for a running slot (the prefill half's included), from the workers' records.\n")
	fmt.Fprintf(w, "  decision latency: %s, interpolated within its buckets.\n", metricDecision)
	printPDEngine(w, arms[0].Batch)
	if len(arms) == 2 {
		printPDEffect(w, arms[0], arms[1])
	}
}

// splitAsExpected reports whether the arm split every long prompt and no
// short one when it has prefill workers, and nothing without.
func (a *pdArm) splitAsExpected() bool {
	short, long := a.Kinds[pdShort], a.Kinds[pdLong]
	if a.Prefill == 0 {
		return short.Split == 0 && long.Split == 0
	}
	return short.Split == 0 && long.Split == long.Requests
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// pdSamePace is the relative change of the short prompts' ITL p50 below
// which the split left their tokens' pace as it was.
const pdSamePace = 0.05

// printPDEffect prints how the short prompts fared from the aggregated arm
// to the split one and, when their tokens kept their pace, why.
func printPDEffect(w io.Writer, agg, split *pdArm) {
	a, s := agg.Kinds[pdShort], split.Kinds[pdShort]
	fmt.Fprintf(w, "  short prompts, aggregated -> split: TTFT p99 %s -> %s (%s), slot wait p99 %s -> %s,\n",
		ms(a.TTFT99), ms(s.TTFT99), percent(relChange(a.TTFT99, s.TTFT99)), ms(a.SlotWait99), ms(s.SlotWait99))
	fmt.Fprintf(w, "  ITL p50 %s -> %s (%s), ITL p99 %s -> %s (%s).\n",
		ms(a.ITL50), ms(s.ITL50), percent(relChange(a.ITL50, s.ITL50)), ms(a.ITL99), ms(s.ITL99), percent(relChange(a.ITL99, s.ITL99)))
	if a.ITL50 == 0 || math.Abs(relChange(a.ITL50, s.ITL50)) >= pdSamePace {
		return
	}
	if agg.Batch == nil {
		fmt.Fprintf(w, "  note: the split leaves the short prompts' tokens at their pace. The mock worker gives each sequence its own\n")
		fmt.Fprintf(w, "  prefill and decode time (slots, not a shared batch), so a long prefill never slows another sequence's tokens;\n")
		fmt.Fprintf(w, "  it delays a short request only by holding a slot the request waits for (slot wait).\n")
		return
	}
	fmt.Fprintf(w, "  note: the split leaves the short prompts' ITL p50 within %.0f%%: fewer than half of their token gaps fall in steps\n", 100*pdSamePace)
	fmt.Fprintf(w, "  that carry a long prompt's prefill chunk, so the median gap is a step without one in both arms; what the split\n")
	fmt.Fprintf(w, "  changes in the token pace shows in the tail, if anywhere (ITL p99).\n")
}

// printPDEngine says how the workers time their sequences: b is their
// shared batch, nil when each sequence had its own times.
func printPDEngine(w io.Writer, b *mockworker.BatchConfig) {
	if b == nil {
		fmt.Fprintf(w, "  engines: each sequence has its own prefill and decode time (slots, not a shared batch).\n")
		return
	}
	fmt.Fprintf(w, "  engines: one shared batch per worker, as vLLM's with chunked prefill: a step carries every decoding sequence's\n")
	fmt.Fprintf(w, "  next token, then prefill chunks, oldest first, up to %d tokens (max_num_batched_tokens), and lasts %s +\n",
		b.MaxNumBatchedTokens, b.StepOverhead)
	fmt.Fprintf(w, "  tokens / %.0f per second at speed 1: a long prefill stretches the token gaps of the sequences decoding beside it.\n",
		b.TokensPerSec)
}

// relChange is (to - from) / from, or 0 when from is 0.
func relChange(from, to time.Duration) float64 {
	if from == 0 {
		return 0
	}
	return float64(to-from) / float64(from)
}

// percent formats a relative change as a signed whole percentage, "+0%"
// for what rounds to none.
func percent(x float64) string {
	v := math.Round(100 * x)
	if v == 0 {
		v = 0 // not -0
	}
	return fmt.Sprintf("%+.0f%%", v)
}

// pdChart draws the TTFT and ITL distributions of each prompt kind, one
// line per arm.
func pdChart(arms []*pdArm) Chart {
	views := []struct {
		kind        int
		itl         bool
		title, what string
	}{
		{pdShort, false, fmt.Sprintf("short prompts (%d tokens): time to first token", pdShortTokens), "requests"},
		{pdLong, false, fmt.Sprintf("long prompts (%d tokens): time to first token", pdLongTokens), "requests"},
		{pdShort, true, "short prompts: inter-token latency", "token gaps"},
		{pdLong, true, "long prompts: inter-token latency", "token gaps"},
	}
	c := Chart{
		Title: "Prefill/decode disaggregation: long prompts prefilled on a prefill worker",
		Subtitle: fmt.Sprintf("The same %d workers of %d sequences, each running one vLLM-style shared batch (steps of at most %d tokens), "+
			"and the same steady mix (one prompt in %d of %d tokens, the rest of %d, "+
			"%d output tokens each), run with every worker serving whole requests, then with %d prefill-role and %d decode-role workers: "+
			"tollgate routes each long prompt to a decode worker and names the prefill worker in x-prefiller-host-port. Measured by the client.",
			pdWorkers, pdSeqs, pdBatchedTokens, pdLongEvery, pdLongTokens, pdShortTokens, pdMaxTokens, pdPrefill, pdWorkers-pdPrefill),
	}
	for _, v := range views {
		p := Panel{Title: v.title, XLabel: "percentile of " + v.what, YLabel: "milliseconds"}
		for i, a := range arms {
			k := &a.Kinds[v.kind]
			ds, p50, p99 := k.TTFT, k.TTFT50, k.TTFT99
			if v.itl {
				ds, p50, p99 = k.ITL, k.ITL50, k.ITL99
			}
			p.Series = append(p.Series, Series{Name: a.Name, Color: palette[i%len(palette)], Points: percentileCurve(ds),
				Legend: fmt.Sprintf("%s (%s): p50 %s, p99 %s", a.Name, a.workers(), ms(p50), ms(p99))})
		}
		c.Panels = append(c.Panels, p)
	}
	return c
}

// percentileCurve is a distribution as a chart line: the value in
// milliseconds at each whole percentile. ds is sorted in place.
func percentileCurve(ds []time.Duration) []Point {
	if len(ds) == 0 {
		return nil
	}
	out := make([]Point, 0, 100)
	for p := 1; p <= 100; p++ {
		out = append(out, Point{X: float64(p), Y: percentile(ds, float64(p)/100).Seconds() * 1000})
	}
	return out
}

// pdIntro is the scenario's description under its heading in Run.
func pdIntro(w io.Writer) {
	fmt.Fprintf(w, "%d workers of %d sequences, each running one vLLM-style shared batch: steps of at most %d tokens that last\n",
		pdWorkers, pdSeqs, pdBatchedTokens)
	fmt.Fprintf(w, "%s + tokens / %d per second, so that a long prefill slows the tokens of the sequences decoding beside it.\n",
		pdStepOverhead, pdStepRate)
	fmt.Fprintf(w, "One request every %s at speed 1, one in %d a unique prompt of %d tokens, the rest unique prompts of %d\n",
		pdGap, pdLongEvery, pdLongTokens, pdShortTokens)
	fmt.Fprintf(w, "tokens, all streamed. Run with every worker serving whole requests, then with %d prefill-role and %d decode-role\n",
		pdPrefill, pdWorkers-pdPrefill)
	fmt.Fprintf(w, "workers: tollgate splits prompts of %d or more uncached tokens, and the decode worker's sidecar calls the\n",
		sched.DefaultPDThreshold)
	fmt.Fprintf(w, "prefill worker named in x-prefiller-host-port before it decodes.\n\n")
}
