// Package intake turns what an ext_proc stream read (request headers and
// the OpenAI-style body) into an immutable scheduler request: it resolves
// the tenant and the effective priority class (SMG's tenant clamp, the
// objective table), reads the flow-control and pin headers, parses the
// body (extproc/request/openai), counts the prompt tokens with the model's
// tokenizer and chat template (extproc/request/tokenize, with bounded heavy
// work), hashes the prompt into blocks and prices it per worker.
//
// It owns four runtime facts, each in one place:
//
//   - the CacheView: tollgate's own record of what it routed (the
//     approximate index and the speculative entries), the engines' exact
//     index it reads (fed by extproc/engine/kvevents), and the pricing
//     rule that decides which figure counts for each worker;
//   - the ObjectiveTable and the RewriteTable: the operator's flags merged
//     over what discovery found, with the shared name budget; discovery
//     reports what it found and logs the server's answer;
//   - the tokenizer glue, which serve's pricing and tollgate tokenize
//     (CountPrompt) share, so the two cannot drift.
//
// A Planner runs in the stream goroutines, in parallel, and is safe for
// concurrent use. It refuses a request with a *Rejection; the shell maps
// its reason to the HTTP answer. intake never imports the shell.
package intake
