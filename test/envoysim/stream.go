package envoysim

import (
	"context"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// streamEvent is one result of Recv on the side stream. err is io.EOF when
// the server ended the stream cleanly.
type streamEvent struct {
	msg *extprocv3.ProcessingResponse
	err error
}

// sideStream is one Process stream, the per-request gRPC stream Envoy opens
// to the ext_proc server. Sends never block the caller: like Envoy, the
// filter hands a message to the stream and goes on, so a server that stops
// reading cannot stall the message timer. A reader goroutine delivers
// received messages on events until the exchange detaches.
type sideStream struct {
	stream extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc

	events     chan streamEvent // unbuffered: reader -> exchange
	detached   chan struct{}    // closed when the exchange stops reading events
	readerDone chan struct{}
	senderDone chan struct{}
	wake       chan struct{} // capacity 1: a pending "queue changed" signal

	// mu guards queue, stop and halfClose.
	mu        sync.Mutex
	queue     []*extprocv3.ProcessingRequest
	stop      bool // send what is queued, then stop
	halfClose bool // and half-close the stream after that
}

// flushTimeout bounds how long a reset waits for queued messages to reach
// the transport (a server that stopped reading can block sends).
const flushTimeout = 100 * time.Millisecond

// openStream starts a Process stream and its goroutines. The stream lives
// under the Sim's lifetime, not under the downstream request's context: the
// exchange decides how to close it.
func (s *Sim) openStream() (*sideStream, error) {
	ctx, cancel := context.WithCancel(s.life)
	st, err := s.client.Process(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	ss := &sideStream{
		stream:     st,
		cancel:     cancel,
		events:     make(chan streamEvent),
		detached:   make(chan struct{}),
		readerDone: make(chan struct{}),
		senderDone: make(chan struct{}),
		wake:       make(chan struct{}, 1),
	}
	go ss.readLoop()
	go ss.sendLoop(ctx)
	return ss, nil
}

// enqueue hands m to the sender goroutine.
func (ss *sideStream) enqueue(m *extprocv3.ProcessingRequest) {
	ss.mu.Lock()
	ss.queue = append(ss.queue, m)
	ss.mu.Unlock()
	ss.signal()
}

func (ss *sideStream) signal() {
	select {
	case ss.wake <- struct{}{}:
	default:
	}
}

func (ss *sideStream) sendLoop(ctx context.Context) {
	defer close(ss.senderDone)
	for {
		ss.mu.Lock()
		q, stop, halfClose := ss.queue, ss.stop, ss.halfClose
		ss.queue = nil
		ss.mu.Unlock()
		for _, m := range q {
			if err := ss.stream.Send(m); err != nil {
				// The stream is over; the reader reports why.
				return
			}
		}
		if stop {
			if halfClose {
				_ = ss.stream.CloseSend() // an error means the stream already ended
			}
			return
		}
		select {
		case <-ss.wake:
		case <-ctx.Done():
			return
		}
	}
}

func (ss *sideStream) readLoop() {
	defer close(ss.readerDone)
	for {
		m, err := ss.stream.Recv()
		select {
		case ss.events <- streamEvent{msg: m, err: err}:
		case <-ss.detached:
		}
		if err != nil {
			return
		}
	}
}

// closeStream detaches the exchange and ends the stream in the given style.
// A reset lets queued messages go out and then cancels the stream: Envoy's
// half-close and RST_STREAM go out together, and the server sees its context
// cancelled (Recv returns Canceled). A graceful close only half-closes it
// (the server's Recv returns io.EOF) and resets it after the Sim's remote
// close timeout unless the server ends it first; that wait runs in the
// background, owned by the Sim.
func (s *Sim) closeStream(ss *sideStream, style CloseStyle) {
	close(ss.detached)
	graceful := style == CloseGraceful && s.acquire()
	ss.mu.Lock()
	ss.stop, ss.halfClose = true, graceful
	ss.mu.Unlock()
	ss.signal()
	if !graceful {
		// Give messages already handed to the stream a chance to go out
		// before the reset, as they would from Envoy's buffers. This is best
		// effort: gRPC may still drop frames queued when the reset comes.
		t := time.NewTimer(flushTimeout)
		select {
		case <-ss.senderDone:
		case <-t.C:
		}
		t.Stop()
		ss.finish()
		return
	}
	go func() {
		defer s.release()
		t := time.NewTimer(s.cfg.remoteClose)
		defer t.Stop()
		select {
		case <-ss.readerDone:
		case <-t.C:
		case <-s.life.Done():
		}
		ss.finish()
	}()
}

// finish resets the stream and waits for its goroutines.
func (ss *sideStream) finish() {
	ss.cancel()
	<-ss.senderDone
	<-ss.readerDone
}
