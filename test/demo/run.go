package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// Run runs the scenarios o selects, printing progress and result tables to
// o.Stdout and writing one SVG chart per scenario to o.Out.
func Run(ctx context.Context, o Options) error {
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	builtin := o.Examples == ""
	configs, cleanup, err := o.useExamples()
	if err != nil {
		return err
	}
	defer cleanup()
	if builtin {
		configs += " (built in)"
	}
	log := logger(o.Stderr)
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("demo: output directory: %w", err)
	}
	start := time.Now()
	w := o.Stdout
	fmt.Fprintf(w, "tollgate demo: the real ext_proc server and scheduler, a simulated Envoy (BUFFERED request body,\n")
	fmt.Fprintf(w, "streamed response) and simulated vLLM workers, all on loopback. speed %g, seed %d, configs from %s\n", o.Speed, o.Seed, configs)

	if o.Scenario == ScenarioAll || o.Scenario == ScenarioPremium {
		fmt.Fprintf(w, "\n== 1. Dynamo policy classes: premium vs regular under Deficit Round Robin\n")
		fmt.Fprintf(w, "One worker runs 4 sequences; %d premium and %d regular requests of 512 uncached tokens are released\n", upstreamPerClass, upstreamPerClass)
		fmt.Fprintf(w, "together. prefill_busy_threshold 1536 queues everything past four prefills; whenever a first token frees\n")
		fmt.Fprintf(w, "a prefill, DRR picks the next class by its quantum. Run with %s, then %s.\n\n", fileEqualShare, filePremium4x)
		arms, err := runPremium(ctx, premiumConfig{
			perClass: upstreamPerClass, speed: o.Speed, seed: o.Seed, examples: o.Examples,
			stdout: w, terminal: o.Terminal, log: log,
		})
		if err != nil {
			return interrupted(ctx, err)
		}
		printPremium(w, arms)
		if err := writeChart(w, filepath.Join(o.Out, "premium.svg"), premiumChart(arms)); err != nil {
			return err
		}
	}
	if o.Scenario == ScenarioAll || o.Scenario == ScenarioPriority {
		fmt.Fprintf(w, "\n== 2. SMG priority admission: reservations, tenant clamp, preemption\n")
		fmt.Fprintf(w, "Phase 1: a batch tenant submits %d bulk jobs at once while %d interactive users (auth:acme) and %d users of\n",
			defaultPhase1.bulk, defaultPhase1.users[0], defaultPhase1.users[1])
		fmt.Fprintf(w, "a tenant without a tenant policy (auth:free, asking for system) keep sending. Phase 2: bulk fills every slot\n")
		fmt.Fprintf(w, "it may use and stalls before its first token; an interactive burst fills the rest and one more preempts.\n\n")
		res, err := runPriority(ctx, priorityConfig{
			speed: o.Speed, seed: o.Seed, examples: o.Examples,
			stdout: w, terminal: o.Terminal, log: log,
		})
		if err != nil {
			return interrupted(ctx, err)
		}
		printPriority(w, res)
		if err := writeChart(w, filepath.Join(o.Out, "priority.svg"), priorityChart(res)); err != nil {
			return err
		}
	}
	if o.Scenario == ScenarioAll || o.Scenario == ScenarioEngine {
		fmt.Fprintf(w, "\n== 3. Engine metrics: a worker busy with traffic tollgate did not route\n")
		fmt.Fprintf(w, "%d workers of %d sequences; %d outside clients keep worker-0's engine at 4 running and up to 8 waiting,\n", engineWorkers, engineSeqs, engineOutside)
		fmt.Fprintf(w, "which tollgate's bookings cannot see. %d clients send %d streamed requests through tollgate, first with bookings\n", engineClients, engineRequests)
		fmt.Fprintf(w, "only, then with engine metrics (500ms scrapes, saturation above 5 waiting).\n")
		arms, err := runEngine(ctx, engineConfig{requests: engineRequests, speed: o.Speed, seed: o.Seed, log: log})
		if err != nil {
			return interrupted(ctx, err)
		}
		printEngine(w, arms)
		if err := writeChart(w, filepath.Join(o.Out, "engine.svg"), engineChart(arms)); err != nil {
			return err
		}
	}
	if o.Scenario == ScenarioAll || o.Scenario == ScenarioKVEvents {
		fmt.Fprintf(w, "\n== 4. Prefix cache: the approximate index against the engines' KV events\n")
		fmt.Fprintf(w, "%d chat sessions of %d turns share %d system prompts of %d tokens on %d workers whose prefix caches hold\n",
			kvSessions, kvTurns, kvSystems, kvSystemToks, kvWorkers)
		fmt.Fprintf(w, "%d tokens each, so they evict. Run once with tollgate's own record of what it routed, then with the\n", kvCacheBlocks*16)
		fmt.Fprintf(w, "engines' KV events; the estimate is compared with the cached_tokens each worker reports in usage.\n\n")
		arms, err := runKVEvents(ctx, kvConfig{speed: o.Speed, seed: o.Seed, stdout: w, log: log})
		if err != nil {
			return interrupted(ctx, err)
		}
		printKVEvents(w, arms)
		if err := writeChart(w, filepath.Join(o.Out, "kvevents.svg"), kvChart(arms)); err != nil {
			return err
		}
	}
	if o.Scenario == ScenarioAll || o.Scenario == ScenarioFairness {
		fmt.Fprintf(w, "\n== 5. Fair share between tenants inside a policy class (--fairness)\n")
		fmt.Fprintf(w, "One worker, one policy class whose busy gate queues everything past three prefills. Tenant auth:noisy sends\n")
		fmt.Fprintf(w, "%d requests at once; tenant auth:quiet sends %d spread over the same period. Run with --fairness none\n", noisyRequests, quietRequests)
		fmt.Fprintf(w, "(Dynamo's FCFS lane), then --fairness tenant (DRR over uncached tokens between the tenants' flows).\n\n")
		arms, err := runFairness(ctx, fairConfig{
			noisy: noisyRequests, quiet: quietRequests, speed: o.Speed, seed: o.Seed,
			stdout: w, terminal: o.Terminal, log: log,
		})
		if err != nil {
			return interrupted(ctx, err)
		}
		printFairness(w, arms)
		if err := writeChart(w, filepath.Join(o.Out, "fairness.svg"), fairChart(arms)); err != nil {
			return err
		}
	}
	if o.Scenario == ScenarioAll || o.Scenario == ScenarioGateways {
		fmt.Fprintf(w, "\n== 6. Two gateways, two tollgate replicas, one scheduler\n")
		fmt.Fprintf(w, "The weighted premium/regular run (%s) with its requests arriving through two simulated Envoys,\n", filePremium4x)
		fmt.Fprintf(w, "gateway B getting every fourth request of each class (3:1 ingress). Each gateway talks to its own tollgate\n")
		fmt.Fprintf(w, "replica in replica mode; %s, elected, schedules for both.\n\n", replicaID(gatewaysScheduler))
		arm, err := runGateways(ctx, premiumConfig{
			perClass: upstreamPerClass, speed: o.Speed, seed: o.Seed, examples: o.Examples,
			stdout: w, terminal: o.Terminal, log: log,
		})
		if err != nil {
			return interrupted(ctx, err)
		}
		printGateways(w, arm)
		if err := writeChart(w, filepath.Join(o.Out, "gateways.svg"), gatewaysChart(arm)); err != nil {
			return err
		}
	}
	if o.Scenario == ScenarioAll || o.Scenario == ScenarioRollout {
		fmt.Fprintf(w, "\n== 7. Rolling update: every tollgate replica replaced under load\n")
		fmt.Fprintf(w, "%d tollgate replicas in replica mode, each behind its own simulated Envoy, in front of the premium/regular\n", rolloutReplicas)
		fmt.Fprintf(w, "worker (%s); %d premium and %d regular clients send one request at a time through all of them. Each\n", filePremium4x, rolloutClients, rolloutClients)
		fmt.Fprintf(w, "replica in turn hands the scheduler over if it holds it (the demo plays the election), drains and stops, its\n")
		fmt.Fprintf(w, "Envoy's share going to the others, and a new replica with the same identity takes its place.\n\n")
		res, err := runRollout(ctx, rolloutConfig{
			clients: rolloutClients, steady: rolloutSteady, speed: o.Speed, seed: o.Seed, examples: o.Examples,
			stdout: w, terminal: o.Terminal, log: log,
		})
		if err != nil {
			return interrupted(ctx, err)
		}
		printRollout(w, res)
		if err := writeChart(w, filepath.Join(o.Out, "rollout.svg"), rolloutChart(res)); err != nil {
			return err
		}
	}
	if o.Scenario == ScenarioAll || o.Scenario == ScenarioPD {
		fmt.Fprintf(w, "\n== 8. Prefill/decode disaggregation: long prompts prefilled on a prefill worker\n")
		pdIntro(w)
		arms, err := runPD(ctx, pdConfig{
			requests: pdRequests, speed: o.Speed, seed: o.Seed,
			stdout: w, terminal: o.Terminal, log: log,
		})
		if err != nil {
			return interrupted(ctx, err)
		}
		printPD(w, arms)
		if err := writeChart(w, filepath.Join(o.Out, "pd.svg"), pdChart(arms)); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\ndemo finished in %.1fs\n", time.Since(start).Seconds())
	return nil
}

// interrupted reports a run cut short by ctx as such, not as the failed
// request that noticed it.
func interrupted(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("demo: interrupted: %w", context.Cause(ctx))
	}
	return err
}

// writeChart writes c to path and prints where it went.
func writeChart(w io.Writer, path string, c Chart) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("demo: chart: %w", err)
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	if err := WriteSVG(f, c); err != nil {
		return fmt.Errorf("demo: chart %s: %w", path, err)
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	fmt.Fprintf(w, "\n  chart: %s\n", path)
	return nil
}

// logger logs the servers' warnings and errors to w, or nothing for nil.
func logger(w io.Writer) *slog.Logger {
	if w == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
