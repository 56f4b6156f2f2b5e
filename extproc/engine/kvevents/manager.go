package kvevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/extproc/engine/kvevents/zmtp"
)

// Defaults for Config.
const (
	DefaultResyncAfter    = 30 * time.Second
	DefaultReplayTimeout  = 10 * time.Second
	DefaultReconnectDelay = time.Second
	// DefaultHandshakeTimeout bounds connecting to an engine and the
	// ZeroMQ handshake, either way.
	DefaultHandshakeTimeout = zmtp.DefaultHandshakeTimeout
	// DefaultMaxBindConnections bounds bind mode's connections (one per
	// engine DP rank).
	DefaultMaxBindConnections = zmtp.DefaultMaxConns
	// MaxUnknownRanks bounds, in bind mode, the distinct DP ranks a worker
	// whose DP size is unknown may publish; batches of further ranks are
	// dropped (counted).
	MaxUnknownRanks = 8
	// TopicPrefix is llm-d's topic convention, kv@<pod>@<model>, and the
	// subscription filter of bind mode.
	TopicPrefix = "kv@"
)

// maxFrames bounds a received message's frames: an event message has three
// (topic, sequence, payload), a replayed one an empty frame before them.
const maxFrames = 4

// Config configures a Manager.
type Config struct {
	// BlockSize is tollgate's --block-size; engine block sizes must be
	// multiples of it.
	BlockSize int
	// MaxBlocks bounds the index in (stream, block) pairs; 0 means
	// prefix.DefaultExactMaxBlocks.
	MaxBlocks int
	// ResyncAfter bounds how long a stream that lost events without a
	// replay stays out of sync (priced approximately) before its rebuilt
	// index is trusted again.
	ResyncAfter time.Duration
	// ReplayTimeout bounds one replay.
	ReplayTimeout time.Duration
	// ReconnectDelay is the wait between connection attempts.
	ReconnectDelay time.Duration
	// HandshakeTimeout bounds connecting to an engine's publisher or
	// replay socket and the handshake, and an engine's handshake in bind
	// mode; 0 means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Bind, when set, is the endpoint of one SUB socket engines connect to,
	// naming themselves in the topic (kv@<worker>@<model>).
	Bind string
	// MaxBindConnections bounds bind mode's connections; 0 means
	// DefaultMaxBindConnections.
	MaxBindConnections int
	// DefaultPort and DefaultReplayPort, when set, are dialled on the
	// address of every worker that names no endpoint of its own
	// (InferencePool discovery).
	DefaultPort, DefaultReplayPort int
	// Logger gets connection failures and recoveries; nil discards them.
	Logger *slog.Logger
}

// Endpoint is one worker's event configuration.
type Endpoint struct {
	Worker string
	// Address is the worker's IP, dialled on Config.DefaultPort when
	// Endpoint is empty.
	Address string
	// Endpoint is the engine's PUB endpoint (tcp://IP:PORT) of its first
	// DP rank; rank i publishes on the port plus i. Empty in bind mode.
	Endpoint string
	// Replay is the engine's replay ROUTER endpoint, offset the same way;
	// empty when the engine has none.
	Replay  string
	DPStart uint32
	// DPSize is the worker's DP ranks; 0 when unknown.
	DPSize uint32
}

// Manager runs one subscriber per worker and DP rank (or one bound socket),
// keeps every stream's sync state and feeds the Index. It is safe for
// concurrent use.
//
// Its lifecycle is New, then Run, once: New starts nothing, SetWorkers
// before Run records the workers for Run to subscribe to, and Run owns
// every goroutine, ending them all before it returns.
//
// Each worker's index entries have one writer at a time: its subscription
// in dial mode, the bound socket's goroutine in bind mode. A worker removed
// or changed by SetWorkers is let go of by that writer once it has stopped
// (the end of a batch being applied at most), never by SetWorkers, which
// waits for nothing; a worker's next subscription starts after that.
type Manager struct {
	cfg   Config
	idx   *Index
	m     *metrics
	log   *slog.Logger
	zopts zmtp.Options

	// ln is bind mode's socket: bound by New, served and closed by Run.
	ln       net.Listener
	bindAddr string
	wg       sync.WaitGroup

	// mu guards the fields below; it is never held across network I/O or
	// an index update.
	mu sync.Mutex
	// stage is where the Manager is in its lifecycle; run is Run's
	// context while it runs.
	stage stage
	run   context.Context
	subs  map[string]*subscription // dial mode, by worker
	// released maps a worker whose subscription was stopped to a channel
	// closed once that subscription let go of the worker.
	released map[string]chan struct{}
	// workers is the worker set of the last SetWorkers, by worker id. In
	// bind mode gone lists the workers removed or changed since the bound
	// socket's goroutine last let go of them, and kick wakes it for them.
	workers map[string]Endpoint
	gone    []string
	kick    chan struct{}
	// peerErrs are the bind-mode connection errors logged, by reason.
	peerErrs map[string]bool
}

