package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched"
)

// FuzzStreamLoop is FuzzExchange one level up: it drives a real Server
// (its dispatcher, its scheduler, the stream loop of Process with its
// notice senders, deadlines and ends) through several concurrent ext_proc
// streams over bufconn, inside a synctest bubble, with the order of events
// taken from the input: opening a stream, Envoy's request and response
// messages on it (some out of place), its reset, its half-close, Drain,
// standby, a new worker set, the end of Run and the passing of time (Envoy's message timer, the queue
// timeout, the wait for Envoy's close after an answer, the first-message
// timeout). One event, together, applies the next two back to back, so that
// they race with what each other set off: a first token with a preemption,
// Envoy's own reply with a route, a reset with a dispatch.
//
// The input is a header of loopHeader bytes, then one byte per event:
//
//   - in[0], the configuration: bits 0-1 the worker set (one worker with
//     one slot, one with two, two with one each, one worker of two ranks
//     with one slot), bit 2 no timer overrides (Envoy's max message timeout
//     0), bit 3 queues of one, bit 4 a drain delay of 10 ms instead of none,
//     bit 5 a queue timeout of 2 s instead of 30 s, bit 6 at most three
//     concurrent streams. Priority admission is always on, and interactive
//     and system may preempt.
//   - in[1:5], the protocol of each of the four stream slots: request body
//     mode b%5, response body mode b/5%5 (in fuzzModes' order),
//     send_body_without_waiting_for_header_response b&128.
//   - then the events: slot b>>6, event (b&63) % numLoopOps.
//
// Once the bubble is idle after each event it checks:
//
//   - every reply a stream receives answers its oldest message of the same
//     kind still waiting for one, per direction, as FuzzExchange checks
//     (timer overrides, at most one per message sent, and the
//     ImmediateResponse aside); Envoy's own reply before the route drops the
//     request messages it held;
//   - a stream gets at most one ImmediateResponse (a preemption, a
//     rejection, a drain) and nothing after it; its end is then clean or a
//     reset; any stream ends cleanly or with a status that names its cause
//     (a reset, a protocol error, no first message, the stream cap), never
//     Unknown or Internal;
//   - the scheduler (the real one, watched by recordingScheduler) hears
//     each request's Submit once, at most one Release, and at most one
//     first token, never after the Release;
//   - the notices reach their stream: a request the scheduler dispatched
//     has its route, one it rejected its answer, and one it preempted
//     before its first token its 503 (unless the stream settled otherwise
//     first); a preemption answer goes only to a request the scheduler
//     preempted;
//   - a request whose stream ended, got an ImmediateResponse, had Envoy's
//     own reply answered, or had the end of its response answered, holds
//     nothing in the scheduler any more;
//   - the scheduler holds nothing for more requests than streams are open,
//     and exactly as many Process calls run as the clients see open: a
//     stream whose handler returned has told its client.
//
// The checks that name a request map it to its stream by the order of the
// Process calls (Server.ids), which is known whenever one stream opened
// between two idle moments.
//
// At the end it resets every stream that is still open and checks that
// every stream ended, that no Process call runs, that the scheduler is idle
// (nothing in flight, queued or booked), that each submitted request was
// released once or rejected by the scheduler, and that Run, the gRPC
// server and the notice senders (Server.Wait) all return. The bubble
// itself is the goroutine leak check: synctest.Test fails when a goroutine
// started in it is still blocked once the test function and its cleanups
// have returned.
//
// Every check runs once the bubble is idle (synctest.Wait) and time moves
// only by the events, so what it asserts does not depend on timing. Only
// together leaves an order to the goroutine scheduler, and every check
// holds whichever way such a race goes.
func FuzzStreamLoop(f *testing.F) {
	for _, seed := range streamLoopSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < loopHeader || len(in) > loopHeader+loopMaxEvents {
			return
		}
		synctest.Test(t, func(t *testing.T) { runStreamLoop(t, in) })
	})
}

// The input's layout and bounds.
const (
	loopHeader    = 5
	loopSlots     = 4
	loopMaxEvents = 64
	// loopMaxStreams bounds the streams one input opens.
	loopMaxStreams = 10
)

