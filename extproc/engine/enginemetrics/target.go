package enginemetrics

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/tollgate/tollgate/sched"
)

// Target is one worker to scrape.
type Target struct {
	// Worker is the worker id the loads are reported for.
	Worker string
	// URL is the full metrics URL, e.g. http://10.0.0.7:8000/metrics.
	URL string
	// DPStart and DPSize are the worker's DP ranks; DPSize 0 means 1.
	DPStart, DPSize uint32
}

// DefaultURL is the metrics URL of a worker at address (IP:port): the
// engine's API port serves /metrics (vLLM and SGLang both do).
func DefaultURL(address string) string { return "http://" + address + "/metrics" }

// ResolveURL returns the metrics URL of a worker at address (IP:port)
// given an override: "" means DefaultURL; ":PORT/PATH" or "/PATH" are
// relative to the worker's IP (and port); anything else must be an
// absolute http or https URL.
func ResolveURL(address, override string) (string, error) {
	switch {
	case override == "":
		return DefaultURL(address), nil
	case strings.HasPrefix(override, "/"):
		override = "http://" + address + override
	case strings.HasPrefix(override, ":"):
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return "", fmt.Errorf("metrics url %q: worker address %q: %w", override, address, err)
		}
		port, path, ok := strings.Cut(override[1:], "/")
		path = "/" + path
		if !ok {
			path = "/metrics"
		}
		override = "http://" + net.JoinHostPort(host, port) + path
	}
	if err := ValidateURL(override); err != nil {
		return "", err
	}
	return override, nil
}

// ValidateURL checks a metrics URL: absolute http or https with a host.
func ValidateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("metrics url %q: %w", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("metrics url %q must be an absolute http or https URL", raw)
	}
	return nil
}

// Loads converts the report read from t at at into the scheduler's loads.
// A labelled rank r is t's rank r when it lies in t's DP range, else rank
// DPStart+r when r < DPSize (an engine that numbers its ranks from 0);
// other ranks are dropped. Unlabelled series fill what labelled ones lack
// (cache size, capacity); with no labelled rank at all they are the
// worker's load, split evenly over its ranks.
func (t Target) Loads(rep Report, at time.Time) []sched.EngineLoad {
	size := max(t.DPSize, 1)
	var flat *Load
	out := make([]sched.EngineLoad, 0, len(rep.Loads))
	for i := range rep.Loads {
		if !rep.Loads[i].Labelled {
			flat = &rep.Loads[i]
		}
	}
	for i := range rep.Loads {
		l := rep.Loads[i]
		if !l.Labelled {
			continue
		}
		rank, ok := t.rank(l.Rank, size)
		if !ok {
			continue
		}
		if flat != nil {
			l.KVBlocks = cmpOr(l.KVBlocks, flat.KVBlocks)
			l.MaxRunning = cmpOr(l.MaxRunning, flat.MaxRunning)
		}
		out = append(out, engineLoad(t.Worker, rank, &l, at, 1))
	}
	if len(out) == 0 && flat != nil {
		for i := range size {
			out = append(out, engineLoad(t.Worker, t.DPStart+i, flat, at, size))
		}
	}
	return out
}

func (t Target) rank(r, size uint32) (uint32, bool) {
	switch {
	case r >= t.DPStart && uint64(r) < uint64(t.DPStart)+uint64(size):
		return r, true
	case r < size:
		return t.DPStart + r, true
	}
	return 0, false
}

// engineLoad builds one rank's load, a 1/share part of l (rounded up for
// requests, down for capacity).
func engineLoad(worker string, rank uint32, l *Load, at time.Time, share uint32) sched.EngineLoad {
	n := float64(share)
	ceil := func(v float64) uint32 { return uint32(min(clampU64((v+n-1)/n), 1<<31)) }
	return sched.EngineLoad{
		Worker: worker, Rank: rank, At: at,
		Waiting: ceil(l.Waiting), Running: ceil(l.Running),
		KVUsage: l.KVUsage, KVBlocks: l.KVBlocks / uint64(share),
		MaxRunning: uint32(min(l.MaxRunning/uint64(share), 1<<31)),
	}
}

func cmpOr(a, b uint64) uint64 {
	if a != 0 {
		return a
	}
	return b
}