// stage is a Manager's lifecycle stage.
type stage uint8

const (
	stageNew     stage = iota // made by New, Run not called yet
	stageRunning              // in Run
	stageDone                 // Run returned (or is returning)
)

type subscription struct {
	ep     Endpoint
	cancel context.CancelFunc
	// done is closed once the subscription's streams ended and it let go
	// of the worker's index entries.
	done chan struct{}
}

// New validates cfg and returns a Manager that runs nothing until Run.
//
// With cfg.Bind set, New binds the SUB socket (and accepts nothing on it
// yet), so that a taken port fails New and BindEndpoint is known at once;
// engines that connect before Run wait in the socket's backlog. Run
// serves the socket and closes it when it returns: a Manager of bind mode
// must be Run, if only with a context already done, to release it.
func New(cfg Config) (*Manager, error) {
	if cfg.BlockSize <= 0 {
		return nil, errors.New("kvevents: block size must be positive")
	}
	m := makeManager(cfg)
	if cfg.Bind != "" {
		if err := checkEndpoint(cfg.Bind); err != nil {
			return nil, fmt.Errorf("kvevents: bind endpoint: %w", err)
		}
		ln, err := zmtp.Bind(cfg.Bind)
		if err != nil {
			return nil, fmt.Errorf("kvevents: bind %s: %w", cfg.Bind, err)
		}
		m.ln, m.bindAddr = ln, zmtp.EndpointOf(ln.Addr())
	}
	return m, nil
}

// makeManager returns a Manager of cfg, with its defaults, that runs
// nothing yet.
func makeManager(cfg Config) *Manager {
	setDur := func(p *time.Duration, d time.Duration) {
		if *p <= 0 {
			*p = d
		}
	}
	setDur(&cfg.ResyncAfter, DefaultResyncAfter)
	setDur(&cfg.ReplayTimeout, DefaultReplayTimeout)
	setDur(&cfg.ReconnectDelay, DefaultReconnectDelay)
	setDur(&cfg.HandshakeTimeout, DefaultHandshakeTimeout)
	if cfg.MaxBindConnections <= 0 {
		cfg.MaxBindConnections = DefaultMaxBindConnections
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{
		cfg: cfg, idx: NewIndex(cfg.BlockSize, cfg.MaxBlocks), m: newMetrics(),
		log:  cfg.Logger,
		subs: make(map[string]*subscription), released: make(map[string]chan struct{}),
		workers: make(map[string]Endpoint), kick: make(chan struct{}, 1), peerErrs: make(map[string]bool),
	}
	m.zopts = zmtp.Options{
		MaxFrameSize: MaxPayloadBytes, MaxFrames: maxFrames,
		HandshakeTimeout: cfg.HandshakeTimeout, MaxConns: cfg.MaxBindConnections,
		OnPeerError: m.bindPeerError,
	}
	return m
}

// BindEndpoint returns the bound endpoint of bind mode (with the port
// chosen when Config.Bind asked for port 0), or "".
func (m *Manager) BindEndpoint() string { return m.bindAddr }

// Index returns the index the Manager feeds.
func (m *Manager) Index() *Index { return m.idx }

// Collectors returns the Manager's metrics, for registration.
func (m *Manager) Collectors() []prometheus.Collector { return m.m.collectors(m) }

// Run runs the subscribers until ctx ends: bind mode's socket, and one
// subscription per worker and DP rank of the last SetWorkers. Then it
// stops them all, closing every connection at once whatever the engines
// do, waits for them and returns nil. A Manager runs once: a second Run
// returns an error at once.
func (m *Manager) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.mu.Lock()
	if m.stage != stageNew {
		m.mu.Unlock()
		return errors.New("kvevents: Manager.Run called twice")
	}
	m.stage, m.run = stageRunning, ctx
	if m.ln != nil {
		l := zmtp.ServeSub(ctx, m.ln, []byte(TopicPrefix), m.zopts)
		m.wg.Go(func() { m.runBound(ctx, l) })
	}
	m.resubscribe()
	m.mu.Unlock()

	<-ctx.Done()
	m.mu.Lock()
	m.stage, m.run = stageDone, nil // SetWorkers starts nothing more
	m.mu.Unlock()
	cancel()
	m.wg.Wait()
	return nil
}

