package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/answer"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/extproc/request/tokenize"
)

// registerTokenizerFlags registers the flags that choose tokenizers; serve,
// check-config and tokenize share them.
func registerTokenizerFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.tokenizer, "tokenizer", "estimate", "prompt tokenizer of models without --model-tokenizer: estimate, tiktoken:<encoding> or hf:<model directory or tokenizer.json>")
	fs.Var(&o.modelTokenizers, "model-tokenizer", "tokenizer of one model as MODEL=SPEC, SPEC as for --tokenizer (repeatable), e.g. Qwen/Qwen3-8B=hf:/models/qwen3")
	fs.Int64Var(&o.tokenizerCacheBytes, "tokenizer-cache-bytes", tokenize.DefaultReuseCacheBytes,
		"memory for the token ids of long prompts (16 KiB or more) of exact tokenizers, so that a prompt extending a seen one (the next turn of a chat) only encodes its new part (0: off)")
}

// buildTokenizer loads the --tokenizer default and the --model-tokenizer
// mapping, with the prefix id cache attached to their exact tokenizers.
func (o *options) buildTokenizer() (tokenize.Tokenizer, error) {
	if o.tokenizerCacheBytes < 0 {
		return nil, fmt.Errorf("--tokenizer-cache-bytes must not be negative, got %d", o.tokenizerCacheBytes)
	}
	tok, err := tokenize.NewFromSpecs(o.tokenizer, o.modelTokenizers)
	if err != nil {
		return nil, err
	}
	tokenize.AttachReuseCache(tok, tokenize.NewReuseCache(o.tokenizerCacheBytes))
	return tok, nil
}

// runTokenize reads one OpenAI request body on stdin and prints what
// tollgate counts for it: {"model", "tokens", "count", ...}. A request
// serve would reject prints serve's error body on stderr and fails.
// It stops, with the context's error, once ctx ends (SIGINT, SIGTERM).
func runTokenize(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var o options
	fs := flag.NewFlagSet("tokenize", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: tollgate tokenize [flags] < request.json\n\n"+
			"Reads one request body on standard input and prints the prompt token ids\n"+
			"tollgate prices and prefix-matches it by.\n\nFlags (write them as -name or --name):\n")
		fs.PrintDefaults()
	}
	registerTokenizerFlags(fs, &o)
	route := fs.String("route", "auto", "the body's route: completions, chat, responses, embeddings, generate, or auto (chat when the body has messages, else completions)")
	fs.IntVar(&o.maxBodyBytes, "max-body-bytes", extproc.DefaultMaxBodyBytes, "largest request body accepted (413 above)")
	if err := parseFlags(fs, "tokenize", args, stdout, stderr); err != nil {
		return err
	}
	if o.maxBodyBytes <= 0 { // as serve reads it: 0 means the default
		o.maxBodyBytes = extproc.DefaultMaxBodyBytes
	}
	tok, err := o.buildTokenizer()
	if err != nil {
		return err
	}
	body, err := readBody(ctx, stdin, o.maxBodyBytes)
	if err != nil {
		return err
	}
	kind, err := routeKind(*route, body)
	if err != nil {
		return err
	}
	count, err := intake.CountPrompt(ctx, tok, kind, body, o.maxBodyBytes)
	var rej *intake.Rejection
	switch {
	case errors.As(err, &rej):
		a := answer.FromIntake(rej)
		fmt.Fprintf(stderr, "%s\n", a.Body())
		return fmt.Errorf("serve would reject this request with status %d", a.HTTPStatus())
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted: %w", context.Cause(ctx))
	case err != nil:
		return err
	}
	if count.Estimated != "" {
		fmt.Fprintf(stderr, "tollgate tokenize: priced by the estimate, as serve does: %s\n", count.Estimated)
	}
	out, err := json.Marshal(count)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", out)
	return err
}

// readBody reads at most limit+1 bytes of the request body, giving up when
// ctx ends (the read itself is left to the process's exit).
func readBody(ctx context.Context, r io.Reader, limit int) ([]byte, error) {
	type result struct {
		body []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		body, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
		done <- result{body, err}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			return nil, fmt.Errorf("read the request body: %w", res.err)
		}
		return res.body, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("interrupted while reading the request body: %w", context.Cause(ctx))
	}
}

// routeKind maps --route to a route kind; auto looks for a messages member.
func routeKind(route string, body []byte) (openai.Kind, error) {
	switch route {
	case "completions":
		return openai.KindCompletions, nil
	case "chat":
		return openai.KindChatCompletions, nil
	case "responses":
		return openai.KindResponses, nil
	case "embeddings":
		return openai.KindEmbeddings, nil
	case "generate":
		return openai.KindGenerate, nil
	case "auto":
		var probe struct {
			Messages json.RawMessage `json:"messages"`
		}
		if json.Unmarshal(body, &probe) == nil && probe.Messages != nil {
			return openai.KindChatCompletions, nil
		}
		return openai.KindCompletions, nil
	}
	return 0, fmt.Errorf("--route %q: want completions, chat, responses, embeddings, generate or auto", route)
}
