package extproc

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

// reason names one row of the rejection table. Every HTTP answer tollgate
// gives instead of routing a request comes from this table; nothing else
// chooses a status code.
type reason uint8

// Rejection reasons.
const (
	reasonUnknown reason = iota
	// reasonQueueFull: SMG class queue at queue_size.
	reasonQueueFull
	// reasonQueueTimeout: SMG queue_timeout_secs elapsed, or Envoy's message
	// budget would run out first.
	reasonQueueTimeout
	// reasonPreempted: the victim of a preemption.
	reasonPreempted
	// reasonClassLimit: a Dynamo per-worker queue limit (529).
	reasonClassLimit
	// reasonNoEndpoints: no eligible worker.
	reasonNoEndpoints
	// reasonModelNotFound: no worker of the fleet serves the model.
	reasonModelNotFound
	// reasonPinInvalid: the pinned worker or rank is not eligible.
	reasonPinInvalid
	// reasonShutdown: the server is draining.
	reasonShutdown
	// reasonUnauthorized: a missing or unknown tenant API key.
	reasonUnauthorized
	// reasonBadRequest: an unparsable body or a malformed header value.
	reasonBadRequest
	// reasonBodyTooLarge: a body over --max-body-bytes.
	reasonBodyTooLarge
	// reasonHeadersTooLarge: headers over the header or metadata limits.
	reasonHeadersTooLarge
	// reasonAdmissionFull, reasonAdmissionTimeout: SMG's legacy admission.
	reasonAdmissionFull
	reasonAdmissionTimeout
	// reasonTenantRateLimited: a tenant budget cannot afford the request.
	reasonTenantRateLimited
	// reasonDeadlineExceeded: a flat policy class's SLO deadline passed (529).
	reasonDeadlineExceeded
	// reasonUnknownClass: no flat policy class of the requested name.
	reasonUnknownClass
	numReasons
)

// bodyShape is the JSON error shape of a row.
type bodyShape uint8

const (
	// shapeSMG: {"error":{"type":<OpenAI type>,"code","message","param":null}}
	// plus the X-SMG-Error-Code header (SMG's create_error).
	shapeSMG bodyShape = iota + 1
	// shapeOpenAI: the OpenAI error object, as openai.Error renders it.
	shapeOpenAI
	// shapeDynamoOverload: Dynamo's 529 queue-limit body.
	shapeDynamoOverload
	// shapeDynamoDeadline: Dynamo's 529 deadline body.
	shapeDynamoDeadline
)

// answerRow is one row of the table.
type answerRow struct {
	status int
	code   string
	// message is the default message (upstream text where one exists).
	message    string
	retryAfter string
	preempted  bool
	shape      bodyShape
}

// answerTable maps every rejection reason to its HTTP answer.
var answerTable = [numReasons]answerRow{
	reasonQueueFull:       {status: http.StatusTooManyRequests, code: "scheduler_queue_full", message: "request queue is full for this priority class", retryAfter: "2", shape: shapeSMG},
	reasonQueueTimeout:    {status: http.StatusServiceUnavailable, code: "scheduler_queue_timeout", message: "timed out waiting for an admission slot", retryAfter: "2", shape: shapeSMG},
	reasonPreempted:       {status: http.StatusServiceUnavailable, code: "scheduler_preempted", message: "request preempted by higher-priority traffic", retryAfter: "1", preempted: true, shape: shapeSMG},
	reasonClassLimit:      {status: 529, code: "Overloaded", shape: shapeDynamoOverload},
	reasonNoEndpoints:     {status: http.StatusServiceUnavailable, code: "no_endpoints", message: "no endpoints available to route work", shape: shapeSMG},
	reasonModelNotFound:   {status: http.StatusNotFound, code: "model_not_found", message: "the model does not exist", shape: shapeOpenAI},
	reasonPinInvalid:      {status: http.StatusServiceUnavailable, code: "pinned_worker_not_eligible", message: "pinned worker is not eligible", shape: shapeSMG},
	reasonShutdown:        {status: http.StatusServiceUnavailable, code: "server_shutting_down", message: "the server is shutting down", retryAfter: "1", shape: shapeSMG},
	reasonUnauthorized:    {status: http.StatusUnauthorized, code: "unauthorized", message: "missing or invalid api key", shape: shapeSMG},
	reasonBadRequest:      {status: http.StatusBadRequest, code: "invalid_request", message: "invalid request", shape: shapeOpenAI},
	reasonBodyTooLarge:    {status: http.StatusRequestEntityTooLarge, code: "request_too_large", message: "request body is too large", shape: shapeOpenAI},
	reasonHeadersTooLarge: {status: http.StatusRequestHeaderFieldsTooLarge, code: "request_headers_too_large", message: "request headers are too large", shape: shapeSMG},
	reasonAdmissionFull:     {status: http.StatusTooManyRequests, code: "admission_queue_full", message: "admission queue is at capacity", retryAfter: "2", shape: shapeSMG},
	reasonAdmissionTimeout:  {status: http.StatusServiceUnavailable, code: "admission_queue_timeout", message: "timed out waiting for an admission slot", retryAfter: "2", shape: shapeSMG},
	reasonTenantRateLimited: {status: http.StatusTooManyRequests, code: "tenant_rate_limit_exceeded", message: "Tenant rate limit exceeded for this request", shape: shapeSMG},
	reasonDeadlineExceeded:  {status: 529, code: "Overloaded", shape: shapeDynamoDeadline},
	reasonUnknownClass:      {status: http.StatusBadRequest, code: "unknown_policy_class", message: "unknown router policy class", shape: shapeOpenAI},
}

