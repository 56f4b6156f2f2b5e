package kvevents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/sched"
)

// Defaults for Config.
const (
	DefaultResyncAfter    = 30 * time.Second
	DefaultReplayTimeout  = 10 * time.Second
	DefaultReconnectDelay = time.Second
	// TopicPrefix is llm-d's topic convention, kv@<pod>@<model>, and the
	// subscription filter of bind mode.
	TopicPrefix = "kv@"
)

// Config configures a Manager.
type Config struct {
	// BlockSize is tollgate's --block-size; engine block sizes must be
	// multiples of it.
	BlockSize int
	// MaxBlocks bounds the index in (stream, block) pairs; 0 means
	// prefix.DefaultExactMaxBlocks.
	MaxBlocks int
	// SpeculativeTTL: see DefaultSpeculativeTTL.
	SpeculativeTTL time.Duration
	// ResyncAfter bounds how long a stream that lost events without a
	// replay stays out of sync (priced approximately) before its rebuilt
	// index is trusted again.
	ResyncAfter time.Duration
	// ReplayTimeout bounds one replay.
	ReplayTimeout time.Duration
	// ReconnectDelay is the wait between connection attempts.
	ReconnectDelay time.Duration
	// Bind, when set, is the endpoint of one SUB socket engines connect to,
	// naming themselves in the topic (kv@<worker>@<model>).
	Bind string
	// DefaultPort and DefaultReplayPort, when set, are dialled on the
	// address of every worker that names no endpoint of its own
	// (InferencePool discovery).
	DefaultPort, DefaultReplayPort int
	// Now is the clock; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Endpoint is one worker's event configuration.
type Endpoint struct {
	Worker string
	// Model seeds block hashes when an event names no LoRA; when empty the
	// topic's model (kv@<pod>@<model>) is used.
	Model string
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
	DPSize  uint32
}

// Manager runs one subscriber per worker and DP rank (or one bound socket),
// keeps every stream's sync state and feeds the Index. It is safe for
// concurrent use.
type Manager struct {
	cfg Config
	idx *Index
	m   *metrics
	log *slog.Logger

	ctx      context.Context
	cancel   context.CancelFunc
	bindAddr string
	wg       sync.WaitGroup

	mu   sync.Mutex
	subs map[string]*subscription // by worker
	// bound is the worker set known to bind mode, by worker id.
	bound map[string]Endpoint
}

type subscription struct {
	ep     Endpoint
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Manager; with cfg.Bind set it binds its SUB socket now.
func New(cfg Config) (*Manager, error) {
	if cfg.BlockSize <= 0 {
		return nil, errors.New("kvevents: block size must be positive")
	}
	setDur := func(p *time.Duration, d time.Duration) {
		if *p <= 0 {
			*p = d
		}
	}
	setDur(&cfg.ResyncAfter, DefaultResyncAfter)
	setDur(&cfg.ReplayTimeout, DefaultReplayTimeout)
	setDur(&cfg.ReconnectDelay, DefaultReconnectDelay)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		cfg: cfg, idx: NewIndex(cfg.BlockSize, cfg.MaxBlocks, cfg.SpeculativeTTL), m: newMetrics(),
		log: cfg.Logger, ctx: ctx, cancel: cancel,
		subs: make(map[string]*subscription), bound: make(map[string]Endpoint),
	}
	if cfg.Bind != "" {
		if err := checkEndpoint(cfg.Bind); err != nil {
			cancel()
			return nil, fmt.Errorf("kvevents: bind endpoint: %w", err)
		}
		sub := zmq4.NewSub(ctx, zmq4.WithLogger(quietLogger()))
		if err := sub.Listen(cfg.Bind); err != nil {
			cancel()
			return nil, fmt.Errorf("kvevents: bind %s: %w", cfg.Bind, err)
		}
		if err := sub.SetOption(zmq4.OptionSubscribe, TopicPrefix); err != nil {
			cancel()
			_ = sub.Close()
			return nil, fmt.Errorf("kvevents: subscribe: %w", err)
		}
		m.bindAddr = "tcp://" + sub.Addr().String()
		m.wg.Go(func() { m.runBound(sub) })
	}
	return m, nil
}

// BindEndpoint returns the bound endpoint of bind mode (with the port
// chosen when Config.Bind asked for port 0), or "".
func (m *Manager) BindEndpoint() string { return m.bindAddr }

// Index returns the index the Manager feeds.
func (m *Manager) Index() *Index { return m.idx }

// Collectors returns the Manager's metrics, for registration.
func (m *Manager) Collectors() []prometheus.Collector { return m.m.collectors(m) }

// Close stops every subscriber and waits for them.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

// SetWorkers starts, restarts and stops subscribers to match eps. Workers
// left out are forgotten by the index.
func (m *Manager) SetWorkers(eps []Endpoint) {
	m.mu.Lock()
	defer m.mu.Unlock()
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
	m.bound = want
	for w, s := range m.subs {
		if ep, ok := want[w]; !ok || ep != s.ep {
			s.cancel()
			<-s.done
			delete(m.subs, w)
			m.idx.RemoveWorker(w)
		}
	}
	for w, ep := range want {
		if _, ok := m.subs[w]; ok || ep.Endpoint == "" {
			continue
		}
		ctx, cancel := context.WithCancel(m.ctx)
		s := &subscription{ep: ep, cancel: cancel, done: make(chan struct{})}
		m.subs[w] = s
		size := max(ep.DPSize, 1)
		var wg sync.WaitGroup
		for i := range size {
			st := newStreamState(Stream{Worker: ep.Worker, Rank: ep.DPStart + i, Model: ep.Model}, m.cfg.Now())
			m.idx.SetSynced(st.Worker, st.Rank, false)
			m.m.unsynced.Inc()
			pub, replay := OffsetPort(ep.Endpoint, int(i)), ""
			if ep.Replay != "" {
				replay = OffsetPort(ep.Replay, int(i))
			}
			wg.Go(func() { m.runDial(ctx, st, pub, replay) })
		}
		m.wg.Go(func() { wg.Wait(); close(s.done) })
	}
}

// Lookup is Index.Lookup, counted by source.
func (m *Manager) Lookup(now time.Time, hashes []uint64, blockTokens uint64, approx []sched.CachedTokens) []sched.CachedTokens {
	out, src := m.idx.Lookup(now, hashes, blockTokens, approx, nil)
	if src.Events > 0 {
		m.m.cachedTokens.WithLabelValues("events").Observe(float64(src.BestEvents))
	}
	if src.Approximate > 0 {
		m.m.cachedTokens.WithLabelValues("approximate").Observe(float64(src.BestApproximate))
	}
	return out
}

// Record is Index.Record.
func (m *Manager) Record(now time.Time, worker string, hashes []uint64) {
	m.idx.Record(now, worker, hashes)
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
		sub := zmq4.NewSub(ctx, zmq4.WithLogger(quietLogger()), zmq4.WithDialerMaxRetries(0),
			zmq4.WithAutomaticReconnect(false))
		err := sub.Dial(endpoint)
		if err == nil {
			err = sub.SetOption(zmq4.OptionSubscribe, "")
		}
		if err != nil {
			_ = sub.Close()
			m.m.connects.WithLabelValues(st.Worker, "error").Inc()
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
		m.receive(ctx, sub, func(msg zmq4.Msg) {
			if len(msg.Frames) != 3 {
				m.m.malformed.WithLabelValues(st.Worker).Inc()
				return
			}
			seq, ok := parseSeq(msg.Frames[1])
			if !ok {
				m.m.malformed.WithLabelValues(st.Worker).Inc()
				return
			}
			m.handle(ctx, st, dec, &b, seq, msg.Frames[0], msg.Frames[2], replay)
		}, func() { m.tick(st) })
		_ = sub.Close()
		sleep(ctx, m.cfg.ReconnectDelay)
	}
}

// receive passes every message of sub to fn until ctx ends or sub fails;
// tick runs every second meanwhile.
func (m *Manager) receive(ctx context.Context, sub zmq4.Socket, fn func(zmq4.Msg), tick func()) {
	msgs := make(chan zmq4.Msg)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		defer close(msgs)
		for {
			msg, err := sub.Recv()
			if err != nil {
				return
			}
			select {
			case msgs <- msg:
			case <-rctx.Done():
				return
			}
		}
	})
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = sub.Close()
			return
		case msg, ok := <-msgs:
			if !ok {
				return
			}
			fn(msg)
		case <-t.C:
			tick()
		}
	}
}