// SetWorkers sets the workers to subscribe to. While Run runs it starts,
// restarts and stops subscribers to match eps; before Run it records eps
// for Run to start; after Run returned it does nothing. Workers left out
// are forgotten by the index. It never waits: subscribers it stops end in
// the background, and let go of their workers' index entries as they end.
func (m *Manager) SetWorkers(eps []Endpoint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stage == stageDone {
		return
	}
	want := make(map[string]Endpoint, len(eps))
	for _, ep := range eps {
		if ep.Endpoint == "" && ep.Address != "" && m.cfg.DefaultPort > 0 && m.cfg.Bind == "" {
			ep.Endpoint = "tcp://" + net.JoinHostPort(ep.Address, strconv.Itoa(m.cfg.DefaultPort))
			if m.cfg.DefaultReplayPort > 0 {
				ep.Replay = "tcp://" + net.JoinHostPort(ep.Address, strconv.Itoa(m.cfg.DefaultReplayPort))
			}
		}
		want[ep.Worker] = ep
	}
	m.setWorkers(want)
	if m.stage == stageRunning {
		m.resubscribe()
	}
}

// resubscribe starts, restarts and stops dial mode's subscriptions to
// match m.workers; m.mu is held and Run runs.
func (m *Manager) resubscribe() {
	for w, s := range m.subs {
		if ep, ok := m.workers[w]; !ok || ep != s.ep {
			s.cancel()
			delete(m.subs, w)
			m.released[w] = s.done
		}
	}
	for w, done := range m.released {
		if isClosed(done) {
			delete(m.released, w)
		}
	}
	for w, ep := range m.workers {
		if _, ok := m.subs[w]; ok || ep.Endpoint == "" {
			continue
		}
		m.subs[w] = m.subscribe(ep, m.released[w])
	}
}

