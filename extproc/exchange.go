package extproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/extproc/answer"
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

// exchangeEnv is what an exchange needs from the server around it. The
// stream loop implements it over the dispatcher; tests use a fake.
type exchangeEnv interface {
	admissionEnv
	// submit hands a request, and its endpoint subset (nil for none), to
	// the scheduler. The answer arrives later as notices (onNotice). An
	// error means the request never reached the scheduler: the stream's
	// context ended (the client left) or the dispatcher is gone
	// (errStopped).
	submit(r *sched.Request, sub *subset) error
	// route picks a worker in the subset (nil: any) for a request outside
	// admission.
	route(model string, sub *subset) (fleet.Target, bool, error)
	// served reports that an admitted request was served by another
	// worker than its target (a fallback).
	served(id uint64, worker string, rank uint32)
	// routed records in the prefix index that a planned request went to
	// worker.
	routed(now time.Time, worker string, pl *intake.Plan)
	// context ends with the stream: work for the request stops then.
	context() context.Context
}

// stage is where an exchange is in its HTTP request's life.
type stage uint8

const (
	// stageStart: waiting for the request headers.
	stageStart stage = iota
	// stageBody: reading the request body.
	stageBody
	// stageWaiting: submitted, waiting for the scheduler's decision.
	stageWaiting
	// stageRouted: answered with a route; following the response.
	stageRouted
	// stageEnvoyReply: Envoy answered the request itself before the route
	// (Envoy 1.37+ sends its own local replies through ext_proc); its
	// response passes through unchanged.
	stageEnvoyReply
	// stageOver: an immediate response or an error ended the exchange.
	stageOver
	numStages
)

var stageNames = [numStages]string{"start", "body", "waiting", "routed", "envoy-reply", "over"}

func (s stage) String() string {
	if s < numStages {
		return stageNames[s]
	}
	return fmt.Sprintf("stage(%d)", uint8(s))
}

// heldKind is a request-direction message that is waiting for its reply.
type heldKind uint8

const (
	// heldHeaders: the request headers (carries the routing mutation).
	heldHeaders heldKind = iota + 1
	// heldBufferedBody: the BUFFERED body (carries the routing mutation:
	// header mutations in a body reply work in BUFFERED mode).
	heldBufferedBody
	// heldChunk: one STREAMED body chunk, answered with CONTINUE.
	heldChunk
	// heldDuplexBody: the FULL_DUPLEX_STREAMED body, re-streamed in chunks.
	heldDuplexBody
	// heldTrailers: the request trailers.
	heldTrailers
)

// envoyTimer mirrors Envoy's message timer for the outstanding message of
// one direction: started when Envoy sent its last message, restarted by
// each new one, extended once per message by an override.
type envoyTimer struct {
	running    bool
	firesAt    time.Time
	overridden bool
}

func (t *envoyTimer) start(now time.Time, d time.Duration, enabled bool) {
	*t = envoyTimer{running: enabled, firesAt: now.Add(d)}
}

// extend applies one override_message_timeout of d under Envoy's rules: a
// timer is running, none was accepted for this message yet, overrides are
// enabled (limit, Envoy's max_message_timeout, > 0) and 1 ms ≤ d ≤ limit;
// it must also lengthen the timer to be worth sending. It reports whether
// the override should be sent.
func (t *envoyTimer) extend(now time.Time, d, limit time.Duration) bool {
	if !t.running || t.overridden || limit <= 0 || d < time.Millisecond || d > limit || !now.Add(d).After(t.firesAt) {
		return false
	}
	t.overridden, t.firesAt = true, now.Add(d)
	return true
}

// respChunk is a response body message held behind the response headers.
type respChunk struct {
	body []byte // kept only in FULL_DUPLEX_STREAMED mode, to echo it
	eos  bool
}

// heldResponse is a worker's response whose headers reply is held while
// the request can still be preempted.
type heldResponse struct {
	timer   envoyTimer
	pending []respChunk
}

// responseKind is what the response following the route is.
type responseKind uint8

const (
	// responseNone: no response headers yet.
	responseNone responseKind = iota
	// responseWorker: a worker's 2xx answer; its first body chunk is the
	// first token and it may carry usage.
	responseWorker
	// responseOther: a worker's error, or a 503 Envoy's router made up.
	responseOther
)

// step is what the stream loop must do after an exchange handled an input:
// send the messages in order, then, when end is set, return err from the
// stream handler (nil: a clean end after a final answer).
type step struct {
	send []*extprocv3.ProcessingResponse
	end  bool
	err  error
}