// tick ends a bounded resync.
func (m *Manager) tick(st *streamState) {
	if !st.synced && m.cfg.Now().Sub(st.since) >= m.cfg.ResyncAfter {
		m.setSynced(st, true)
	}
}

func (m *Manager) setSynced(st *streamState, synced bool) {
	if st.synced == synced {
		return
	}
	st.synced = synced
	if !synced {
		st.since = m.cfg.Now()
		m.m.unsynced.Inc()
	} else {
		m.m.unsynced.Dec()
	}
	m.idx.SetSynced(st.Worker, st.Rank, synced)
}

// handle applies one live batch of a stream, replaying missed batches when
// it can.
func (m *Manager) handle(ctx context.Context, st *streamState, dec *Decoder, b *Batch, seq uint64, topic, payload []byte, replay string) {
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
	m.apply(st, dec, b, seq, topic, payload)
	m.tick(st)
}

// apply decodes and applies one batch and moves the tracker past it.
func (m *Manager) apply(st *streamState, dec *Decoder, b *Batch, seq uint64, topic, payload []byte) {
	st.tr.applied(seq)
	if err := dec.Decode(payload, b); err != nil {
		m.m.malformed.WithLabelValues(st.Worker).Inc()
		m.log.Debug("kv events: malformed batch dropped", "worker", st.Worker, "seq", seq, "error", err)
		return
	}
	s := st.Stream
	if s.Model == "" {
		_, s.Model, _ = parseTopic(topic)
	}
	a := m.idx.Apply(m.cfg.Now(), s, b, &st.group)
	for i := range b.Events {
		m.m.events.WithLabelValues(st.Worker, b.Events[i].Kind.String()).Inc()
	}
	m.m.blocks.WithLabelValues(st.Worker, "stored").Add(float64(a.Stored))
	m.m.blocks.WithLabelValues(st.Worker, "removed").Add(float64(a.Removed))
	m.m.blocks.WithLabelValues(st.Worker, "dropped").Add(float64(a.Dropped))
	m.m.skipped.WithLabelValues(st.Worker).Add(float64(a.Skipped))
	if a.Cleared > 0 {
		m.setSynced(st, true) // the engine's cache is empty: nothing is stale
	}
}

