package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tollgate/tollgate/test/envoysim"
)

// The KV-events scenario: multi-turn chat sessions sharing a few system
// prompts, over workers whose prefix caches are too small to keep every
// conversation, run with tollgate's approximate prefix index and then with
// the engines' KV events.
const (
	kvWorkers     = 4
	kvCacheBlocks = 160 // 2,560 tokens per worker
	kvSystems     = 3
	kvSystemToks  = 512
	kvSessions    = 24
	kvTurns       = 6
	kvTurnToks    = 96 // a user message and the assistant's reply
	kvPrefillRate = 20000
	// kvConcurrent sessions run at once.
	kvConcurrent = 4
	// kvThink is a user's pause between turns, at speed 1.
	kvThink = 150 * time.Millisecond
	// While the sessions run, each worker also serves prompts of
	// kvOtherToks, one every kvOtherGap at speed 1 and at most kvOther,
	// from clients that do not go through tollgate (another gateway, a
	// batch job): they evict conversations tollgate routed there.
	kvOther     = 400
	kvOtherToks = 1024
	kvOtherGap  = 40 * time.Millisecond
)

// kvArm is one run of the scenario.
type kvArm struct {
	Name string
	// Requests and Failed count the requests sent and those not answered
	// 200.
	Requests, Failed int
	// Within1, Within5 are the shares of requests whose cached-token
	// estimate on the chosen worker was within 1% (5%) of the prompt of
	// what the worker reported; MeanErr is the mean signed error, as a
	// share of the prompt.
	Within1, Within5, MeanErr float64
	// ErrOver is the estimate error's distribution for the chart: at each
	// bound of tollgate's error histogram, X in percent of the prompt, Y
	// the percentage of requests whose estimate was off by more.
	ErrOver []Point
	// HitRate is the cached share of all prompt tokens, as the workers
	// reported it.
	HitRate float64
	// TTFT50, TTFT99 are percentiles of the time to the first response
	// byte (max_tokens 1).
	TTFT50, TTFT99 time.Duration
	// Events is whether the arm ran with KV events; ByEvents, ByApprox
	// count its requests priced by each source.
	Events             bool
	ByEvents, ByApprox uint64
	// Cached are the cached tokens each completion reported, in the order
	// they completed; TTFTs are every time to first byte, sorted.
	Cached []int
	TTFTs  []time.Duration
}

// kvConfig configures a KV-events run.
type kvConfig struct {
	speed  float64
	seed   uint64
	stdout io.Writer
	log    *slog.Logger
}

// runKVEvents runs both arms.
func runKVEvents(ctx context.Context, c kvConfig) ([]kvArm, error) {
	var arms []kvArm
	for _, events := range []bool{false, true} {
		arm, err := runKVArm(ctx, c, events)
		if err != nil {
			return nil, err
		}
		arms = append(arms, arm)
	}
	return arms, nil
}