// rejection is one answer to give: a reason plus the details its body needs.
type rejection struct {
	reason reason
	// message replaces the row's default message when set.
	message string
	// param names the offending field or header (OpenAI shape).
	param string
	// errType and errCode replace the OpenAI shape's type
	// (invalid_request_error) and code (the row's).
	errType, errCode string
	// model is named in a no-endpoints body.
	model string
	// status replaces the row's HTTP status when set (the operator's
	// choice for per-worker queue limits, Config.ClassLimitStatus).
	status int
	// retryAfter replaces the row's Retry-After when set.
	retryAfter string
	// Dynamo queue-limit and deadline details.
	policyClass string
	limitKind   sched.LimitKind
	current     uint64
	limit       uint64
	stage       sched.DeadlineStage
	slo         time.Duration
	overdue     time.Duration
}

// String describes the rejection for logs.
func (r *rejection) String() string {
	row := answerTable[r.reason]
	return fmt.Sprintf("%d %s: %s", r.httpStatus(), row.code, r.text())
}

// httpStatus is the answer's HTTP status.
func (r *rejection) httpStatus() int {
	if r.status != 0 {
		return r.status
	}
	return answerTable[r.reason].status
}

// code is the row's error code (the metric label).
func (r *rejection) code() string { return answerTable[r.reason].code }

// text is the message the body carries.
func (r *rejection) text() string {
	switch r.reason {
	case reasonClassLimit:
		return fmt.Sprintf("router policy class %q queue %s limit reached (current=%d, limit=%d)",
			r.policyClass, r.limitKind, r.current, r.limit)
	case reasonDeadlineExceeded:
		return fmt.Sprintf("router policy class %q deadline exceeded at %s (slo=%dms, overdue=%dms)",
			r.policyClass, r.stage, r.slo.Milliseconds(), r.overdue.Milliseconds())
	}
	if r.message != "" {
		return r.message
	}
	return answerTable[r.reason].message
}

// modelNotFound is OpenAI's answer for a model no worker serves, as vLLM
// gives it: 404, invalid_request_error, code model_not_found, param model.
func modelNotFound(model string) *rejection {
	return &rejection{reason: reasonModelNotFound, param: "model", message: fmt.Sprintf("The model `%s` does not exist.", model)}
}

// rejectionFor maps a scheduler outcome to its rejection. ok is false for
// outcomes that are not answered (admitted, client cancelled).
func rejectionFor(a *sched.Action) (*rejection, bool) {
	var r rejection
	switch a.Outcome {
	case sched.OutcomeQueueFull, sched.OutcomeRateLimited:
		r.reason = reasonQueueFull
	case sched.OutcomeQueueTimeout:
		r.reason = reasonQueueTimeout
	case sched.OutcomePreempted:
		r.reason = reasonPreempted
	case sched.OutcomeClassLimit:
		r = rejection{reason: reasonClassLimit, policyClass: a.PolicyClass, limitKind: a.LimitKind, current: a.LimitCurrent, limit: a.LimitValue}
	case sched.OutcomeNoEndpoints:
		r = rejection{reason: reasonNoEndpoints, message: a.Message, model: a.Model}
	case sched.OutcomePinInvalid:
		r = rejection{reason: reasonPinInvalid, message: a.Message}
	case sched.OutcomeShutdown:
		r.reason = reasonShutdown
	case sched.OutcomeAdmissionFull:
		r = rejection{reason: reasonAdmissionFull, message: a.Message}
	case sched.OutcomeAdmissionTimeout:
		r.reason = reasonAdmissionTimeout
	case sched.OutcomeTenantRateLimited:
		r.reason = reasonTenantRateLimited
		if a.RetryAfter > 0 {
			r.retryAfter = strconv.FormatInt(int64(a.RetryAfter/time.Second), 10)
		}
	case sched.OutcomeDeadlineExceeded:
		r = rejection{reason: reasonDeadlineExceeded, policyClass: a.PolicyClass, stage: a.Stage, slo: a.SLO, overdue: a.Overdue}
	case sched.OutcomeUnknownClass:
		r = rejection{reason: reasonUnknownClass, param: policy.HeaderPolicyClass}
	case sched.OutcomeUnknown, sched.OutcomeAdmitted, sched.OutcomeClientCancelled:
		return nil, false
	default: // an outcome this table does not know yet
		return nil, false
	}
	return &r, true
}