// exchange is one ext_proc stream, that is one HTTP request, seen from
// Envoy's side: the negotiated modes, the messages held for a reply,
// shadows of Envoy's message timers, and the response. It decides what to
// send. What the request owes the scheduler is its admission's alone. It
// is owned by its stream goroutine, knows nothing of gRPC streams, and is
// driven by five inputs: Envoy's messages (message), the dispatcher's
// notices (onNotice), its deadline (onExpire), the dispatcher's end
// (onShutdown) and the end of the stream (close).
type exchange struct {
	deps *exchangeDeps
	cfg  *Config
	env  exchangeEnv
	log  *slog.Logger
	id   uint64

	// Negotiated protocol, from the first message's protocol_config.
	reqMode, respMode extprocfilterv3.ProcessingMode_BodySendMode
	early             bool // send_body_without_waiting_for_header_response

	stage stage
	start time.Time

	// Request.
	hdr    *headerInfo
	subset *subset // the data plane's endpoint subset; nil for none
	who    intake.Identity
	kind   openai.Kind
	// scheduled: the route goes through admission (an inference API);
	// other requests are routed at once.
	scheduled bool
	body      []byte
	newBody   []byte // the body after a model rewrite; nil: unchanged
	// rewrittenFrom and rewrittenTo are the client's model name and the
	// one it was rewritten to; empty without a rewrite.
	rewrittenFrom, rewrittenTo string
	headersOnly                bool
	held                       []heldKind
	reqTimer                   envoyTimer

	// Admission.
	plan *intake.Plan
	adm  admission

	// Response.
	resp     responseKind
	heldResp *heldResponse // nil unless the response headers are held
	usage    openai.UsageScanner
	compared bool
}

func newExchange(d *exchangeDeps, env exchangeEnv, log *slog.Logger, id uint64) *exchange {
	return &exchange{deps: d, cfg: d.cfg, env: env, log: log, id: id, adm: admission{env: env, id: id}}
}

// protocolError ends the stream with a gRPC error, which Envoy turns into
// its status_on_error answer (fail closed). It leaves the stage alone: the
// stream loop then calls close, which must still see a queued request to
// take it out of the scheduler.
func (x *exchange) protocolError(format string, args ...any) step {
	msg := fmt.Sprintf(format, args...)
	x.log.Warn("ext_proc protocol error", "request", x.id, "error", msg)
	return step{end: true, err: status.Error(codes.FailedPrecondition, msg)}
}