// setWorkers replaces the worker set; m.mu is held. In bind mode the
// bound socket's goroutine lets go of the workers removed or changed.
func (m *Manager) setWorkers(want map[string]Endpoint) {
	if m.cfg.Bind == "" {
		m.workers = want
		return
	}
	for w, ep := range m.workers {
		if nep, ok := want[w]; !ok || nep != ep {
			m.gone = append(m.gone, w)
		}
	}
	m.workers = want
	if len(m.gone) > 0 {
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
}

// subscribe starts a worker's subscription: one stream per DP rank, once
// the worker's previous subscription (after, when not nil) let go of it.
// m.mu is held and Run runs.
func (m *Manager) subscribe(ep Endpoint, after <-chan struct{}) *subscription {
	ctx, cancel := context.WithCancel(m.run)
	s := &subscription{ep: ep, cancel: cancel, done: make(chan struct{})}
	m.wg.Go(func() {
		defer close(s.done)
		if after != nil {
			<-after // prompt: the previous subscription was cancelled
		}
		if ctx.Err() == nil {
			m.runWorker(ctx, ep)
		}
		// Let go of the worker: nothing of this subscription writes to
		// the index any more.
		m.idx.RemoveWorker(ep.Worker)
	})
	return s
}

// runWorker runs a worker's streams until ctx ends.
func (m *Manager) runWorker(ctx context.Context, ep Endpoint) {
	var wg sync.WaitGroup
	for i := range max(ep.DPSize, 1) {
		st := newStreamState(Stream{Worker: ep.Worker, Rank: ep.DPStart + i}, time.Now())
		m.idx.SetSynced(st.Worker, st.Rank, false)
		m.m.unsynced.Inc()
		pub, replay := OffsetPort(ep.Endpoint, int(i)), ""
		if ep.Replay != "" {
			replay = OffsetPort(ep.Replay, int(i))
		}
		wg.Go(func() { m.runDial(ctx, st, pub, replay) })
	}
	wg.Wait()
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// runDial subscribes to one publisher until ctx ends, reconnecting.
func (m *Manager) runDial(ctx context.Context, st *streamState, endpoint, replay string) {
	dec := NewDecoder()
	var b Batch
	defer func() {
		if !st.synced {
			m.m.unsynced.Dec()
		}
	}()
	for ctx.Err() == nil {
		sub, err := zmtp.DialSub(ctx, endpoint, nil, m.zopts)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.m.connects.WithLabelValues(st.Worker, "error").Inc()
			m.lost(st, endpoint, err)
			m.tick(st)
			sleep(ctx, m.cfg.ReconnectDelay)
			continue
		}
		m.m.connects.WithLabelValues(st.Worker, "ok").Inc()
		if st.tr.started {
			// Reconnected: batches may have been lost, or the engine is a
			// new process whose sequence could continue by chance. Start
			// over as a subscriber joining mid-stream (a replay from 0, or
			// the bounded resync).
			m.idx.Clear(st.Worker, st.Rank)
			st.tr.reset()
			m.setSynced(st, false)
		}
		err = m.receive(ctx, sub, func(msg *zmtp.Message) {
			m.recovered(st, endpoint)
			if len(msg.Frames) != 3 {
				m.m.malformed.WithLabelValues(st.Worker).Inc()
				return
			}
			seq, ok := parseSeq(msg.Frames[1])
			if !ok {
				m.m.malformed.WithLabelValues(st.Worker).Inc()
				return
			}
			m.handle(ctx, st, dec, &b, seq, msg.Frames[2], replay)
		}, func() { m.tick(st) })
		_ = sub.Close()
		if ctx.Err() != nil {
			return
		}
		m.lost(st, endpoint, err)
		sleep(ctx, m.cfg.ReconnectDelay)
	}
}

// receive passes every message of sub to fn until ctx ends or the
// connection does, and returns why the connection ended (nil when ctx
// did); tick runs every second meanwhile.
func (m *Manager) receive(ctx context.Context, sub *zmtp.Sub, fn func(*zmtp.Message), tick func()) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case msg, ok := <-sub.Messages():
			if !ok {
				return sub.Err()
			}
			fn(msg)
		case <-t.C:
			tick()
		}
	}
}

// lost counts a failed or ended connection of a stream and logs it when
// the stream's state changes: the first failure since it last received a
// message, or a failure for another reason. A peer that fails the same way
// on every reconnect is logged once.
func (m *Manager) lost(st *streamState, endpoint string, err error) {
	reason := zmtp.Reason(err)
	if reason != "dial" {
		m.m.disconnects.WithLabelValues(st.Worker, reason).Inc()
	}
	if st.down == reason {
		return
	}
	st.down = reason
	m.log.Warn("kv events: engine connection failed, retrying", "worker", st.Worker, "rank", st.Rank,
		"endpoint", endpoint, "reason", reason, "error", err)
}

// recovered logs a stream's first message after its connection failed.
func (m *Manager) recovered(st *streamState, endpoint string) {
	if st.down != "" {
		m.log.Info("kv events: engine connection recovered", "worker", st.Worker, "rank", st.Rank, "endpoint", endpoint)
		st.down = ""
	}
}

// bindPeerError counts a bind-mode connection that failed or ended, and
// logs each reason the first time.
func (m *Manager) bindPeerError(err error) {
	reason := zmtp.Reason(err)
	m.m.disconnects.WithLabelValues("", reason).Inc()
	if reason == "closed" {
		return // an engine went away: it reconnects on its own
	}
	m.mu.Lock()
	logged := m.peerErrs[reason]
	m.peerErrs[reason] = true
	m.mu.Unlock()
	if !logged {
		m.log.Warn("kv events: bind-mode connection refused or closed (logged once per reason; counted in tollgate_kv_events_disconnects_total)",
			"reason", reason, "error", err)
	}
}

