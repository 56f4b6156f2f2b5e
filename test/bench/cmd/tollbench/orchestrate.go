package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/test/bench"
)

// options are the run subcommand's flags.
type options struct {
	out      string
	profile  bool
	rounds   int
	warmup   time.Duration
	duration time.Duration
	conc     []int
	held     []int
	running  int
	schedBT  string
	tokBT    string
	command  string
	skip     map[string]bool

	// The long-context phase.
	longTokens   []int
	longTok      []string
	longRequests int
	longWarmup   int
	longChunk    int
	// The response-chunk phase.
	chunks      int
	chunkGap    time.Duration
	chunkConc   int
	chunkRounds int
	// The replicas phase.
	replicaRounds   int
	replicaRequests int
	replicaWarmup   int
	replicaBlock    int
	replicaConc     int
	replicaDuration time.Duration
}

// phases are the names -skip accepts.
var phases = []string{"sched", "e2e", "replicas", "long-context", "response-chunks", "held", "tokenize", "model-tokenize", "engine", "kvevents"}

// runner is one run: its options, scratch directories, progress clock,
// the binaries it built and the report it fills.
type runner struct {
	o      options
	stderr io.Writer
	start  time.Time
	tmp    string // built binaries and generated files
	logs   string // child process logs, under out
	self   string // this executable, re-run for the child subcommands
	bins   map[string]string
	report *bench.Report
	// failures are problems that cost a phase or part of it; the run goes
	// on and reports them under the table.
	failures []string
}