// The events of FuzzStreamLoop, the low six bits of an event byte modulo
// numLoopOps.
const (
	// opOpen opens a stream on the slot, unless one is open there; it sends
	// nothing (its first message is still to come).
	opOpen = iota
	// opHeadersBulk, opHeadersInteractive and opHeadersDefault send POST
	// /v1/chat/completions request headers of that class, opening a
	// stream first if the slot has none open.
	opHeadersBulk
	opHeadersInteractive
	opHeadersDefault
	// opHeadersGet sends GET /v1/models headers with end_of_stream:
	// routed outside admission.
	opHeadersGet
	// opHeadersOnly sends POST headers with end_of_stream: no body.
	opHeadersOnly
	// opBodyChunk sends the next third of chatBody.
	opBodyChunk
	// opBodyEnd sends the rest of chatBody (possibly nothing) with
	// end_of_stream.
	opBodyEnd
	opReqTrailers
	// opRespHeaders sends a worker's 200 response headers.
	opRespHeaders
	// opRespHeaders503 sends 503 response headers: Envoy's own reply before
	// the route, a router or worker error after it.
	opRespHeaders503
	opRespBodyEmpty
	// opRespBodyToken sends a non-empty chunk: the first token.
	opRespBodyToken
	// opRespBodyEnd ends the response body, with usage.
	opRespBodyEnd
	opRespTrailers
	// opReset cancels the stream's context: Envoy resets the stream.
	opReset
	// opCloseSend half-closes the stream: io.EOF on the server.
	opCloseSend
	// opDrain starts Server.Drain, once.
	opDrain
	// opSleepShort, opSleepTimer, opSleepClose, opSleepQueue and
	// opSleepLong advance the bubble's clock by 100 ms, 1 s (Envoy's
	// message timeout), 6 s (past answeredCloseWait), 31 s (past the queue
	// timeout and the first-message timeout) and 6 min (past Envoy's max
	// message timeout, which bounds held response headers).
	opSleepShort
	opSleepTimer
	opSleepClose
	opSleepQueue
	opSleepLong
	// opStandby switches the server between leading and standing by.
	opStandby
	// opWorkers switches between the input's worker set and another one
	// (more or fewer slots, a worker removed with requests on it).
	opWorkers
	// opHalt ends Run (the dispatcher) while streams are open: waiting
	// requests are answered 503, later ones too.
	opHalt
	// opTogether applies the next two events back to back, without
	// waiting for the bubble to be idle in between: the second races with
	// what the first set off (a notice, a release, a dispatch).
	opTogether
	numLoopOps
)

var loopOpNames = [numLoopOps]string{
	"open", "headers-bulk", "headers-interactive", "headers-default", "headers-get", "headers-only",
	"body-chunk", "body-end", "req-trailers", "resp-headers", "resp-headers-503", "resp-body-empty",
	"resp-body-token", "resp-body-end", "resp-trailers", "reset", "close-send", "drain",
	"sleep-100ms", "sleep-1s", "sleep-6s", "sleep-31s", "sleep-6m", "standby", "workers", "halt", "together",
}

// loopEvent encodes one event on a slot.
func loopEvent(slot, op int) byte { return byte(slot<<6 | op) }

// loopProto encodes a slot's protocol; the modes are indexes in fuzzModes.
func loopProto(req, resp int, early bool) byte {
	b := byte(req + 5*resp)
	if early {
		b |= 128
	}
	return b
}

// Indexes in fuzzModes.
const (
	fmStreamed = 1
	fmBuffered = 2
	fmDuplex   = 4
)

// loopSeed builds an input from a configuration byte, four protocols and
// events.
func loopSeed(cfg byte, protos [loopSlots]byte, events ...byte) []byte {
	return append(append([]byte{cfg}, protos[:]...), events...)
}