func runKVArm(ctx context.Context, c kvConfig, events bool) (kvArm, error) {
	arm := kvArm{Name: "approximate index", Events: events}
	if events {
		arm.Name = "KV events"
	}
	st, err := startStack(ctx, serverSpec{seed: c.seed}, workerSpec{
		count: kvWorkers, maxNumSeqs: 8, prefillRate: kvPrefillRate, decodeRate: 1000,
		cacheBlocks: kvCacheBlocks, kvEvents: events,
	}, c.speed, c.log)
	if err != nil {
		return arm, err
	}
	defer st.close()
	if events {
		if err := waitSynced(ctx, st); err != nil {
			return arm, err
		}
	}
	// The warm-up requests are not part of the figures.
	before, err := scrapeMetrics(ctx, st.metricsAddr)
	if err != nil {
		return arm, err
	}
	errBuckets0, errN0, errSum0 := errorHistogram(before)
	ev0, _ := before.histogram("tollgate_prefix_cached_tokens", map[string]string{"source": "events"})
	ap0, _ := before.histogram("tollgate_prefix_cached_tokens", map[string]string{"source": "approximate"})

	var (
		mu                   sync.Mutex
		ttft                 []time.Duration
		promptSum, cachedSum int
		wg                   sync.WaitGroup
		firstErr             error
	)
	sem := make(chan struct{}, kvConcurrent)
	for s := range kvSessions {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ids := kvIDs(kvSystemToks, 1+(s%kvSystems)*1_000_000)
			for turn := range kvTurns {
				ids = append(ids, kvIDs(kvTurnToks, 10_000_000+s*100_000+turn*kvTurnToks)...)
				// The new question's last tokens end in a partial block.
				prompt := append(slices.Clone(ids), kvIDs(5, 90_000_000+s*100+turn)...)
				r, err := st.sim.Do(ctx, kvRequest(prompt))
				mu.Lock()
				arm.Requests++
				switch {
				case err != nil:
					if firstErr == nil {
						firstErr = err
					}
					arm.Failed++
				case r.Status != http.StatusOK:
					arm.Failed++
				default:
					p, cached := kvUsage(r.Body)
					promptSum += p
					cachedSum += cached
					arm.Cached = append(arm.Cached, cached)
					ttft = append(ttft, r.Timings.FirstByte)
				}
				mu.Unlock()
				if err != nil {
					return
				}
				time.Sleep(time.Duration(float64(kvThink) / c.speed))
			}
		})
	}
	stop := make(chan struct{})
	var others sync.WaitGroup
	for i, sw := range st.workers {
		others.Go(func() {
			for j := range kvOther {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				body, _ := json.Marshal(map[string]any{"model": demoModel, "max_tokens": 1,
					"prompt": kvIDs(kvOtherToks, 200_000_000+i*1_000_000+j*kvOtherToks)})
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+sw.addr+"/v1/completions", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					_ = resp.Body.Close()
				}
				time.Sleep(time.Duration(float64(kvOtherGap) / c.speed))
			}
		})
	}
	wg.Wait()
	close(stop)
	others.Wait()
	if firstErr != nil {
		return arm, interrupted(ctx, firstErr)
	}
	if promptSum > 0 {
		arm.HitRate = float64(cachedSum) / float64(promptSum)
	}
	slices.Sort(ttft)
	arm.TTFTs = ttft
	if n := len(ttft); n > 0 {
		arm.TTFT50, arm.TTFT99 = ttft[n/2], ttft[min(n-1, n*99/100)]
	}
	sc, err := scrapeMetrics(ctx, st.metricsAddr)
	if err != nil {
		return arm, err
	}
	le, n, sum := errorHistogram(sc)
	if n > errN0 {
		count := float64(n - errN0)
		within := func(b float64) float64 {
			return float64((le[b] - errBuckets0[b]) - (le[-b] - errBuckets0[-b]))
		}
		arm.Within1, arm.Within5 = within(0.01)/count, within(0.05)/count
		arm.MeanErr = (sum - errSum0) / count
		for _, b := range slices.Sorted(maps.Keys(le)) {
			if _, ok := le[-b]; ok && b > 0 {
				arm.ErrOver = append(arm.ErrOver, Point{X: 100 * b, Y: 100 * (1 - within(b)/count)})
			}
		}
	}
	ev, _ := sc.histogram("tollgate_prefix_cached_tokens", map[string]string{"source": "events"})
	ap, _ := sc.histogram("tollgate_prefix_cached_tokens", map[string]string{"source": "approximate"})
	arm.ByEvents, arm.ByApprox = ev-ev0, ap-ap0
	return arm, nil
}

// errorHistogram returns tollgate's cached-token estimate error histogram:
// cumulative counts by upper bound, the count and the sum.
func errorHistogram(sc scrape) (map[float64]uint64, uint64, float64) {
	le := map[float64]uint64{}
	var n uint64
	var sum float64
	for _, m := range sc.matching("tollgate_cached_tokens_estimate_error_ratio", nil) {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		for _, b := range h.GetBucket() {
			le[b.GetUpperBound()] += b.GetCumulativeCount()
		}
		n += h.GetSampleCount()
		sum += h.GetSampleSum()
	}
	return le, n, sum
}

