// Package kvevents follows the KV-cache events that vLLM and SGLang
// publish over ZeroMQ, so that tollgate knows exactly which prompt blocks
// each worker's engine holds.
//
// A Manager subscribes in one of two modes, over the package zmtp (a
// strict, pure-Go ZMTP). In connect mode it dials each worker's PUB
// endpoint, one stream per data-parallel rank (on the endpoint's port plus
// the rank), and the engine's replay ROUTER socket when it has one. In
// bind mode (Config.Bind) it binds one SUB socket that the engines connect
// to, naming themselves in the topic kv@<worker>@<model>; the rank is the
// batch's, and there is no replay.
//
// A Decoder decodes each message's payload, a msgpack batch in any of the
// engines' shapes (positional arrays or "type"-tagged maps, integer or
// digest hashes), and the Index applies its BlockStored, BlockRemoved and
// AllBlocksCleared events to the exact prefix index. Events it cannot index
// exactly (other media, cache groups or attention kinds, extra hash keys,
// engine block sizes that are not multiples of Config.BlockSize) are
// skipped and counted.
//
// Every stream, a (worker, rank) pair, follows the batches' sequence
// numbers and reports its sync state to the Index. It is in sync once it
// holds every batch since its publisher's first (received live, or fetched
// from the replay socket to fill a gap), once the engine cleared its cache,
// or once Config.ResyncAfter has passed since it lost batches it could not
// replay, the index having been rebuilt from then on. A publisher restart
// or a reconnection starts the stream over. The index speaks for a worker
// while all of its streams are in sync; the request path prices the others
// with its approximate estimate.
//
// New validates the configuration, binds bind mode's socket and starts
// nothing; SetWorkers sets the workers, before Run or while it runs; Run
// runs every subscriber until its context ends, then stops them, closing
// every connection at once, and waits for them.
//
// Everything an engine or a peer sends is bounded: a payload by
// MaxPayloadBytes, an event's token ids and block hashes by MaxEventTokens
// (beyond which it is truncated), the index by Config.MaxBlocks (stream,
// block) pairs, every connect and handshake by Config.HandshakeTimeout, a
// replay by Config.ReplayTimeout, bind mode's connections by
// Config.MaxBindConnections, and the ranks of a worker of unknown DP size
// by MaxUnknownRanks. What is dropped is counted in the Manager's
// Collectors.
package kvevents