func streamLoopSeeds() [][]byte {
	e := loopEvent
	buffered := loopProto(fmBuffered, fmStreamed, false)
	bufferedHold := loopProto(fmBuffered, fmStreamed, true) // response headers held while preemptible
	duplex := loopProto(fmDuplex, fmDuplex, false)
	streamedEarly := loopProto(fmStreamed, fmStreamed, true)
	// admitThenQueue: slot 0 takes the only slot, slot 1 queues behind it.
	admitThenQueue := []byte{e(0, opHeadersBulk), e(0, opBodyEnd), e(1, opHeadersBulk), e(1, opBodyEnd)}
	finish := func(slot int) []byte {
		return []byte{e(slot, opRespHeaders), e(slot, opRespBodyToken), e(slot, opRespBodyEnd), e(slot, opCloseSend)}
	}
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	return [][]byte{
		// A request queues, is dispatched when the first one ends, and is
		// preempted by an interactive one while its response headers are
		// held; Envoy closes the victim's stream after the 503.
		loopSeed(0, [loopSlots]byte{bufferedHold, bufferedHold, bufferedHold, buffered}, cat(admitThenQueue, finish(0),
			[]byte{e(1, opRespHeaders), e(1, opRespBodyEmpty), e(2, opHeadersInteractive), e(2, opBodyEnd), e(1, opCloseSend)},
			finish(2))...),
		// The same in FULL_DUPLEX_STREAMED, where the held response has no
		// message timer, and the victim's stream is left open (reset after
		// answeredCloseWait).
		loopSeed(0, [loopSlots]byte{duplex, duplex, duplex, duplex}, cat(
			[]byte{e(0, opHeadersBulk), e(0, opBodyChunk), e(0, opBodyEnd), e(1, opHeadersDefault), e(1, opBodyEnd), e(0, opRespHeaders),
				e(0, opRespBodyEmpty), e(2, opHeadersInteractive), e(2, opBodyEnd), e(0, opSleepClose)},
			finish(2), finish(1))...),
		// A client reset while queued; the next request takes the place.
		loopSeed(0, [loopSlots]byte{buffered, buffered, buffered, buffered}, cat(admitThenQueue,
			[]byte{e(1, opReset), e(2, opHeadersDefault), e(2, opBodyEnd)}, finish(0), finish(2))...),
		// Drain while a request is queued, with a silent stream open and an
		// arrival after the shedding.
		loopSeed(1<<4, [loopSlots]byte{buffered, buffered, buffered, buffered}, cat(admitThenQueue,
			[]byte{e(3, opOpen), e(0, opDrain), e(0, opSleepShort), e(1, opCloseSend), e(2, opHeadersDefault), e(2, opBodyEnd)},
			finish(0))...),
		// EOF in the middle of a streamed body, and of a full-duplex one
		// while another request holds the slot.
		loopSeed(0, [loopSlots]byte{streamedEarly, duplex, buffered, buffered},
			e(0, opHeadersDefault), e(0, opBodyChunk), e(0, opCloseSend),
			e(2, opHeadersBulk), e(2, opBodyEnd), e(1, opHeadersDefault), e(1, opBodyChunk), e(1, opCloseSend),
			e(2, opRespHeaders), e(2, opRespBodyEnd), e(2, opCloseSend)),
		// Without timer overrides the queued request is answered before
		// Envoy's timer fires; Envoy never closes the stream.
		loopSeed(1<<2, [loopSlots]byte{buffered, buffered, buffered, buffered}, cat(admitThenQueue,
			[]byte{e(0, opSleepTimer), e(0, opSleepClose)}, finish(0))...),
		// Envoy's own 503 for a queued request (its timeout), then the queue
		// timeout of a second one, and a stream that never sends.
		loopSeed(1<<5, [loopSlots]byte{buffered, streamedEarly, buffered, buffered}, cat(admitThenQueue,
			[]byte{e(1, opRespHeaders503), e(1, opRespBodyEnd), e(2, opHeadersDefault), e(2, opBodyEnd), e(3, opOpen),
				e(0, opSleepTimer), e(0, opSleepClose)}, finish(0))...),
		// Two workers, a GET outside admission, standby while one request
		// is queued, then leading again.
		loopSeed(2, [loopSlots]byte{buffered, buffered, buffered, buffered},
			e(3, opHeadersGet), e(3, opCloseSend), e(0, opHeadersBulk), e(0, opBodyEnd), e(1, opHeadersBulk), e(1, opBodyEnd),
			e(2, opHeadersBulk), e(2, opBodyEnd), e(0, opStandby), e(2, opCloseSend), e(0, opStandby),
			e(2, opHeadersDefault), e(2, opBodyEnd), e(0, opRespHeaders), e(0, opRespBodyEnd), e(0, opCloseSend)),
		// The victim's first token races with its preemption: either it
		// is answered 503, or it carries on and the preemptor waits for
		// its end.
		loopSeed(0, [loopSlots]byte{bufferedHold, bufferedHold, duplex, buffered},
			e(0, opHeadersBulk), e(0, opBodyEnd), e(0, opRespHeaders), e(2, opHeadersInteractive),
			e(0, opTogether), e(2, opBodyEnd), e(0, opRespBodyToken), e(0, opRespBodyEnd), e(0, opCloseSend),
			e(2, opRespHeaders), e(2, opRespBodyEnd), e(2, opCloseSend)),
		// Response headers held for a victim that never sends a token are
		// released when Envoy's timer would fire, after one override.
		loopSeed(0, [loopSlots]byte{bufferedHold, buffered, buffered, buffered},
			e(0, opHeadersBulk), e(0, opBodyEnd), e(0, opRespHeaders), e(0, opSleepTimer), e(0, opSleepLong),
			e(0, opRespBodyEnd), e(0, opCloseSend)),
		// A reset frees the slot for a queued request while an interactive
		// one arrives: the queued request is dispatched and preempted at
		// once, and its notices give the route, then the 503.
		loopSeed(0, [loopSlots]byte{buffered, bufferedHold, buffered, buffered}, cat(admitThenQueue,
			[]byte{e(2, opHeadersInteractive), e(0, opTogether), e(0, opReset), e(2, opBodyEnd),
				e(1, opCloseSend)}, finish(2))...),
		// Run ends with a request queued and one in flight: the queued one
		// is answered 503, an arrival too; the one in flight carries on.
		loopSeed(0, [loopSlots]byte{buffered, duplex, buffered, streamedEarly}, cat(admitThenQueue,
			[]byte{e(3, opHeadersDefault), e(3, opBodyChunk), e(0, opHalt), e(1, opCloseSend), e(2, opHeadersDefault), e(2, opBodyEnd),
				e(3, opBodyEnd)}, finish(0))...),
		// The worker set changes under load: a worker with a request on it
		// leaves, then comes back, and the queue drains into the new slots.
		loopSeed(2, [loopSlots]byte{buffered, buffered, buffered, bufferedHold}, cat(
			[]byte{e(0, opHeadersBulk), e(0, opBodyEnd), e(1, opHeadersBulk), e(1, opBodyEnd), e(2, opHeadersDefault), e(2, opBodyEnd),
				e(3, opHeadersBulk), e(3, opBodyEnd), e(0, opWorkers)}, finish(1), []byte{e(0, opWorkers)}, finish(0), finish(2), finish(3))...),
		// Over the stream cap of three: the fourth stream is refused, and
		// one that sends nothing ends at the first-message timeout.
		loopSeed(1<<6, [loopSlots]byte{buffered, buffered, buffered, buffered}, cat(admitThenQueue,
			[]byte{e(2, opOpen), e(3, opHeadersDefault), e(2, opSleepQueue), e(3, opHeadersDefault), e(3, opBodyEnd)}, finish(0), finish(3))...),
		// A full queue of one, trailers while queued, and out-of-place
		// messages.
		loopSeed(1<<3, [loopSlots]byte{buffered, buffered, buffered, loopProto(fmStreamed, fmBuffered, false)}, cat(admitThenQueue,
			[]byte{e(1, opReqTrailers), e(2, opHeadersDefault), e(2, opBodyEnd), e(3, opHeadersDefault), e(3, opBodyChunk),
				e(3, opRespBodyToken), e(0, opHeadersBulk)}, finish(1))...),
	}
}