// tick ends a bounded resync.
func (m *Manager) tick(st *streamState) {
	if !st.synced && time.Since(st.since) >= m.cfg.ResyncAfter {
		m.setSynced(st, true)
	}
}

func (m *Manager) setSynced(st *streamState, synced bool) {
	if st.synced == synced {
		return
	}
	st.synced = synced
	if !synced {
		st.since = time.Now()
		m.m.unsynced.Inc()
	} else {
		m.m.unsynced.Dec()
	}
	m.idx.SetSynced(st.Worker, st.Rank, synced)
}

// handle applies one live batch of a stream, replaying missed batches when
// it can.
func (m *Manager) handle(ctx context.Context, st *streamState, dec *Decoder, b *Batch, seq uint64, payload []byte, replay string) {
	switch st.tr.check(seq) {
	case vDuplicate:
		m.m.duplicates.WithLabelValues(st.Worker).Inc()
		return
	case vRestart:
		m.m.restarts.WithLabelValues(st.Worker).Inc()
		m.log.Info("kv events: publisher restarted, clearing", "worker", st.Worker, "rank", st.Rank, "seq", seq, "last", st.tr.last)
		m.idx.Clear(st.Worker, st.Rank)
		st.tr.reset()
		if seq == 0 {
			// A fresh engine: its cache is empty and this is its first batch.
			m.setSynced(st, true)
			break
		}
		fallthrough
	case vGap:
		from := uint64(0)
		if st.tr.started {
			from = st.tr.last + 1
			m.m.gaps.WithLabelValues(st.Worker).Inc()
		}
		if replay != "" && m.replay(ctx, st, dec, b, replay, from, seq) {
			m.tick(st)
			return
		}
		// Events were lost: what the index holds may be stale. Start over
		// and price the worker approximately until the bound passes.
		m.idx.Clear(st.Worker, st.Rank)
		m.setSynced(st, false)
	case vApply:
		if !st.tr.started && seq == 0 {
			m.setSynced(st, true)
		}
	}
	m.apply(st, dec, b, seq, payload)
	m.tick(st)
}

// apply decodes and applies one batch and moves the tracker past it.
func (m *Manager) apply(st *streamState, dec *Decoder, b *Batch, seq uint64, payload []byte) {
	st.tr.applied(seq)
	if err := dec.Decode(payload, b); err != nil {
		m.m.malformed.WithLabelValues(st.Worker).Inc()
		m.log.Debug("kv events: malformed batch dropped", "worker", st.Worker, "seq", seq, "error", err)
		return
	}
	a := m.idx.Apply(time.Now(), st.Stream, b, &st.group)
	for i := range b.Events {
		m.m.events.WithLabelValues(st.Worker, b.Events[i].Kind.String()).Inc()
	}
	m.m.blocks.WithLabelValues(st.Worker, "stored").Add(float64(a.Stored))
	m.m.blocks.WithLabelValues(st.Worker, "removed").Add(float64(a.Removed))
	m.m.blocks.WithLabelValues(st.Worker, "dropped").Add(float64(a.Dropped))
	m.m.skipped.WithLabelValues(st.Worker).Add(float64(a.Skipped))
	if a.Truncated > 0 {
		m.m.truncated.WithLabelValues(st.Worker).Add(float64(a.Truncated))
		if !st.truncated {
			st.truncated = true
			m.log.Warn("kv events: an event named more tokens than tollgate indexes; truncated (logged once per stream)",
				"worker", st.Worker, "rank", st.Rank, "max_tokens", MaxEventTokens)
		}
	}
	if a.Cleared > 0 {
		m.setSynced(st, true) // the engine's cache is empty: nothing is stale
	}
}