// immediate renders the rejection as Envoy's ImmediateResponse.
func (r *rejection) immediate() *extprocv3.ImmediateResponse {
	row := answerTable[r.reason]
	hdrs := []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}
	if ra := cmp.Or(r.retryAfter, row.retryAfter); ra != "" {
		hdrs = append(hdrs, setHeader("retry-after", ra))
	}
	if row.shape == shapeSMG {
		hdrs = append(hdrs, setHeader("x-smg-error-code", row.code))
	}
	if row.preempted {
		hdrs = append(hdrs, setHeader("x-smg-preempted", "true"))
	}
	sortHeaders(hdrs)
	return &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(r.httpStatus())},
		Headers: &extprocv3.HeaderMutation{SetHeaders: hdrs},
		Body:    r.body(),
		Details: "tollgate_" + row.code,
	}
}

// body renders the JSON body of the rejection's shape.
func (r *rejection) body() []byte {
	row := answerTable[r.reason]
	var v any
	switch row.shape {
	case shapeDynamoOverload:
		v = dynamoOverload{
			Message: r.text(),
			Type:    "Overloaded",
			Code:    r.httpStatus(),
			Details: dynamoOverloadDetails{PolicyClass: r.policyClass, LimitKind: r.limitKind.String(), Current: r.current, Limit: r.limit},
		}
	case shapeDynamoDeadline:
		v = dynamoOverload{
			Message: r.text(),
			Type:    "Overloaded",
			Code:    r.httpStatus(),
			Details: dynamoDeadlineDetails{PolicyClass: r.policyClass, Stage: r.stage.String(),
				SLOMillis: uint64(r.slo.Milliseconds()), OverdueMillis: uint64(max(0, r.overdue.Milliseconds()))},
		}
	case shapeOpenAI:
		e := openai.Error{Status: row.status, Message: r.text(), Param: r.param, Type: r.errType, Code: r.errCode}
		if e.Code == "" {
			e.Code = row.code
		}
		return e.JSON()
	case shapeSMG:
		fallthrough
	default:
		e := smgError{Type: openai.ErrorType(r.httpStatus()), Code: row.code, Message: r.text()}
		if r.reason == reasonNoEndpoints {
			e.Model = &r.model
		}
		v = struct {
			Error smgError `json:"error"`
		}{e}
	}
	// Messages are text for people (e.g. "Bearer <key>"): no HTML escaping.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Not reachable: every field is a plain string or number.
		return []byte(`{"error":{"message":"internal error"}}`)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// smgError is SMG's create_error object, with OpenAI's type where SMG
// writes the status's reason phrase ("Too Many Requests"): SMG's clients
// key on the code and the X-SMG-Error-Code header, which stay SMG's. Model
// is tollgate's addition for the no-endpoints answer.
type smgError struct {
	Type    string  `json:"type"`
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Model   *string `json:"model,omitempty"`
}

// dynamoOverload is Dynamo's HTTP 529 body for a queue-limit rejection
// or a missed deadline.
type dynamoOverload struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
	Details any    `json:"details"`
}

type dynamoDeadlineDetails struct {
	PolicyClass   string `json:"policy_class"`
	Stage         string `json:"stage"`
	SLOMillis     uint64 `json:"slo_ms"`
	OverdueMillis uint64 `json:"overdue_ms"`
}

type dynamoOverloadDetails struct {
	PolicyClass string `json:"policy_class"`
	LimitKind   string `json:"limit_kind"`
	Current     uint64 `json:"current"`
	Limit       uint64 `json:"limit"`
}

// setHeader returns an overwriting header mutation as Envoy's ext_proc
// filter applies it: raw_value only, append explicitly false.
func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header: &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		// Envoy's ext_proc filter honours only the deprecated append flag;
		// it ignores append_action.
		Append: wrapperspb.Bool(false), //nolint:staticcheck // SA1019: see above.
	}
}

// sortHeaders orders mutations by key, so answers are deterministic.
func sortHeaders(h []*corev3.HeaderValueOption) {
	slices.SortFunc(h, func(a, b *corev3.HeaderValueOption) int {
		switch {
		case a.Header.Key < b.Header.Key:
			return -1
		case a.Header.Key > b.Header.Key:
			return 1
		}
		return 0
	})
}

// bodyTooLarge is the 413 rejection for a body over limit bytes.
func bodyTooLarge(limit int) *rejection { return fromIntake(intake.BodyTooLarge(limit)) }

// intakeReasons maps intake's reasons to rows of the table.
var intakeReasons = map[intake.Reason]reason{
	intake.ReasonBadRequest:   reasonBadRequest,
	intake.ReasonUnauthorized: reasonUnauthorized,
	intake.ReasonBodyTooLarge: reasonBodyTooLarge,
}

// fromIntake is the answer to intake's refusal of a request.
func fromIntake(r *intake.Rejection) *rejection {
	return &rejection{reason: intakeReasons[r.Reason], message: r.Message, param: r.Param, errType: r.Type, errCode: r.Code}
}

// Answer returns the HTTP status and JSON body serve answers an intake
// refusal with (tollgate tokenize prints them).
func Answer(r *intake.Rejection) (status int, body []byte) {
	rej := fromIntake(r)
	return rej.httpStatus(), rej.body()
}
