package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/engine/enginemetrics"
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/sched"
)

// The engine-truth scenario: worker-0 also serves clients that do not go
// through tollgate, so tollgate's bookings say it is as free as the
// others while its engine queue is not.
const (
	engineWorkers = 3
	engineSeqs    = 4
	// engineOutside is the number of outside clients that keep one request
	// each in flight on worker-0: 4 running and up to 8 waiting, past the
	// saturation threshold (5 waiting) most of the time.
	engineOutside = 12
	// engineClients is the number of tollgate clients sending in a loop.
	engineClients = 8
	// engineRequests is the tollgate requests per arm (at full size).
	engineRequests = 240
	enginePrompt   = 256
	engineMaxToks  = 8
)

// engineArm is one run of the engine scenario.
type engineArm struct {
	Name string
	// TTFT is every tollgate request's time to first token, client side.
	TTFT []time.Duration
	// P50, P99 are percentiles of TTFT.
	P50, P99 time.Duration
	// ToSlow counts tollgate requests routed to worker-0; Total all.
	ToSlow, Total, Non200 int
	// PeakQueue is worker-0's largest engine waiting queue.
	PeakQueue int
	// Queue samples worker-0's waiting queue over time.
	Queue   []Point
	Elapsed time.Duration
}

// engineConfig configures runEngine.
type engineConfig struct {
	requests int
	speed    float64
	seed     uint64
	log      *slog.Logger
}

// runEngine runs the scenario without engine metrics, then with them.
func runEngine(ctx context.Context, cfg engineConfig) ([]*engineArm, error) {
	var arms []*engineArm
	for _, withMetrics := range []bool{false, true} {
		arm, err := runEngineArm(ctx, cfg, withMetrics)
		if err != nil {
			return nil, err
		}
		arms = append(arms, arm)
	}
	return arms, nil
}

// engineServerConfig is a demo server configuration with engine metrics at
// the shipped defaults, or without them.
func engineServerConfig(spec serverSpec, withMetrics bool, log *slog.Logger) (extproc.Config, error) {
	cfg, err := spec.build(log)
	if err != nil || !withMetrics {
		return cfg, err
	}
	cfg.EngineMetrics = &enginemetrics.Config{}
	cfg.Sched.Engine = sched.EngineConfig{
		MaxAge: 2 * time.Second, Saturation: true, WaitingThreshold: 5, KVThreshold: 0.8,
		WarmStart: true, WarmWait: 2*enginemetrics.DefaultInterval + enginemetrics.DefaultTimeout, Capacity: true,
	}
	return cfg, nil
}