// waitSynced sends each worker a distinct warm-up prompt until tollgate is
// in sync with its event stream.
func waitSynced(ctx context.Context, st *stack) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for i, sw := range st.workers {
		for probe := 0; !st.kv.Index().Synced(sw.id); probe++ {
			req := kvRequest(kvIDs(17, 50_000_000+i*1_000_000+probe*17))
			req.Header.Set("x-dynamo-worker-instance-id", sw.id)
			if _, err := st.sim.Do(ctx, req); err != nil {
				return fmt.Errorf("demo: waiting for %s's KV events: %w", sw.id, err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("demo: %s's KV events did not sync: %w", sw.id, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return nil
}

func kvIDs(n, start int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (start + i) % 1_000_000_000
	}
	return out
}

func kvRequest(ids []int) envoysim.Request {
	body, _ := json.Marshal(map[string]any{"model": demoModel, "prompt": ids, "max_tokens": 1})
	return envoysim.Request{Method: http.MethodPost, Path: "/v1/completions",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: body}
}

// kvUsage reads the prompt and cached tokens of a completion.
func kvUsage(body []byte) (prompt, cached int) {
	var v struct {
		Usage struct {
			Prompt  int `json:"prompt_tokens"`
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	_ = json.Unmarshal(body, &v)
	return v.Usage.Prompt, v.Usage.Details.Cached
}

// kvChart draws, per arm, how far the cached-token estimate was from the
// usage the workers reported, the cached tokens they reported, and the
// time to first token by percentile.
func kvChart(arms []kvArm) Chart {
	errs := Panel{Title: "cached-token estimate error: the requests off by more than x% of the prompt",
		XLabel: "x = |estimated - reported cached tokens|, % of the prompt", YLabel: "requests off by > x (%)"}
	cached := Panel{Title: "prefix cache hits the workers reported (usage cached_tokens)",
		XLabel: "completed requests", YLabel: "cached tokens, cumulative"}
	ttft := Panel{Title: "time to first token (max_tokens 1)", XLabel: "percentile of requests", YLabel: "time to first token (ms)"}
	// The error axis ends at the first bound no arm's error exceeds.
	end := 0
	for _, a := range arms {
		for k, p := range a.ErrOver {
			if p.Y > 0 {
				end = max(end, k+1)
			}
		}
	}
	for i, a := range arms {
		color := palette[i%len(palette)]
		e := Series{Name: a.Name, Color: color, Dots: true,
			Legend: fmt.Sprintf("%s: %.0f%% within 1%% of the prompt, mean error %+.1f%%", a.Name, 100*a.Within1, 100*a.MeanErr)}
		e.Points = a.ErrOver[:min(end+1, len(a.ErrOver))]
		errs.Series = append(errs.Series, e)
		s := Series{Name: a.Name, Color: color, Legend: fmt.Sprintf("%s: hit rate %.1f%%", a.Name, 100*a.HitRate)}
		sum := 0
		for j, c := range a.Cached {
			sum += c
			s.Points = append(s.Points, Point{X: float64(j + 1), Y: float64(sum)})
		}
		cached.Series = append(cached.Series, s)
		t := Series{Name: a.Name, Color: color,
			Legend: fmt.Sprintf("%s: p50 %.1f ms, p99 %.1f ms", a.Name, a.TTFT50.Seconds()*1000, a.TTFT99.Seconds()*1000)}
		for j, d := range a.TTFTs {
			t.Points = append(t.Points, Point{X: 100 * float64(j+1) / float64(len(a.TTFTs)), Y: d.Seconds() * 1000})
		}
		ttft.Series = append(ttft.Series, t)
	}
	return Chart{
		Title: "Prefix cache: the approximate index against the engines' KV events",
		Subtitle: fmt.Sprintf("%d chat sessions of %d turns share %d system prompts on %d workers whose prefix caches hold %d tokens each, "+
			"so they evict. The approximate index prices a request by what tollgate routed to the worker; "+
			"KV events by what the worker reports it still holds.", kvSessions, kvTurns, kvSystems, kvWorkers, kvCacheBlocks*16),
		Panels: []Panel{errs, cached, ttft},
	}
}

// printKVEvents prints the two arms side by side.
func printKVEvents(w io.Writer, arms []kvArm) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, a := range arms {
		fmt.Fprintf(tw, "%s\t", a.Name)
	}
	fmt.Fprintln(tw)
	row := func(name string, f func(a kvArm) string) {
		fmt.Fprintf(tw, "%s\t", name)
		for _, a := range arms {
			fmt.Fprintf(tw, "%s\t", f(a))
		}
		fmt.Fprintln(tw)
	}
	row("requests (not 200)", func(a kvArm) string { return fmt.Sprintf("%d (%d)", a.Requests, a.Failed) })
	row("estimate within 1% of prompt", func(a kvArm) string { return fmt.Sprintf("%.0f%%", 100*a.Within1) })
	row("estimate within 5% of prompt", func(a kvArm) string { return fmt.Sprintf("%.0f%%", 100*a.Within5) })
	row("mean estimate error", func(a kvArm) string { return fmt.Sprintf("%+.1f%%", 100*a.MeanErr) })
	row("prefix hit rate (usage)", func(a kvArm) string { return fmt.Sprintf("%.1f%%", 100*a.HitRate) })
	row("TTFT p50", func(a kvArm) string { return fmt.Sprintf("%.1f ms", a.TTFT50.Seconds()*1000) })
	row("TTFT p99", func(a kvArm) string { return fmt.Sprintf("%.1f ms", a.TTFT99.Seconds()*1000) })
	row("priced by events / approximate", func(a kvArm) string {
		if !a.Events {
			return "- / all"
		}
		return fmt.Sprintf("%d / %d", a.ByEvents, a.ByApprox)
	})
	_ = tw.Flush()
}
