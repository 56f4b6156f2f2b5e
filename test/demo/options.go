package demo

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tollgate/tollgate/examples"
)

// Scenario names accepted by Options.Scenario.
const (
	ScenarioAll      = "all"
	ScenarioPremium  = "premium"
	ScenarioPriority = "priority"
	ScenarioEngine   = "engine"
	ScenarioKVEvents = "kvevents"
	ScenarioFairness = "fairness"
	ScenarioGateways = "gateways"
	ScenarioRollout  = "rollout"
	ScenarioPD       = "pd"
)

// Scenarios lists the scenarios in the order ScenarioAll runs them.
var Scenarios = []string{ScenarioPremium, ScenarioPriority, ScenarioEngine, ScenarioKVEvents, ScenarioFairness, ScenarioGateways, ScenarioRollout, ScenarioPD}

// DefaultOut is the directory the charts are written to by default.
const DefaultOut = "demo-out"

// The example configuration files the scenarios load, relative to the
// examples directory.
const (
	fileEqualShare = "equal_share.yaml"
	filePremium4x  = "premium_4x.yaml"
	filePriority   = "priority.yaml"
	fileTenantRate = "tenant-rate-limits.yaml"
)

// exampleFiles are the example files the scenarios load.
var exampleFiles = []string{fileEqualShare, filePremium4x, filePriority, fileTenantRate}

// Options configures Run and Serve. The zero value of every field except
// Stdout selects its default.
type Options struct {
	// Stdout receives the progress lines, tables and chart paths. Required.
	Stdout io.Writer
	// Stderr receives the servers' warnings and errors. Nil discards them.
	Stderr io.Writer
	// Terminal says Stdout is a terminal: the progress line is then
	// rewritten in place with \r instead of printed once a second.
	Terminal bool
	// Out is the directory the SVG charts are written to. Empty means
	// DefaultOut.
	Out string
	// Scenario is ScenarioAll or one of Scenarios. Empty means
	// ScenarioAll.
	Scenario string
	// Speed multiplies the simulated workers' prefill and decode rates (and
	// compresses the priority scenario's arrival schedule to match). Zero
	// means 1.
	Speed float64
	// Seed seeds the scheduler's tie-breaker and the priority scenario's
	// arrival schedule. Zero means 1.
	Seed uint64
	// Examples is the directory holding equal_share.yaml, premium_4x.yaml
	// and priority.yaml. Empty means the copies built into the program
	// (package examples).
	Examples string
	// Serve is the address Serve's HTTP front listens on.
	Serve string

	// serveReady, when set, is called by Serve with the front and /metrics
	// addresses once everything is listening (tests).
	serveReady func(front, metrics string)
}

// withDefaults returns o with every zero field set to its default and the
// examples directory, when one is given, checked.
func (o Options) withDefaults() (Options, error) {
	if err := o.validate(); err != nil {
		return o, err
	}
	if o.Out == "" {
		o.Out = DefaultOut
	}
	if o.Scenario == "" {
		o.Scenario = ScenarioAll
	}
	if o.Speed == 0 {
		o.Speed = 1
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Examples != "" {
		for _, f := range exampleFiles {
			if _, err := os.Stat(filepath.Join(o.Examples, f)); err != nil {
				return o, fmt.Errorf("demo: examples directory %s: %w", o.Examples, err)
			}
		}
	}
	return o, nil
}

// validate reports every invalid field, joined.
func (o Options) validate() error {
	var errs []error
	if o.Stdout == nil {
		errs = append(errs, errors.New("demo: no output writer"))
	}
	if o.Scenario != "" && o.Scenario != ScenarioAll && !slices.Contains(Scenarios, o.Scenario) {
		errs = append(errs, fmt.Errorf("demo: unknown scenario %q (want %s or one of %s)", o.Scenario, ScenarioAll, strings.Join(Scenarios, ", ")))
	}
	if o.Speed < 0 || math.IsNaN(o.Speed) || math.IsInf(o.Speed, 0) {
		errs = append(errs, fmt.Errorf("demo: speed must be a positive number, got %v", o.Speed))
	} else if o.Speed > maxSpeed {
		errs = append(errs, fmt.Errorf("demo: speed %v is above %v: the simulated prefill would be faster than the request path and the demo would measure the machine, not the scheduler", o.Speed, float64(maxSpeed)))
	}
	return errors.Join(errs...)
}

// maxSpeed bounds Options.Speed: at 20 a premium prefill takes 1 ms.
const maxSpeed = 20

// useExamples makes o.Examples a directory holding the example files: with
// none given, a temporary copy of the built-in ones, which cleanup removes.
// shown is how to name the directory to the user: the one given, or
// "examples" (the repository directory the built-in files come from).
func (o *Options) useExamples() (shown string, cleanup func(), err error) {
	if o.Examples != "" {
		return o.Examples, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "tollgate-demo-examples-")
	if err != nil {
		return "", nil, fmt.Errorf("demo: copy of the built-in examples: %w", err)
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	for _, f := range exampleFiles {
		data, err := fs.ReadFile(examples.FS(), f)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, f), data, 0o600)
		}
		if err != nil {
			cleanup()
			return "", nil, fmt.Errorf("demo: copy of the built-in examples: %w", err)
		}
	}
	o.Examples = dir
	return "examples", cleanup, nil
}