func runAll(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var conc, held, skip, only, longTokens, longTok string
	fs.StringVar(&o.out, "out", "bench-out", "directory of results.md, raw outputs, logs and profiles")
	fs.BoolVar(&o.profile, "profile", false, "also write CPU and allocation profiles of the server code under load")
	fs.IntVar(&o.rounds, "rounds", 5, "end-to-end rounds per server, mode and concurrency (medians are reported)")
	fs.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up of each end-to-end measurement")
	fs.DurationVar(&o.duration, "duration", 1500*time.Millisecond, "measured window of each end-to-end measurement")
	fs.StringVar(&conc, "concurrency", "1,16,64", "end-to-end concurrencies")
	fs.StringVar(&held, "held", "2500,10000", "held-request sizes")
	fs.IntVar(&o.running, "running", 64, "worker slots parked during the held-request phase")
	fs.StringVar(&o.schedBT, "sched-benchtime", "100ms", "-benchtime of the scheduler micro-benchmarks")
	fs.StringVar(&o.tokBT, "tokenize-benchtime", "200ms", "-benchtime of the tokenizer benchmarks")
	fs.StringVar(&o.command, "command", "make bench", "the reproduce command printed with the table")
	fs.StringVar(&skip, "skip", "", "comma-separated phases to skip: "+strings.Join(phases, ", "))
	fs.StringVar(&only, "only", "", "comma-separated phases to run, skipping the others (same names as -skip)")
	fs.StringVar(&longTokens, "long-tokens", "25000,100000", "long-context conversation sizes, in tokens")
	fs.StringVar(&longTok, "long-tokenizers", "estimate,llama3.1,qwen3",
		"long-context tokenizers: estimate and test/tokref models ("+strings.Join(sortedKeys(hfModels), ", ")+")")
	fs.IntVar(&o.longRequests, "long-requests", 20, "long-context conversations measured per pass")
	fs.IntVar(&o.longWarmup, "long-warmup", 2, "long-context warm-up conversations per row")
	fs.IntVar(&o.longChunk, "long-chunk-bytes", 16384, "FULL_DUPLEX_STREAMED request chunk size of the long-context phase")
	fs.IntVar(&o.chunks, "chunks", 64, "token events per streamed response in the response-chunk phase")
	fs.DurationVar(&o.chunkGap, "chunk-gap", time.Millisecond, "the upstream's pause before each token event")
	fs.IntVar(&o.chunkConc, "chunk-concurrency", 16, "streams in flight in the response-chunk phase")
	fs.IntVar(&o.chunkRounds, "chunk-rounds", 5, "rounds of the response-chunk phase (medians are reported)")
	fs.IntVar(&o.replicaRounds, "replica-rounds", 3, "rounds of the replicas phase (medians are reported)")
	fs.IntVar(&o.replicaRequests, "replica-requests", 3000, "replicas phase, hop: measured requests per server, split evenly between the rounds (one stream)")
	fs.IntVar(&o.replicaWarmup, "replica-warmup-requests", 100, "replicas phase, hop: unmeasured requests per server at the start of each round")
	fs.IntVar(&o.replicaBlock, "replica-block", 50, "replicas phase, hop: requests sent to one server before the stream moves on")
	fs.IntVar(&o.replicaConc, "replica-concurrency", 32, "replicas phase, throughput: streams per front (the single replica gets three times as many)")
	fs.DurationVar(&o.replicaDuration, "replica-duration", 2*time.Second, "replicas phase, throughput: measured window of each run (after -warmup)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var err error
	if o.conc, err = intList(conc); err != nil {
		return fmt.Errorf("-concurrency: %w", err)
	}
	if o.held, err = intList(held); err != nil {
		return fmt.Errorf("-held: %w", err)
	}
	if o.longTokens, err = intList(longTokens); err != nil {
		return fmt.Errorf("-long-tokens: %w", err)
	}
	for t := range strings.SplitSeq(longTok, ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		if _, ok := hfModels[t]; !ok && t != estimateTokenizer {
			return fmt.Errorf("-long-tokenizers: unknown tokenizer %q (want %s or one of %s)", t, estimateTokenizer, strings.Join(sortedKeys(hfModels), ", "))
		}
		o.longTok = append(o.longTok, t)
	}
	skipped, err := phaseSet("-skip", skip)
	if err != nil {
		return err
	}
	o.skip = skipped
	if only != "" {
		if skip != "" {
			return errors.New("-skip and -only exclude each other")
		}
		run, err := phaseSet("-only", only)
		if err != nil {
			return err
		}
		for _, p := range append(slices.Clone(phases), "profile") {
			o.skip[p] = !run[p]
		}
	}
	if o.rounds <= 0 || o.duration <= 0 || o.running <= 0 {
		return errors.New("-rounds, -duration and -running must be positive")
	}
	if len(o.longTok) == 0 || o.longRequests <= 0 || o.longWarmup < 0 || o.longChunk < 0 {
		return errors.New("-long-tokenizers and -long-requests must not be empty or zero, -long-warmup and -long-chunk-bytes not negative")
	}
	if o.chunks < 2 || o.chunkGap < 0 || o.chunkConc <= 0 || o.chunkRounds <= 0 {
		return errors.New("-chunks must be at least 2, -chunk-concurrency and -chunk-rounds positive, -chunk-gap not negative")
	}
	if o.replicaRounds <= 0 || o.replicaRequests <= 0 || o.replicaWarmup < 0 || o.replicaBlock <= 0 || o.replicaConc <= 0 || o.replicaDuration <= 0 {
		return errors.New("-replica-rounds, -replica-requests, -replica-block, -replica-concurrency and -replica-duration must be positive, -replica-warmup-requests not negative")
	}
	if _, err := os.Stat("go.mod"); err != nil {
		return errors.New("run from the repository root (no go.mod here)")
	}

	r := &runner{o: o, stderr: stderr, start: time.Now(), bins: map[string]string{}}
	if err := r.setup(); err != nil {
		return err
	}
	defer os.RemoveAll(r.tmp)
	r.phase(ctx, "sched", r.schedPhase)
	r.phase(ctx, "e2e", r.e2ePhase)
	r.phase(ctx, "replicas", r.replicasPhase)
	r.phase(ctx, "long-context", r.longContextPhase)
	r.phase(ctx, "response-chunks", r.responseChunksPhase)
	r.phase(ctx, "held", r.heldPhase)
	r.phase(ctx, "tokenize", r.tokenizePhase)
	r.phase(ctx, "model-tokenize", r.modelTokenizePhase)
	r.phase(ctx, "engine", r.enginePhase)
	r.phase(ctx, "kvevents", r.kvEventsPhase)
	if o.profile {
		r.phase(ctx, "profile", r.profilePhase)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r.report.Wall = time.Since(r.start)
	r.report.LoadAverageEnd = bench.LoadAverage()
	for _, f := range r.failures {
		r.report.Notes = append(r.report.Notes, "FAILED: "+f)
	}
	var md strings.Builder
	if err := r.report.WriteMarkdown(&md); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "results.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	r.progress("done: table written to %s", filepath.Join(o.out, "results.md"))
	_, err = io.WriteString(stdout, md.String())
	if err == nil && len(r.failures) > 0 {
		err = fmt.Errorf("%d phase failures (listed under the table)", len(r.failures))
	}
	return err
}

// phaseSet parses a comma-separated list of phase names.
func phaseSet(flagName, list string) (map[string]bool, error) {
	out := map[string]bool{}
	for s := range strings.SplitSeq(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(phases, s) && (flagName != "-only" || s != "profile") {
			return nil, fmt.Errorf("%s: unknown phase %q (want %s)", flagName, s, strings.Join(phases, ", "))
		}
		out[s] = true
	}
	return out, nil
}

// setup creates the directories and the report header.
func (r *runner) setup() error {
	r.logs = filepath.Join(r.o.out, "logs")
	if err := os.MkdirAll(r.logs, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "tollbench-")
	if err != nil {
		return err
	}
	r.tmp = tmp
	if r.self, err = os.Executable(); err != nil {
		return err
	}
	procs := runtime.NumCPU()
	if v, err := strconv.Atoi(os.Getenv("GOMAXPROCS")); err == nil && v > 0 {
		procs = v
	}
	cmd := r.o.command
	if r.o.profile && !strings.Contains(cmd, "PROFILE") && strings.HasPrefix(cmd, "make bench") {
		cmd += " PROFILE=1"
	}
	r.report = &bench.Report{
		Date:        r.start,
		CPUs:        runtime.NumCPU(),
		CPUModel:    bench.CPUModel(),
		GoVersion:   runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		GOMAXPROCS:  procs,
		LoadAverage: bench.LoadAverage(),
		Command:     cmd,
		Targets:     newTargets(),
	}
	return nil
}

// phase runs one phase unless skipped; its error is recorded, not fatal.
func (r *runner) phase(ctx context.Context, name string, f func(context.Context) error) {
	if r.o.skip[name] || ctx.Err() != nil {
		return
	}
	r.progress("%s: start", name)
	t := time.Now()
	if err := f(ctx); err != nil {
		r.fail("%s: %v", name, err)
	}
	r.progress("%s: done in %s", name, time.Since(t).Round(100*time.Millisecond))
}

// progress prints one progress line on stderr with the elapsed time.
func (r *runner) progress(format string, args ...any) {
	fmt.Fprintf(r.stderr, "[%6.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// fail records a problem for the report and prints it at once.
func (r *runner) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.failures = append(r.failures, msg)
	r.progress("FAILED %s", msg)
}

// note adds a line under the table.
func (r *runner) note(format string, args ...any) {
	r.report.Notes = append(r.report.Notes, fmt.Sprintf(format, args...))
}

// build builds a main package of the module into the scratch directory,
// once, and returns the binary's path.
func (r *runner) build(ctx context.Context, pkg string) (string, error) {
	if p, ok := r.bins[pkg]; ok {
		return p, nil
	}
	p := filepath.Join(r.tmp, filepath.Base(pkg))
	r.progress("building %s", pkg)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", p, pkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	r.bins[pkg] = p
	return p, nil
}

// goBench runs `go test -bench` in pkg, with the extra flags, and saves
// its output under out.
func (r *runner) goBench(ctx context.Context, name, pkg, regex, benchtime string, extra ...string) (*bench.GoBenchRun, error) {
	args := []string{"test", "-run", "^$", "-bench", regex, "-benchmem", "-benchtime", benchtime, "-count", "1", "-timeout", "5m"}
	args = append(append(args, extra...), pkg)
	r.progress("go %s", strings.Join(args, " "))
	out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
	path := filepath.Join(r.o.out, name+".txt")
	if werr := os.WriteFile(path, out, 0o644); werr != nil {
		return nil, werr
	}
	run, perr := bench.ParseGoBench(strings.NewReader(string(out)))
	switch {
	case perr != nil:
		return nil, perr
	case err != nil && len(run.Results) == 0:
		return nil, fmt.Errorf("go test %s: %w; output in %s:\n%s", pkg, err, path, lastLines(string(out), 10))
	case err != nil:
		r.fail("go test %s: %v (failures: %s); partial results kept, output in %s", pkg, err, strings.Join(run.Failures, ", "), path)
	}
	return run, nil
}

func intList(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
