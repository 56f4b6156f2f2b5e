package mockworker

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"math"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/test/kvwire"
)

// DefaultKVBufferSteps is how many batches the replay socket keeps (vLLM's
// buffer_steps).
const DefaultKVBufferSteps = 10000

// KVEventsConfig makes a worker publish its prefix cache's changes in
// vLLM's KV-event format: ZMQ PUB frames [topic, 8-byte big-endian
// sequence, msgpack batch], and optionally a ROUTER replay socket.
type KVEventsConfig struct {
	// Endpoint is where the PUB socket binds, e.g. "tcp://127.0.0.1:0".
	Endpoint string
	// ReplayEndpoint, when set, is where the replay ROUTER binds.
	ReplayEndpoint string
	// Connect makes the PUB socket connect to Endpoint instead (bind mode
	// of the subscriber, llm-d's remote=false).
	Connect bool
	// Topic is the first frame of every message, e.g. "kv@<pod>@<model>".
	Topic string
	// Encoding selects the batch and event shapes and the hash encoding.
	Encoding kvwire.Encoding
	// DPRank, when set, is sent as the batch's data_parallel_rank, and both
	// endpoints' ports are offset by it, as a data-parallel vLLM rank does.
	DPRank *uint32
	// BufferSteps bounds the replay buffer; 0 means DefaultKVBufferSteps.
	BufferSteps int
}

// publisher is a worker's KV-event publisher.
type publisher struct {
	cfg    KVEventsConfig
	pub    zmq4.Socket
	router zmq4.Socket
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards every field below it.
	mu     sync.Mutex
	seq    uint64
	buffer []sent // oldest first
	drop   int
}

type sent struct {
	seq     uint64
	payload []byte
}

func newPublisher(cfg KVEventsConfig) (*publisher, error) {
	if cfg.BufferSteps <= 0 {
		cfg.BufferSteps = DefaultKVBufferSteps
	}
	if cfg.DPRank != nil {
		cfg.Endpoint = kvevents.OffsetPort(cfg.Endpoint, int(*cfg.DPRank))
		if cfg.ReplayEndpoint != "" {
			cfg.ReplayEndpoint = kvevents.OffsetPort(cfg.ReplayEndpoint, int(*cfg.DPRank))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	p := &publisher{cfg: cfg, cancel: cancel, pub: zmq4.NewPub(ctx, quiet)}
	var err error
	if cfg.Connect {
		err = p.pub.Dial(cfg.Endpoint)
	} else {
		err = p.pub.Listen(cfg.Endpoint)
	}
	if err != nil {
		p.close()
		return nil, fmt.Errorf("mockworker: kv events publisher %s: %w", cfg.Endpoint, err)
	}
	if cfg.ReplayEndpoint != "" {
		p.router = zmq4.NewRouter(ctx, quiet, zmq4.WithID(zmq4.SocketIdentity("replay")))
		if err := p.router.Listen(cfg.ReplayEndpoint); err != nil {
			p.close()
			return nil, fmt.Errorf("mockworker: kv events replay %s: %w", cfg.ReplayEndpoint, err)
		}
		p.wg.Go(p.serveReplay)
	}
	return p, nil
}

// endpoints returns the bound PUB and replay endpoints.
func (p *publisher) endpoints() (pub, replay string) {
	if !p.cfg.Connect {
		pub = "tcp://" + p.pub.Addr().String()
	}
	if p.router != nil {
		replay = "tcp://" + p.router.Addr().String()
	}
	return pub, replay
}

// publish sends one batch of events under the next sequence number.
func (p *publisher) publish(events []kvevents.Event) {
	if len(events) == 0 {
		return
	}
	b := kvevents.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: events}
	if p.cfg.DPRank != nil {
		b.Rank, b.HasRank = *p.cfg.DPRank, true
	}
	payload := kvwire.Encode(&b, p.cfg.Encoding)
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.seq
	p.seq++
	p.buffer = append(p.buffer, sent{seq, payload})
	if len(p.buffer) > p.cfg.BufferSteps {
		p.buffer = p.buffer[1:]
	}
	if p.drop > 0 {
		p.drop--
		return
	}
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	_ = p.pub.Send(zmq4.NewMsgFrom([]byte(p.cfg.Topic), s[:], payload))
}

// restart simulates a new engine process: the sequence starts again at 0
// and the replay buffer is empty.
func (p *publisher) restart() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq = 0
	p.buffer = nil
}

// dropNext makes the next n batches go unsent (they stay in the replay
// buffer), as a slow subscriber loses them past the PUB high-water mark.
func (p *publisher) dropNext(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop += n
}

// serveReplay answers [empty, start sequence] with every buffered batch
// from it on, then the end marker, as vLLM's replay socket does.
func (p *publisher) serveReplay() {
	for {
		msg, err := p.router.Recv()
		if err != nil {
			return
		}
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			continue
		}
		id := msg.Frames[0]
		start := binary.BigEndian.Uint64(msg.Frames[2])
		p.mu.Lock()
		batches := make([]sent, 0, len(p.buffer))
		for _, b := range p.buffer {
			if b.seq >= start {
				batches = append(batches, b)
			}
		}
		p.mu.Unlock()
		for _, b := range batches {
			var s [8]byte
			binary.BigEndian.PutUint64(s[:], b.seq)
			if p.router.Send(zmq4.NewMsgFrom(id, []byte{}, s[:], b.payload)) != nil {
				break
			}
		}
		var end [8]byte
		binary.BigEndian.PutUint64(end[:], math.MaxUint64)
		_ = p.router.Send(zmq4.NewMsgFrom(id, []byte{}, end[:], []byte{}))
	}
}

func (p *publisher) close() {
	p.cancel()
	_ = p.pub.Close()
	if p.router != nil {
		_ = p.router.Close()
	}
	p.wg.Wait()
}

// cacheEvents turns one insert into vLLM's events: a BlockStored per run of
// newly cached blocks (chained to the block before it), then a BlockRemoved
// for the evicted blocks.
func cacheEvents(tokens []int, hashes []uint64, inserted []bool, evicted []uint64, blockSize int) []kvevents.Event {
	var evs []kvevents.Event
	for i := 0; i < len(hashes); {
		if !inserted[i] {
			i++
			continue
		}
		j := i
		for j < len(hashes) && inserted[j] {
			j++
		}
		ev := kvevents.Event{Kind: kvevents.KindStored, Hashes: hashes[i:j], BlockSize: blockSize, Medium: "GPU"}
		if i > 0 {
			ev.Parent, ev.HasParent = hashes[i-1], true
		}
		for _, t := range tokens[i*blockSize : j*blockSize] {
			ev.Tokens = append(ev.Tokens, uint32(t))
		}
		evs = append(evs, ev)
		i = j
	}
	if len(evicted) > 0 {
		evs = append(evs, kvevents.Event{Kind: kvevents.KindRemoved, Hashes: evicted, Medium: "GPU"})
	}
	return evs
}