func runEngineArm(ctx context.Context, cfg engineConfig, withMetrics bool) (*engineArm, error) {
	arm := &engineArm{Name: "bookings only"}
	if withMetrics {
		arm.Name = "engine metrics"
	}
	st := &stack{}
	defer st.close()
	ws := workerSpec{maxNumSeqs: engineSeqs, prefillRate: 8000, decodeRate: 50}
	var workers []fleet.Worker
	for i := range engineWorkers {
		sw, err := startWorker(ctx, fmt.Sprintf("worker-%d", i), ws, cfg.speed, cfg.log)
		if err != nil {
			return nil, err
		}
		st.workers = append(st.workers, sw)
		workers = append(workers, fleet.Worker{ID: sw.id, Address: sw.addr, MaxRunningRequests: engineSeqs, Model: demoModel})
	}
	scfg, err := engineServerConfig(serverSpec{seed: cfg.seed}, withMetrics, cfg.log)
	if err != nil {
		return nil, err
	}
	if err := st.startServer(ctx, scfg, workers); err != nil {
		return nil, err
	}
	slow := st.workers[0]

	// Outside clients keep worker-0 busy for the whole arm.
	octx, stopOutside := context.WithCancel(ctx)
	var outside sync.WaitGroup
	defer func() { stopOutside(); outside.Wait() }()
	client := &http.Client{}
	for i := range engineOutside {
		outside.Go(func() {
			body := completionBody(900000+i, enginePrompt, engineMaxToks, false)
			for octx.Err() == nil {
				req, err := http.NewRequestWithContext(octx, http.MethodPost, "http://"+slow.addr+"/v1/completions", bytes.NewReader(body))
				if err != nil {
					return
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
	// Let the outside load settle and, with metrics, be scraped once.
	if err := sleepCtx(ctx, time.Second); err != nil {
		return nil, err
	}

	// Sample worker-0's queue.
	start := time.Now()
	sctx, stopSampling := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	var samples []Point
	sampler.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			q := slow.w.Stats().Waiting
			samples = append(samples, Point{X: time.Since(start).Seconds(), Y: float64(q)})
			arm.PeakQueue = max(arm.PeakQueue, q)
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
		}
	})

	var (
		mu   sync.Mutex
		next int
		errs = make(chan error, engineClients)
		wg   sync.WaitGroup
	)
	for range engineClients {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= cfg.requests {
					return
				}
				spec := &reqSpec{id: "engine-" + strconv.Itoa(i), tokenID: 1000 + i, tokens: enginePrompt, maxTokens: engineMaxToks, stream: true}
				resp, err := st.sim.Do(ctx, spec.request())
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				arm.Total++
				if resp.Status != http.StatusOK || resp.Reset {
					arm.Non200++
				} else {
					arm.TTFT = append(arm.TTFT, resp.Timings.FirstByte)
				}
				if resp.Endpoint == slow.addr {
					arm.ToSlow++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	arm.Elapsed = time.Since(start)
	stopSampling()
	sampler.Wait()
	arm.Queue = samples
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	arm.P50 = percentile(arm.TTFT, 0.50)
	arm.P99 = percentile(arm.TTFT, 0.99)
	return arm, nil
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// printEngine prints the arms side by side.
func printEngine(w io.Writer, arms []*engineArm) {
	fmt.Fprintf(w, "\nEngine truth: %d workers x %d sequences; worker-0 also serves %d outside clients\n\n", engineWorkers, engineSeqs, engineOutside)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "arm\trequests\tnon-200\tTTFT p50\tTTFT p99\tsent to worker-0\tworker-0 peak queue\ttime")
	for _, a := range arms {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%d\t%.1fs\n", a.Name, a.Total, a.Non200,
			a.P50.Round(time.Millisecond), a.P99.Round(time.Millisecond), a.ToSlow, a.PeakQueue, a.Elapsed.Seconds())
	}
	_ = tw.Flush()
}

// engineChart plots worker-0's engine queue over time and the time to
// first token of tollgate's requests in both arms.
func engineChart(arms []*engineArm) Chart {
	p := Panel{
		Title:  "worker-0's engine waiting queue: outside clients plus what tollgate sent there",
		XLabel: "seconds since the tollgate clients started",
		YLabel: "waiting requests",
	}
	for i, a := range arms {
		p.Series = append(p.Series, Series{
			Name:   a.Name,
			Legend: fmt.Sprintf("%s: %d of %d requests sent to worker-0, peak %d waiting", a.Name, a.ToSlow, a.Total, a.PeakQueue),
			Color:  palette[i%len(palette)],
			Points: a.Queue,
		})
	}
	cdf := Panel{
		Title:  "time to first token of tollgate's requests",
		XLabel: "x = time to first token (ms)",
		YLabel: "requests with TTFT ≤ x",
	}
	for i, a := range arms {
		ds := slices.Clone(a.TTFT)
		slices.Sort(ds)
		s := Series{Name: a.Name, Color: palette[i%len(palette)], Points: []Point{{0, 0}},
			Legend: fmt.Sprintf("%s: p50 %s, p99 %s", a.Name, msString(a.P50), msString(a.P99))}
		for j, d := range ds {
			s.Points = append(s.Points, Point{X: float64(d) / float64(time.Millisecond), Y: float64(j + 1)})
		}
		cdf.Series = append(cdf.Series, s)
	}
	return Chart{
		Title: "Engine metrics: a worker busy with traffic tollgate did not route",
		Subtitle: fmt.Sprintf("%d workers of %d sequences; %d outside clients keep worker-0's engine at %d running and up to 8 waiting, "+
			"which tollgate's bookings cannot see. With engine metrics (scrapes every 500 ms, saturated above 5 waiting) "+
			"tollgate sees the queue and routes around it.", engineWorkers, engineSeqs, engineOutside, engineSeqs),
		Panels: []Panel{p, cdf},
	}
}

// msString formats d in whole milliseconds, "433 ms".
func msString(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
}