// replay asks the replay socket for every batch from from on and applies
// them; it reports whether the stream is contiguous through until. The
// connect, handshake and whole exchange end within ReplayTimeout.
func (m *Manager) replay(ctx context.Context, st *streamState, dec *Decoder, b *Batch, endpoint string, from, until uint64) bool {
	rctx, cancel := context.WithTimeout(ctx, m.cfg.ReplayTimeout)
	defer cancel()
	result := "failed"
	defer func() { m.m.replays.WithLabelValues(st.Worker, result).Inc() }()
	d, err := zmtp.DialDealer(rctx, endpoint, m.zopts)
	if err != nil {
		m.replayFailed(st, endpoint, err)
		return false
	}
	defer func() { _ = d.Close() }()
	var start [8]byte
	putSeq(start[:], from)
	if err := d.Send([]byte{}, start[:]); err != nil {
		m.replayFailed(st, endpoint, err)
		return false
	}
	for {
		msg, err := d.Recv()
		if err != nil {
			m.replayFailed(st, endpoint, err)
			return false
		}
		fr := msg.Frames
		if len(fr) > 0 && len(fr[0]) == 0 {
			fr = fr[1:]
		}
		if len(fr) != 2 {
			m.m.malformed.WithLabelValues(st.Worker).Inc()
			return false
		}
		seq, ok := parseSeq(fr[0])
		if !ok {
			m.m.malformed.WithLabelValues(st.Worker).Inc()
			return false
		}
		if seq == endOfReplay {
			if st.tr.started && st.tr.last >= until {
				st.tr.floor = until
				result = "ok"
				return true
			}
			return false
		}
		switch st.tr.check(seq) {
		case vDuplicate:
			continue
		case vApply:
			if !st.tr.started {
				m.setSynced(st, true) // replayed from the publisher's first batch
			}
			m.apply(st, dec, b, seq, fr[1])
		case vGap, vRestart:
			return false // the buffer no longer holds what is missing
		}
	}
}

// replayFailed counts and logs a replay connection that failed.
func (m *Manager) replayFailed(st *streamState, endpoint string, err error) {
	reason := zmtp.Reason(err)
	if reason != "dial" && reason != "closed_locally" {
		m.m.disconnects.WithLabelValues(st.Worker, reason).Inc()
	}
	m.log.Debug("kv events: replay failed", "worker", st.Worker, "rank", st.Rank, "endpoint", endpoint, "reason", reason, "error", err)
}

// boundStreams are bind mode's streams, kept by the bound socket's
// goroutine.
type boundStreams struct {
	streams map[streamKey]*streamState
	// ranks counts each worker's streams.
	ranks map[string]int
}

// runBound serves bind mode until ctx ends: engines connect and name
// themselves in the topic; each (worker, rank) gets its own sequence
// tracking, without replay.
func (m *Manager) runBound(ctx context.Context, l *zmtp.Listener) {
	defer func() { _ = l.Close() }()
	dec := NewDecoder()
	var b Batch
	bs := boundStreams{streams: make(map[streamKey]*streamState), ranks: make(map[string]int)}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-l.Messages():
			if !ok {
				return
			}
			m.boundMessage(ctx, &bs, dec, &b, msg)
			msg.Release()
		case <-m.kick:
			m.letGo(&bs, m.boundView(""))
		case <-t.C:
			m.letGo(&bs, m.boundView(""))
			for _, st := range bs.streams {
				m.tick(st)
			}
		}
	}
}

// boundEntry is what bind mode knows of a worker when a message comes.
type boundEntry struct {
	ep    Endpoint
	known bool
	// gone are the workers to let go of first.
	gone []string
}

// boundView returns worker's entry and takes the workers to let go of, in
// one hold of m.mu: a worker's new entry is never seen before its old
// streams are let go of.
func (m *Manager) boundView(worker string) boundEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := boundEntry{gone: m.gone}
	m.gone = nil
	if worker != "" {
		e.ep, e.known = m.workers[worker]
	}
	return e
}

// letGo drops the streams of the workers removed or changed, and their
// index entries.
func (m *Manager) letGo(bs *boundStreams, e boundEntry) {
	for _, w := range e.gone {
		for k, st := range bs.streams {
			if k.worker == w {
				if !st.synced {
					m.m.unsynced.Dec()
				}
				delete(bs.streams, k)
			}
		}
		delete(bs.ranks, w)
		m.idx.RemoveWorker(w)
	}
}

