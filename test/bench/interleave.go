package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// InterleaveServer is one ext_proc server of an interleaved run.
type InterleaveServer struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
}

// InterleaveConfig configures RunInterleaved.
type InterleaveConfig struct {
	// Servers each get their own Client (one simulated Envoy, one gRPC
	// connection); the one stream visits them in blocks.
	Servers []InterleaveServer
	// Mode is the processing mode.
	Mode Mode
	// Requests is the number of measured requests per server.
	Requests int
	// Warmup is the number of requests per server sent first, interleaved
	// the same way, unmeasured.
	Warmup int
	// Block is the number of requests sent to one server before the
	// stream moves on to the next.
	Block int
}

// InterleaveResult is one server's share of an interleaved run. Latencies
// are over its measured requests that got HTTP 200: Total is the whole
// exchange as the client sees it, Decision the end of request processing
// (the routing decision), both from the request headers.
type InterleaveResult struct {
	Name       string `json:"name"`
	Requests   int    `json:"requests"`
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error,omitempty"`

	TotalP50    time.Duration `json:"total_p50_ns"`
	TotalP99    time.Duration `json:"total_p99_ns"`
	DecisionP50 time.Duration `json:"decision_p50_ns"`
	DecisionP99 time.Duration `json:"decision_p99_ns"`
}

// InterleaveOrder returns the server (0..servers-1) of each request of a
// stream that sends perServer requests to each of servers servers in
// blocks of block: every server's k-th block is sent in cycle k, and with
// three servers or more cycle k starts at server k mod servers, so that
// no server always follows the same one (two servers simply alternate).
// It returns nil unless every argument is positive.
func InterleaveOrder(servers, perServer, block int) []int {
	if servers <= 0 || perServer <= 0 || block <= 0 {
		return nil
	}
	out := make([]int, 0, servers*perServer)
	for cycle := 0; cycle*block < perServer; cycle++ {
		n := min(block, perServer-cycle*block)
		first := 0
		if servers > 2 {
			first = cycle % servers
		}
		for k := range servers {
			s := (first + k) % servers
			for range n {
				out = append(out, s)
			}
		}
	}
	return out
}

// RunInterleaved sends one closed-loop stream (one request at a time)
// through every server's own Client in interleaved blocks: the warm-up
// requests, then Requests measured ones per server, so that the servers
// are measured over the same span of time and the machine's drifting load
// falls on each alike.
func RunInterleaved(ctx context.Context, cfg InterleaveConfig) ([]InterleaveResult, error) {
	if len(cfg.Servers) == 0 || cfg.Requests <= 0 || cfg.Warmup < 0 || cfg.Block <= 0 {
		return nil, errors.New("bench: an interleaved run needs servers and a positive number of requests and block size")
	}
	clients := make([]*Client, len(cfg.Servers))
	defer func() {
		for _, c := range clients {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for i, s := range cfg.Servers {
		c, err := NewClientWith(ClientOptions{Addr: s.Addr, Mode: cfg.Mode, Conns: 1})
		if err != nil {
			return nil, fmt.Errorf("bench: %s: %w", s.Name, err)
		}
		clients[i] = c
	}
	for _, s := range InterleaveOrder(len(cfg.Servers), cfg.Warmup, cfg.Block) {
		// A failed warm-up request is not counted: a server that keeps
		// failing shows in the measured requests.
		_, _ = clients[s].Do(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	total := make([][]time.Duration, len(cfg.Servers))
	decision := make([][]time.Duration, len(cfg.Servers))
	out := make([]InterleaveResult, len(cfg.Servers))
	for i, s := range cfg.Servers {
		out[i].Name = s.Name
	}
	for _, s := range InterleaveOrder(len(cfg.Servers), cfg.Requests, cfg.Block) {
		res, err := clients[s].Do(ctx)
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		out[s].Requests++
		if err := outcome(res, err); err != nil {
			out[s].Errors++
			if out[s].FirstError == "" {
				out[s].FirstError = err.Error()
			}
			continue
		}
		total[s] = append(total[s], res.Timings.Total)
		decision[s] = append(decision[s], res.Timings.Decision)
	}
	for i := range out {
		out[i].TotalP50, out[i].TotalP99 = Percentile(total[i], 50), Percentile(total[i], 99)
		out[i].DecisionP50, out[i].DecisionP99 = Percentile(decision[i], 50), Percentile(decision[i], 99)
	}
	return out, nil
}

// RunLoads runs several loads at once, each its own closed loop with its
// own Client, started together so that their windows coincide, and
// returns their results in the order of cfgs.
func RunLoads(ctx context.Context, cfgs []LoadConfig) ([]LoadResult, error) {
	if len(cfgs) == 0 {
		return nil, errors.New("bench: no loads to run")
	}
	out := make([]LoadResult, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Go(func() {
			r, err := RunLoad(ctx, cfg)
			if err != nil {
				errs[i] = fmt.Errorf("bench: load %d (%s): %w", i, cfg.ExtProcAddr, err)
				return
			}
			out[i] = *r
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}
