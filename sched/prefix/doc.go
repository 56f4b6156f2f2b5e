// Package prefix holds tollgate's two prefix-cache indexes and the block
// hashes they share. Index is the approximate one: the router's own record
// of which worker was sent which prompt blocks, used to estimate how many of
// a new request's prompt tokens each worker already holds in its KV cache
// (Dynamo's approximate, no-KV-events mode). Exact is the precise one: the
// blocks each engine reports cached through its KV-cache events. Which
// figure prices a worker is the cache view's rule (extproc/intake), not
// this package's.
//
// A prompt is cut into full blocks of a fixed size (tokens, or bytes when no
// exact tokenizer is configured) and each block gets a chained 64-bit hash:
// block i's hash covers block i and, through its parent, every block before
// it. Two prompts share block i's hash only if they share the whole prefix up
// to and including block i, so matching leading blocks is matching a prefix.
// Hashes are seeded by a name: the same text under two names never matches.
// tollgate seeds a LoRA adapter's blocks by the adapter's name and a base
// model's blocks by "", whatever the model is called, so that engines' events
// match requests even where the configuration names no model; workers of two
// base models are told apart by the models they serve, not by the hash. The hash functions are deterministic and stable across processes,
// builds and platforms; HashTokens and HashBytes are separate domains.
//
// An Index maps block hashes to the workers that were sent them. Record is
// called when a request is dispatched; entries expire a fixed TTL after their
// last Record and the index holds at most a fixed number of (hash, worker)
// entries, evicting the least recently recorded first. Lookup returns, per
// worker, the number of leading blocks of a prompt that worker holds, in
// tokens. Expired entries are never reported and are reclaimed lazily by
// Record, or eagerly by Prune.
//
// The package is pure: it imports only the standard library (and the sched
// contract types), never reads the clock (time is an argument), starts no
// goroutines and does no I/O. Neither index is safe for concurrent use;
// their owners guard them with a mutex. The hash functions are safe for concurrent
// use.
package prefix
