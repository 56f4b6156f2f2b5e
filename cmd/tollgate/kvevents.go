package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/intake"
)

// kvEventsOptions are the KV-event flags.
type kvEventsOptions struct {
	enabled     bool
	bind        string
	port        int
	replayPort  int
	resyncSecs  uint64
	maxBlocks   int
	speculative time.Duration
}

func registerKVEventsFlags(fs *flag.FlagSet, k *kvEventsOptions) {
	fs.BoolVar(&k.enabled, "kv-events", false, "price and route with the engines' KV-cache events (workers' kv_events_endpoint, the tollgate.io/kv-events-endpoint pod annotation, --kv-events-port or --kv-events-bind)")
	fs.StringVar(&k.bind, "kv-events-bind", "", "bind one SUB socket (tcp://IP:PORT) that engines connect to, naming themselves in the topic kv@<worker>@<model>; implies --kv-events")
	fs.IntVar(&k.port, "kv-events-port", 0, "dial this KV-event port on every worker that names no endpoint (InferencePool pods); implies --kv-events")
	fs.IntVar(&k.replayPort, "kv-events-replay-port", 0, "with --kv-events-port: the engines' replay port")
	fs.Uint64Var(&k.resyncSecs, "kv-events-resync-secs", uint64(kvevents.DefaultResyncAfter/time.Second), "seconds a worker whose events were lost without replay is priced approximately")
	fs.IntVar(&k.maxBlocks, "kv-events-max-blocks", 1<<22, "bound of the exact prefix index, in (worker, rank, block) entries")
	fs.DurationVar(&k.speculative, "kv-events-speculative-ttl", intake.DefaultSpeculativeTTL, "how long a routed prompt counts as cached on its synced worker before the engine reports it")
}

// on reports whether KV events are enabled.
func (k *kvEventsOptions) on() bool { return k.enabled || k.bind != "" || k.port > 0 }

func (k *kvEventsOptions) validate() error {
	var errs []error
	if k.bind != "" {
		if err := kvevents.CheckEndpoint(k.bind); err != nil {
			errs = append(errs, fmt.Errorf("--kv-events-bind: %w", err))
		}
	}
	if k.port < 0 || k.port > 65535 || k.replayPort < 0 || k.replayPort > 65535 {
		errs = append(errs, errors.New("--kv-events-port and --kv-events-replay-port must be ports"))
	}
	if k.replayPort > 0 && k.port == 0 {
		errs = append(errs, errors.New("--kv-events-replay-port needs --kv-events-port"))
	}
	if k.resyncSecs == 0 {
		errs = append(errs, errors.New("--kv-events-resync-secs must be positive"))
	}
	if k.maxBlocks <= 0 {
		errs = append(errs, errors.New("--kv-events-max-blocks must be positive"))
	}
	if k.speculative <= 0 {
		errs = append(errs, errors.New("--kv-events-speculative-ttl must be positive"))
	}
	return errors.Join(errs...)
}

// checkWorkers refuses workers that name KV-event endpoints while KV events
// are off: the key alone would be ignored.
func (k *kvEventsOptions) checkWorkers(ws []fleet.Worker) error {
	if k.on() {
		return nil
	}
	var named []string
	for _, w := range ws {
		if w.KVEventsEndpoint != "" {
			named = append(named, strconv.Quote(w.ID))
		}
	}
	if len(named) == 0 {
		return nil
	}
	who := "worker " + named[0] + " names"
	if n := len(named); n > 1 {
		if n > 3 {
			named = append(named[:3], fmt.Sprintf("%d more", n-3))
		}
		who = "workers " + strings.Join(named, ", ") + " name"
	}
	return fmt.Errorf("%s kv_events_endpoint, but KV events are off: add --kv-events to price with the engines' KV events, or remove the key", who)
}

// manager makes the KV-event manager, which serve runs, or returns nil
// when events are off. In bind mode its socket is bound already.
func (k *kvEventsOptions) manager(blockSize int, log *slog.Logger) (*kvevents.Manager, error) {
	if !k.on() {
		return nil, nil
	}
	return kvevents.New(kvevents.Config{
		BlockSize:         blockSize,
		MaxBlocks:         k.maxBlocks,
		ResyncAfter:       time.Duration(k.resyncSecs) * time.Second,
		Bind:              k.bind,
		DefaultPort:       k.port,
		DefaultReplayPort: k.replayPort,
		Logger:            log,
	})
}