// runStreamLoop runs one input inside the bubble.
func runStreamLoop(t *testing.T, in []byte) {
	r := newLoopRun(t, in[0], in[1:loopHeader])
	together := false
	for _, b := range in[loopHeader:] {
		slot, op := int(b>>6), int(b&63)%numLoopOps
		r.trace = append(r.trace, fmt.Sprintf("%d:%s", slot, loopOpNames[op]))
		if op == opTogether {
			together = true
			continue
		}
		if together {
			r.settled = false // the first event races with the second
		}
		r.do(slot, op)
		r.settled = false
		if together {
			together = false
			continue
		}
		synctest.Wait()
		r.check()
		r.settled = true
	}
	r.finish()
	if testing.Verbose() {
		r.t.Log(r.describe())
	}
}

// loopRun is one fuzzed server, its clients and the model of what each
// stream is owed.
type loopRun struct {
	t      *testing.T
	ts     *testServer
	rec    *recordingScheduler
	protos [loopSlots]proto
	slots  [loopSlots]*loopStream
	all    []*loopStream
	// drained carries Drain's result once opDrain started it.
	drained chan error
	standby bool
	// settled: the bubble was idle after the last event, every reply was
	// read and no other event races with this one, so each stream's view
	// of its exchange is exact.
	settled bool
	// trace lists the events applied, for failure messages.
	trace []string
	// fresh lists the streams opened since the last check; lastID is the
	// request ID of the last Process call known then.
	fresh  []*loopStream
	lastID uint64
	// workers are the input's worker set and the other one; alt says
	// which is in force.
	workers [2][]fleet.Worker
	alt     bool
	// halt ends Run once; halted is set then, and the checks that ask the
	// scheduler stop: releases no longer reach it.
	halt   func()
	halted bool
	// stop tears the server down; it runs once.
	stop     func()
	stopOnce sync.Once
}

// loopStream is one client stream, Envoy's side, and what it waits for.
type loopStream struct {
	c    *clientStream
	name string
	p    proto
	// id is the ID of the stream's request (its Process call), 0 while
	// unknown: when two streams opened together.
	id uint64
	// pending lists, per direction, the kinds of the messages that wait
	// for a reply, oldest first; a message that ends the response is
	// marked with a trailing "$".
	pending [2][]string
	// settled says why the scheduler may no longer hold anything for the
	// request; empty while it may.
	settled string
	// sent counts the messages sent; overrides counts the timer overrides
	// received.
	sent, overrides int
	routed          bool
	// envoyReply: response headers went out while the stream had no
	// route, racing with it (the bubble was not idle): if a response reply
	// comes first, Envoy's own reply won and the held request messages are
	// never answered.
	envoyReply bool
	// immediate: an ImmediateResponse arrived.
	immediate bool
	// closed: CloseSend was called; reset: the context was cancelled.
	closed, reset bool
	// ended: the stream's end reached the client, with endErr.
	ended    bool
	endErr   error
	bodySent int
	replies  []string
}