// replay asks the replay socket for every batch from from on and applies
// them; it reports whether the stream is contiguous through until.
func (m *Manager) replay(ctx context.Context, st *streamState, dec *Decoder, b *Batch, endpoint string, from, until uint64) bool {
	rctx, cancel := context.WithTimeout(ctx, m.cfg.ReplayTimeout)
	defer cancel()
	d := zmq4.NewDealer(rctx, zmq4.WithLogger(quietLogger()), zmq4.WithDialerMaxRetries(0))
	defer func() { _ = d.Close() }()
	result := "failed"
	defer func() { m.m.replays.WithLabelValues(st.Worker, result).Inc() }()
	if err := d.Dial(endpoint); err != nil {
		return false
	}
	var start [8]byte
	putSeq(start[:], from)
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, start[:])); err != nil {
		return false
	}
	for {
		msg, err := d.Recv()
		if err != nil {
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
			m.apply(st, dec, b, seq, nil, fr[1])
		case vGap, vRestart:
			return false // the buffer no longer holds what is missing
		}
	}
}

// runBound serves bind mode: engines connect and name themselves in the
// topic; each (worker, rank) gets its own sequence tracking, without replay.
func (m *Manager) runBound(sub zmq4.Socket) {
	dec := NewDecoder()
	var b Batch
	streams := make(map[streamKey]*streamState)
	m.receive(m.ctx, sub, func(msg zmq4.Msg) {
		if len(msg.Frames) != 3 {
			m.m.malformed.WithLabelValues("").Inc()
			return
		}
		worker, model, ok := parseTopic(msg.Frames[0])
		seq, sok := parseSeq(msg.Frames[1])
		if !ok || !sok {
			m.m.malformed.WithLabelValues("").Inc()
			return
		}
		m.mu.Lock()
		ep, known := m.bound[worker]
		m.mu.Unlock()
		if !known {
			m.m.unknownWorker.Inc()
			return
		}
		// The rank is in the payload; decode it first.
		if err := dec.Decode(msg.Frames[2], &b); err != nil {
			m.m.malformed.WithLabelValues(worker).Inc()
			return
		}
		k := streamKey{worker, b.Rank}
		st := streams[k]
		if st == nil {
			if ep.Model != "" {
				model = ep.Model
			}
			st = newStreamState(Stream{Worker: worker, Rank: b.Rank, Model: model}, m.cfg.Now())
			streams[k] = st
			m.idx.SetSynced(worker, b.Rank, false)
			m.m.unsynced.Inc()
		}
		m.handle(m.ctx, st, dec, &b, seq, msg.Frames[0], msg.Frames[2], "")
	}, func() {
		for k, st := range streams {
			m.mu.Lock()
			_, known := m.bound[k.worker]
			m.mu.Unlock()
			if !known {
				if !st.synced {
					m.m.unsynced.Dec()
				}
				delete(streams, k)
				continue
			}
			m.tick(st)
		}
	})
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

func quietLogger() *log.Logger { return log.New(io.Discard, "", 0) }