// message handles one message from Envoy.
func (x *exchange) message(now time.Time, m *extprocv3.ProcessingRequest) step {
	if x.stage == stageStart {
		if m.GetObservabilityMode() {
			return x.protocolError("observability mode cannot route requests")
		}
		pc := m.GetProtocolConfig()
		if pc == nil {
			// Envoy before 1.34 does not announce its modes: assume the
			// configured ones.
			pc = x.cfg.AssumedProtocol
		}
		x.reqMode, x.respMode = pc.GetRequestBodyMode(), pc.GetResponseBodyMode()
		x.early = pc.GetSendBodyWithoutWaitingForHeaderResponse()
	}
	switch r := m.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		if x.stage != stageStart {
			return x.protocolError("request headers in stage %s", x.stage)
		}
		return x.requestHeaders(now, m, r.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return x.requestBody(now, r.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return x.requestTrailers(now)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		if x.stage == stageRouted {
			x.followServed(now, m.GetMetadataContext())
		}
		return x.responseHeaders(now, r.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return x.responseBody(now, r.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return x.responseTrailers(now)
	}
	return x.protocolError("processing request with no message")
}

// deadline is when the exchange must act on its own: before Envoy's timer
// for a held message fires.
func (x *exchange) deadline() (time.Time, bool) {
	switch {
	case x.stage == stageWaiting && x.reqTimer.running:
		return x.reqTimer.firesAt.Add(-x.cfg.EnvoyTimeoutMargin), true
	case x.heldResp != nil && x.heldResp.timer.running:
		return x.heldResp.timer.firesAt.Add(-x.cfg.EnvoyTimeoutMargin), true
	}
	return time.Time{}, false
}

// waiting reports whether the exchange waits for the scheduler.
func (x *exchange) waiting() bool { return x.stage == stageWaiting }

// preemptible reports whether a preemption can still reach the request:
// it is in flight, has no first token, and the scheduler marked its
// dispatch Preemptible. Its response headers are then held where Envoy
// allows it, so that the preemption can still answer it.
func (x *exchange) preemptible() bool {
	return x.adm.inFlight() && !x.adm.firstToken && x.adm.decision.action.Preemptible
}

// onExpire acts at the deadline: extend Envoy's timer once if it allows,
// otherwise answer (a waiting request gets the queue-timeout answer; held
// response headers are released).
func (x *exchange) onExpire(now time.Time) step {
	switch {
	case x.stage == stageWaiting && x.reqTimer.running:
		if d, ok := x.requestOverride(now); ok {
			return step{send: []*extprocv3.ProcessingResponse{overrideTimeout(d)}}
		}
		x.deps.metrics.budgetExpired.Inc()
		x.log.Info("queued request answered before Envoy's message timer fires", "request", x.id)
		x.adm.release()
		return x.reject(now, &answer.Rejection{Reason: answer.ReasonQueueTimeout})
	case x.heldResp != nil && x.heldResp.timer.running:
		if d := x.cfg.EnvoyMaxMessageTimeout; x.heldResp.timer.extend(now, d, d) {
			return step{send: []*extprocv3.ProcessingResponse{overrideTimeout(d)}}
		}
		return step{send: x.releaseResponse()}
	}
	return step{}
}

// requestOverride returns the override for the held request message: the
// whole remaining budget at once, min(max_message_timeout, class queue
// timeout + margin). ok is false when Envoy would not accept one or it
// would not extend the timer.
func (x *exchange) requestOverride(now time.Time) (time.Duration, bool) {
	d := x.cfg.EnvoyMaxMessageTimeout
	if qt := x.deps.queueTimeout[x.who.Priority]; qt > 0 {
		d = min(d, qt+x.cfg.EnvoyTimeoutMargin)
	}
	return d, x.reqTimer.extend(now, d, x.cfg.EnvoyMaxMessageTimeout)
}

// onNotice applies one of the dispatcher's notices. more is set when
// another notice is already waiting: a queued request whose decision is
// already there needs no timer override.
func (x *exchange) onNotice(now time.Time, n notice, more bool) step {
	switch n.kind {
	case noticeQueued:
		if x.adm.queue() && !more {
			if d, ok := x.requestOverride(now); ok {
				return step{send: []*extprocv3.ProcessingResponse{overrideTimeout(d)}}
			}
		}
		return step{}
	case noticeDecided:
		return x.onDecided(now, n)
	case noticePreempted:
		return x.preempt(now)
	}
	return step{}
}

// onDecided answers the held request messages with the scheduler's
// decision: the route, or the rejection.
func (x *exchange) onDecided(now time.Time, n notice) step {
	if !x.adm.decide(n) {
		return step{} // answered already; the release undoes a dispatch
	}
	a := &x.adm.decision.action
	if a.Kind != sched.ActionDispatch {
		if a.Outcome == sched.OutcomeTenantRateLimited {
			x.deps.metrics.tenantLimited.WithLabelValues(x.deps.metrics.tenants.Label(x.who.Tenant)).Inc()
		}
		rej, ok := answer.For(a)
		switch {
		case x.adm.decision.unknownModel:
			rej = answer.ModelNotFound(a.Model)
		case !ok:
			rej = &answer.Rejection{Reason: answer.ReasonNoEndpoints, Model: a.Model}
		}
		return x.reject(now, rej)
	}
	if x.cfg.Fairness != policy.FairnessNone {
		x.deps.metrics.observeServed(a, x.who.Flow)
	}
	t := &x.adm.decision.target
	x.env.routed(now, t.Worker, x.plan)
	x.deps.metrics.admission.WithLabelValues("admitted").Observe(now.Sub(x.start).Seconds())
	return step{send: x.routeReplies(t)}
}

// preempt ends an admitted request chosen as a victim with SMG's 503
// preemption answer as an ImmediateResponse. Envoy accepts an unsolicited
// ImmediateResponse whenever its processing is not complete
// (ext_proc.cc:1876-1899): with no response started it becomes a local
// reply, with the response headers held it goes straight to the client,
// and once the headers went out Envoy resets the stream. Once the first
// token went out the victim has won the race and carries on.
func (x *exchange) preempt(time.Time) step {
	if !x.adm.inFlight() || x.adm.firstToken {
		x.log.Debug("preemption after the first token or the end ignored", "request", x.id)
		return step{}
	}
	x.adm.release()
	x.stage = stageOver
	x.heldResp = nil
	r := &answer.Rejection{Reason: answer.ReasonPreempted}
	x.deps.metrics.rejections.WithLabelValues(r.Code()).Inc()
	x.log.Debug("request preempted", "request", x.id, "answer", r.String())
	return step{send: []*extprocv3.ProcessingResponse{immediateReply(r)}, end: true}
}

// onShutdown answers a waiting request when the dispatcher has stopped;
// the scheduler is gone, so nothing is owed.
func (x *exchange) onShutdown(now time.Time) step {
	if x.stage != stageWaiting {
		return step{}
	}
	x.adm.abandon()
	return x.reject(now, &answer.Rejection{Reason: answer.ReasonShutdown})
}

// reject answers the request with an ImmediateResponse and ends the
// exchange.
func (x *exchange) reject(now time.Time, r *answer.Rejection) step {
	if r.Reason == answer.ReasonClassLimit || r.Reason == answer.ReasonDeadlineExceeded {
		r.Status = x.cfg.ClassLimitStatus
	}
	x.stage = stageOver
	x.deps.metrics.rejections.WithLabelValues(r.Code()).Inc()
	if !x.start.IsZero() {
		x.deps.metrics.admission.WithLabelValues(r.Code()).Observe(now.Sub(x.start).Seconds())
	}
	x.log.Debug("request rejected", "request", x.id, "answer", r.String())
	return step{send: []*extprocv3.ProcessingResponse{immediateReply(r)}, end: true}
}

// close handles the end of the stream, whatever its cause: whatever the
// scheduler still holds for the request is released.
func (x *exchange) close(_ time.Time, cause error) {
	x.compareUsage()
	x.adm.release()
	x.stage = stageOver
	if cause != nil && !errors.Is(cause, errClientGone) {
		x.log.Debug("stream ended", "request", x.id, "cause", cause)
	}
}

// errClientGone marks the normal ends of a stream (half-close, reset).
var errClientGone = errors.New("extproc: stream closed by envoy")