func newLoopRun(t *testing.T, cfgByte byte, protos []byte) *loopRun {
	prio := testPriority()
	for p := range prio.Classes {
		if cfgByte&8 != 0 {
			prio.Classes[p].QueueSize = 1
		}
		if cfgByte&32 != 0 {
			prio.Classes[p].QueueTimeout = 2 * time.Second
		}
	}
	cfg := Config{
		Sched:      sched.Config{Priority: prio},
		Tenancy:    &intake.Tenancy{DefaultMaxClass: "system"},
		DrainDelay: -1,
	}
	if cfgByte&4 != 0 {
		cfg.EnvoyMaxMessageTimeout = -1
	}
	if cfgByte&16 != 0 {
		cfg.DrainDelay = 10 * time.Millisecond
	}
	if cfgByte&64 != 0 {
		cfg.MaxConcurrentStreams = 3
	}
	sets := [][]fleet.Worker{
		oneWorker,
		{{ID: "w0", Address: "10.0.0.7:8000", MaxRunningRequests: 2}},
		{{ID: "w0", Address: "10.0.0.7:8000", MaxRunningRequests: 1}, {ID: "w1", Address: "10.0.0.8:8000", MaxRunningRequests: 1}},
		{{ID: "w0", Address: "10.0.0.7:8000", MaxRunningRequests: 1, DPSize: 2}},
	}
	r := &loopRun{t: t, settled: true, workers: [2][]fleet.Worker{sets[cfgByte&3], sets[cfgByte&3^1]}}
	for i, b := range protos {
		r.protos[i] = proto{req: fuzzModes[int(b&127)%5], resp: fuzzModes[int(b&127)/5%5], early: b&128 != 0}
	}
	r.start(cfg, r.workers[0])
	return r
}

// start runs a Server over a recording scheduler on bufconn, as
// startServerWith does, and keeps the teardown so that the run can check
// that Run and the notice senders return.
func (r *loopRun) start(cfg Config, workers []fleet.Worker) {
	t := r.t
	full, ws, inner, err := prepare(cfg, workers)
	if err != nil {
		t.Fatal(err)
	}
	r.rec = newRecordingScheduler(inner)
	s, err := newServer(full, ws, r.rec)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := ServerOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer(opts...)
	s.Register(g)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	var serving sync.WaitGroup
	serving.Go(func() { _ = g.Serve(lis) })
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	r.halt = func() {
		if r.halted {
			return
		}
		r.halted = true
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	r.stop = func() {
		for _, st := range r.all {
			st.c.cancel()
		}
		r.waitDrain()
		_ = conn.Close()
		g.Stop()
		serving.Wait()
		r.halt()
		s.Wait()
	}
	// On a failure the teardown still runs inside the bubble, so that the
	// failure is reported rather than a deadlock.
	t.Cleanup(func() { r.stopOnce.Do(r.stop) })
	r.ts = &testServer{t: t, srv: s, client: extprocv3.NewExternalProcessorClient(conn), health: healthgrpc.NewHealthClient(conn)}
}

// fail reports a broken invariant with the events that led to it.
func (r *loopRun) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf(format+"\n%s", append(args, r.describe())...)
}

// describe lists the events applied and what each stream saw.
func (r *loopRun) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "events: %s\nstreams:", strings.Join(r.trace, " "))
	for _, st := range r.all {
		fmt.Fprintf(&b, "\n  %s %+v: replies %v, pending %v, ended %v (%v)", st.name, st.p, st.replies, st.pending, st.ended, st.endErr)
	}
	return b.String()
}

// live returns the slot's stream unless it ended or none was opened.
func (r *loopRun) live(slot int) *loopStream {
	if st := r.slots[slot]; st != nil && !st.ended {
		return st
	}
	return nil
}

// open opens a stream on the slot unless one is live there.
func (r *loopRun) open(slot int) *loopStream {
	if st := r.live(slot); st != nil {
		return st
	}
	if len(r.all) == loopMaxStreams {
		return nil
	}
	st := &loopStream{c: r.ts.open(), name: fmt.Sprintf("stream %d (slot %d)", len(r.all)+1, slot), p: r.protos[slot]}
	r.slots[slot] = st
	r.all = append(r.all, st)
	r.fresh = append(r.fresh, st)
	return st
}