// boundMessage handles one bind-mode message.
func (m *Manager) boundMessage(ctx context.Context, bs *boundStreams, dec *Decoder, b *Batch, msg *zmtp.Message) {
	if len(msg.Frames) != 3 {
		m.m.malformed.WithLabelValues("").Inc()
		return
	}
	worker, _, ok := parseTopic(msg.Frames[0])
	seq, sok := parseSeq(msg.Frames[1])
	if !ok || !sok {
		m.m.malformed.WithLabelValues("").Inc()
		return
	}
	e := m.boundView(worker)
	m.letGo(bs, e)
	if !e.known {
		m.m.unknownWorker.Inc()
		return
	}
	// The rank is in the payload; decode it first.
	if err := dec.Decode(msg.Frames[2], b); err != nil {
		m.m.malformed.WithLabelValues(worker).Inc()
		return
	}
	k := streamKey{worker, b.Rank}
	st := bs.streams[k]
	if st == nil {
		if !rankAllowed(e.ep, b.Rank, bs.ranks[worker]) {
			m.m.rankRejected.WithLabelValues(worker).Inc()
			return
		}
		st = newStreamState(Stream{Worker: worker, Rank: b.Rank}, time.Now())
		bs.streams[k] = st
		bs.ranks[worker]++
		m.idx.SetSynced(worker, b.Rank, false)
		m.m.unsynced.Inc()
	}
	m.handle(ctx, st, dec, b, seq, msg.Frames[2], "")
}

// rankAllowed reports whether bind mode takes a new stream of a worker's
// DP rank, given the streams it has: a rank of the worker's known DP
// ranks, or one of the first MaxUnknownRanks when its DP size is unknown.
func rankAllowed(ep Endpoint, rank uint32, streams int) bool {
	if ep.DPSize > 0 {
		return rank >= ep.DPStart && rank-ep.DPStart < ep.DPSize
	}
	return streams < MaxUnknownRanks
}

type streamKey struct {
	worker string
	rank   uint32
}

// parseTopic splits llm-d's kv@<pod>@<model> topic.
func parseTopic(topic []byte) (pod, model string, ok bool) {
	rest, found := strings.CutPrefix(string(topic), TopicPrefix)
	if !found {
		return "", "", false
	}
	pod, model, _ = strings.Cut(rest, "@")
	return pod, model, pod != ""
}

// OffsetPort adds off to the port of a tcp://host:port endpoint, as a
// data-parallel engine offsets its endpoints by its rank; other endpoints
// get vLLM's "_dp<rank>" suffix when off > 0.
func OffsetPort(endpoint string, off int) string {
	if off == 0 {
		return endpoint
	}
	if rest, ok := strings.CutPrefix(endpoint, "tcp://"); ok {
		host, port, err := net.SplitHostPort(rest)
		if p, perr := strconv.Atoi(port); err == nil && perr == nil {
			return "tcp://" + net.JoinHostPort(host, strconv.Itoa(p+off))
		}
	}
	return endpoint + "_dp" + strconv.Itoa(off)
}

// CheckEndpoint validates a tcp://IP:PORT or ipc:// endpoint.
func CheckEndpoint(endpoint string) error { return checkEndpoint(endpoint) }

func checkEndpoint(endpoint string) error {
	if len(endpoint) > 256 {
		return errors.New("endpoint longer than 256 bytes")
	}
	if rest, ok := strings.CutPrefix(endpoint, "tcp://"); ok {
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return fmt.Errorf("%q: %w", endpoint, err)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			return fmt.Errorf("%q: bad port", endpoint)
		}
		if host == "" {
			return fmt.Errorf("%q: no host", endpoint)
		}
		return nil
	}
	if strings.HasPrefix(endpoint, "ipc://") && len(endpoint) > len("ipc://") {
		return nil
	}
	return fmt.Errorf("%q: want tcp://HOST:PORT or ipc://PATH", endpoint)
}

func putSeq(b []byte, seq uint64) {
	for i := 7; i >= 0; i-- {
		b[i] = byte(seq)
		seq >>= 8
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