// do applies one event.
func (r *loopRun) do(slot, op int) {
	st := r.live(slot)
	switch op {
	case opOpen:
		r.open(slot)
	case opHeadersBulk, opHeadersInteractive, opHeadersDefault:
		class := map[int]string{opHeadersBulk: "bulk", opHeadersInteractive: "interactive", opHeadersDefault: "default"}[op]
		if st = r.open(slot); st != nil {
			r.send(st, "req_headers", reqHeaders(st.p, "POST", "/v1/chat/completions", false, "x-smg-priority", class))
		}
	case opHeadersGet:
		if st = r.open(slot); st != nil {
			r.send(st, "req_headers", reqHeaders(st.p, "GET", "/v1/models", true))
		}
	case opHeadersOnly:
		if st = r.open(slot); st != nil {
			r.send(st, "req_headers", reqHeaders(st.p, "POST", "/v1/completions", true))
		}
	case opBodyChunk, opBodyEnd:
		if st == nil {
			return
		}
		n := len(chatBody) - st.bodySent
		if op == opBodyChunk {
			n = min(n, len(chatBody)/3+1)
		}
		b := chatBody[st.bodySent : st.bodySent+n]
		st.bodySent += n
		r.send(st, "req_body", reqBody(b, op == opBodyEnd))
	case opReqTrailers:
		r.send(st, "req_trailers", reqTrailers())
	case opRespHeaders:
		r.send(st, "resp_headers", respHeaders(false))
	case opRespHeaders503:
		r.send(st, "resp_headers", respHeadersStatus("503", false))
	case opRespBodyEmpty:
		r.send(st, "resp_body", respBody("", false))
	case opRespBodyToken:
		r.send(st, "resp_body", respBody("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n", false))
	case opRespBodyEnd:
		r.send(st, "resp_body", respBody("data: {\"usage\":{\"prompt_tokens\":12}}\n\ndata: [DONE]\n\n", true))
	case opRespTrailers:
		r.send(st, "resp_trailers", respTrailers())
	case opReset:
		if st != nil {
			st.reset = true
			st.c.cancel()
		}
	case opCloseSend:
		if st != nil && !st.closed && !st.reset {
			st.closed = true
			_ = st.c.s.CloseSend()
		}
	case opDrain:
		if r.drained == nil {
			r.drained = make(chan error, 1)
			go func() { r.drained <- r.ts.srv.Drain(context.Background()) }()
		}
	case opSleepShort:
		time.Sleep(100 * time.Millisecond)
	case opSleepTimer:
		time.Sleep(time.Second)
	case opSleepClose:
		time.Sleep(answeredCloseWait + time.Second)
	case opSleepQueue:
		time.Sleep(31 * time.Second)
	case opSleepLong:
		time.Sleep(6 * time.Minute)
	case opStandby:
		r.standby = !r.standby
		if err := r.ts.srv.SetActive(context.Background(), !r.standby); err != nil {
			r.fail("SetActive(%v): %v", !r.standby, err)
		}
	case opWorkers:
		r.alt = !r.alt
		ws := r.workers[0]
		if r.alt {
			ws = r.workers[1]
		}
		if err := r.ts.srv.SetWorkers(ws); err != nil && !r.halted {
			r.fail("SetWorkers: %v", err)
		}
	case opHalt:
		r.halt()
	}
}

// send sends one of Envoy's messages; kind is the reply it waits for. A
// stream that is closed, reset or ended sends nothing, as Envoy would not.
func (r *loopRun) send(st *loopStream, kind string, m *extprocv3.ProcessingRequest) {
	if st == nil || st.closed || st.reset || st.ended {
		return
	}
	if err := st.c.s.Send(m); err != nil {
		return // the stream ended; the client learns it from Recv
	}
	st.sent++
	dir := 0
	if strings.HasPrefix(kind, "resp") {
		dir = 1
		switch {
		case st.routed:
		case r.settled:
			// Envoy's own reply before the route: the request messages it
			// holds are never answered.
			st.pending[0] = nil
		default:
			st.envoyReply = true
		}
	}
	if m.GetResponseBody().GetEndOfStream() || m.GetResponseHeaders().GetEndOfStream() || m.GetResponseTrailers() != nil {
		kind += "$"
	}
	st.pending[dir] = append(st.pending[dir], kind)
}

// check reads what every stream received and checks the invariants that
// hold at any idle moment.
func (r *loopRun) check() {
	r.t.Helper()
	if id := r.ts.srv.ids.Load(); id == r.lastID+uint64(len(r.fresh)) {
		if len(r.fresh) == 1 {
			r.fresh[0].id = id
		}
		r.fresh, r.lastID = nil, id
	} else {
		r.fail("%d Process calls since the last check, for %d streams opened", id-r.lastID, len(r.fresh))
	}
	open := 0
	for _, st := range r.all {
		r.receive(st)
		if !st.ended {
			open++
		} else if st.settled == "" {
			st.settled = "its stream ended"
		}
		if st.id == 0 {
			continue
		}
		dispatched, answered, victim := r.rec.decision(st.id)
		switch {
		case st.settled != "" && !r.halted && r.rec.owes(st.id):
			r.fail("%s: the scheduler still holds request %d, though %s", st.name, st.id, st.settled)
		case st.settled == "" && dispatched && !st.routed:
			r.fail("%s: the scheduler dispatched request %d, but its stream has no route", st.name, st.id)
		case st.settled == "" && answered:
			r.fail("%s: the scheduler rejected request %d, but its stream has no answer", st.name, st.id)
		case st.settled == "" && victim && !r.halted: // a first token may not have reached a halted dispatcher
			r.fail("%s: the scheduler preempted request %d before its first token, but its stream has no answer", st.name, st.id)
		}
	}
	if p := r.rec.problems(); len(p) > 0 {
		r.fail("scheduler: %s", strings.Join(p, "; "))
	}
	if n := r.ts.srv.active.Load(); n != int64(open) {
		r.fail("%d Process calls run, but clients see %d streams open", n, open)
	}
	if r.halted {
		return
	}
	if owed := r.rec.owed(); len(owed) > open {
		r.fail("the scheduler holds requests %v for only %d open streams", owed, open)
	}
	s, ok := r.ts.srv.Stats(context.Background())
	if !ok {
		r.fail("no stats")
	}
	held := 0
	for p := range sched.NumPriorities {
		held += int(s.InFlight[p]) + int(s.QueueDepth[p])
	}
	if held > open {
		r.fail("the scheduler has %d requests in flight or queued for %d open streams: %+v", held, open, s)
	}
}

// receive takes the replies that reached the stream's client and checks
// each against the messages that wait for one.
func (r *loopRun) receive(st *loopStream) {
	r.t.Helper()
	for !st.ended {
		var got clientReceived
		select {
		case got = <-st.c.in:
		default:
			return
		}
		if got.err != nil {
			st.ended, st.endErr = true, got.err
			switch code := status.Code(got.err); {
			case errors.Is(got.err, io.EOF):
			case code == codes.Canceled, code == codes.FailedPrecondition, code == codes.DeadlineExceeded,
				code == codes.Unavailable, code == codes.ResourceExhausted:
				// A reset (Envoy's, or the server's own after its answer or
				// for a silent stream), a protocol error, no first message,
				// the stream cap.
			default:
				r.fail("%s ended with %v (%v)", st.name, got.err, code)
			}
			if st.immediate && !errors.Is(got.err, io.EOF) && status.Code(got.err) != codes.Canceled {
				r.fail("%s ended with %v after its ImmediateResponse, want a clean end or a reset", st.name, got.err)
			}
			continue
		}
		k := kinds([]*extprocv3.ProcessingResponse{got.m})[0]
		st.replies = append(st.replies, k)
		if st.immediate {
			r.fail("%s: reply %s after the ImmediateResponse", st.name, k)
		}
		switch {
		case k == "immediate":
			st.immediate = true
			if st.settled == "" {
				st.settled = "it was answered with an ImmediateResponse"
			}
			if headerMap(got.m.GetImmediateResponse().GetHeaders())["x-smg-preempted"] == "true" && st.id != 0 && !r.rec.wasPreempted(st.id) {
				r.fail("%s: preemption answer for request %d, which the scheduler did not preempt", st.name, st.id)
			}
			continue
		case strings.HasPrefix(k, "override"):
			if st.overrides++; st.overrides > st.sent {
				r.fail("%s: %d timer overrides for %d messages", st.name, st.overrides, st.sent)
			}
			continue
		case k == "empty":
			r.fail("%s: an empty reply", st.name)
		}
		if strings.Contains(k, "+route") {
			st.routed = true
		}
		kind, _, _ := strings.Cut(k, "+")
		dir := 0
		if strings.HasPrefix(kind, "resp") {
			dir = 1
			if st.envoyReply && !st.routed {
				st.pending[0] = nil // Envoy's own reply won the race with the route
			}
			st.envoyReply = false
			if !st.routed && st.settled == "" {
				st.settled = "Envoy's own reply before the route was answered"
			}
		}
		p := st.pending[dir]
		if len(p) == 0 || strings.TrimSuffix(p[0], "$") != kind {
			r.fail("%s: reply %s, but waiting for %v", st.name, k, p)
		}
		if strings.HasSuffix(p[0], "$") && st.settled == "" {
			st.settled = "the end of its response was answered"
		}
		if st.p.req == modeDuplex && dir == 0 && kind == "req_body" {
			// The held FULL_DUPLEX body is re-streamed in chunks: the
			// chunks answer every body message.
			for len(p) > 0 && p[0] == "req_body" {
				p = p[1:]
			}
			st.pending[dir] = p
			continue
		}
		st.pending[dir] = p[1:]
	}
}

// finish resets every stream still open, as Envoy does when it goes away,
// and checks that everything ends and nothing is left booked.
func (r *loopRun) finish() {
	r.t.Helper()
	for _, st := range r.all {
		if !st.ended {
			st.reset = true
			st.c.cancel()
		}
	}
	synctest.Wait()
	r.check()
	for _, st := range r.all {
		if !st.ended {
			r.fail("%s did not end after its reset", st.name)
		}
	}
	r.waitDrain() // its result depends on the events; that it returns does not
	if p := r.rec.problems(); len(p) > 0 {
		r.fail("scheduler: %s", strings.Join(p, "; "))
	}
	if r.halted {
		r.stopOnce.Do(r.stop)
		return
	}
	r.ts.waitIdle()
	if owed := r.rec.owed(); len(owed) > 0 {
		r.fail("requests %v neither released nor rejected by the scheduler after every stream ended", owed)
	}
	r.stopOnce.Do(r.stop) // Run, Serve and the notice senders return
}

// waitDrain waits for Drain to return, if it was started.
func (r *loopRun) waitDrain() {
	if r.drained != nil {
		if err := <-r.drained; err != nil {
			r.t.Logf("Drain: %v", err) // an outcome of the events, not a failure
		}
		r.drained = nil
	}
}

// recordingScheduler is the real scheduler, watched: it records what the
// dispatcher tells it about each request and what it decides. Only the
// dispatcher calls it; mu lets the test read the records.
type recordingScheduler struct {
	*sched.Scheduler

	mu        sync.Mutex
	submitted map[uint64]bool
	released  map[uint64]int
	rejected  map[uint64]bool
	preempted map[uint64]bool
	// dispatched and answered: the scheduler dispatched the request, or
	// rejected it with an answer (not a client's cancel).
	dispatched, answered map[uint64]bool
	// firsts: the request reported its first token.
	firsts map[uint64]bool
	issues []string
}

var _ scheduler = (*recordingScheduler)(nil)

func newRecordingScheduler(s *sched.Scheduler) *recordingScheduler {
	return &recordingScheduler{Scheduler: s, submitted: map[uint64]bool{}, released: map[uint64]int{}, rejected: map[uint64]bool{},
		preempted: map[uint64]bool{}, dispatched: map[uint64]bool{}, answered: map[uint64]bool{},
		firsts: map[uint64]bool{}}
}

// decided records the scheduler's rejections. r.mu is held.
func (r *recordingScheduler) decided(acts []sched.Action) []sched.Action {
	for i := range acts {
		switch acts[i].Kind {
		case sched.ActionReject:
			r.rejected[acts[i].ID] = true
			if acts[i].Outcome != sched.OutcomeClientCancelled {
				r.answered[acts[i].ID] = true
			}
		case sched.ActionDispatch:
			r.dispatched[acts[i].ID] = true
		case sched.ActionPreempt:
			r.preempted[acts[i].ID] = true
		case sched.ActionQueue:
		}
	}
	return acts
}

func (r *recordingScheduler) Submit(now time.Time, q sched.Request) []sched.Action {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.submitted[q.ID] {
		r.issues = append(r.issues, fmt.Sprintf("request %d submitted twice", q.ID))
	}
	r.submitted[q.ID] = true
	return r.decided(r.Scheduler.Submit(now, q))
}

func (r *recordingScheduler) Release(now time.Time, id uint64) []sched.Action {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.submitted[id] {
		r.issues = append(r.issues, fmt.Sprintf("request %d released but never submitted", id))
	}
	if r.released[id]++; r.released[id] > 1 {
		r.issues = append(r.issues, fmt.Sprintf("request %d released %d times", id, r.released[id]))
	}
	return r.decided(r.Scheduler.Release(now, id))
}

func (r *recordingScheduler) FirstToken(now time.Time, id uint64) []sched.Action {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.submitted[id] || r.released[id] > 0 {
		r.issues = append(r.issues, fmt.Sprintf("first token of request %d, submitted %v, released %d times", id, r.submitted[id], r.released[id]))
	}
	if r.firsts[id] {
		r.issues = append(r.issues, fmt.Sprintf("first token of request %d reported twice", id))
	}
	r.firsts[id] = true
	return r.decided(r.Scheduler.FirstToken(now, id))
}

func (r *recordingScheduler) Tick(now time.Time) []sched.Action {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.decided(r.Scheduler.Tick(now))
}

func (r *recordingScheduler) SetWorkers(now time.Time, ws []sched.Worker) []sched.Action {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.decided(r.Scheduler.SetWorkers(now, ws))
}

func (r *recordingScheduler) ReportLoad(now time.Time, loads []sched.EngineLoad) []sched.Action {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.decided(r.Scheduler.ReportLoad(now, loads))
}

func (r *recordingScheduler) Drain(now time.Time) []sched.Action {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.decided(r.Scheduler.Drain(now))
}

func (r *recordingScheduler) Served(now time.Time, id uint64, worker string, rank uint32) []sched.Action {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.decided(r.Scheduler.Served(now, id, worker, rank))
}

// problems returns what the scheduler heard out of order.
func (r *recordingScheduler) problems() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.issues...)
}

// owes reports whether request id was submitted and neither released nor
// rejected.
func (r *recordingScheduler) owes(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.submitted[id] && r.released[id] == 0 && !r.rejected[id]
}

// decision reports whether the scheduler dispatched request id, whether
// it rejected it with an answer, and whether it preempted it with no first
// token reported, before or after.
func (r *recordingScheduler) decision(id uint64) (dispatched, answered, victim bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dispatched[id], r.answered[id], r.preempted[id] && !r.firsts[id]
}

// wasPreempted reports whether the scheduler chose request id as a victim.
func (r *recordingScheduler) wasPreempted(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.preempted[id]
}

// owed returns the submitted requests neither released nor rejected.
func (r *recordingScheduler) owed() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint64
	for id := range r.submitted {
		if r.released[id] == 0 && !r.rejected[id] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}
