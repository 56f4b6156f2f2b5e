package answer

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

// Reason names one row of the rejection table. Every HTTP answer tollgate
// gives instead of routing a request comes from this table; nothing else
// chooses a status code.
type Reason uint8

// Rejection reasons.
const (
	ReasonUnknown Reason = iota
	// ReasonQueueFull: SMG class queue at queue_size.
	ReasonQueueFull
	// ReasonQueueTimeout: SMG queue_timeout_secs elapsed, or Envoy's message
	// budget would run out first.
	ReasonQueueTimeout
	// ReasonPreempted: the victim of a preemption.
	ReasonPreempted
	// ReasonClassLimit: a Dynamo per-worker queue limit (529).
	ReasonClassLimit
	// ReasonNoEndpoints: no eligible worker.
	ReasonNoEndpoints
	// ReasonModelNotFound: no worker of the fleet serves the model.
	ReasonModelNotFound
	// ReasonPinInvalid: the pinned worker or rank is not eligible.
	ReasonPinInvalid
	// ReasonShutdown: the server is draining.
	ReasonShutdown
	// ReasonUnauthorized: a missing or unknown tenant API key.
	ReasonUnauthorized
	// ReasonBadRequest: an unparsable body or a malformed header value.
	ReasonBadRequest
	// ReasonBodyTooLarge: a body over --max-body-bytes.
	ReasonBodyTooLarge
	// ReasonHeadersTooLarge: headers over the header or metadata limits.
	ReasonHeadersTooLarge
	// ReasonAdmissionFull, ReasonAdmissionTimeout: SMG's legacy admission.
	ReasonAdmissionFull
	ReasonAdmissionTimeout
	// ReasonTenantRateLimited: a tenant budget cannot afford the request.
	ReasonTenantRateLimited
	// ReasonDeadlineExceeded: a flat policy class's SLO deadline passed (529).
	ReasonDeadlineExceeded
	// ReasonUnknownClass: no flat policy class of the requested name.
	ReasonUnknownClass
	NumReasons
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
var answerTable = [NumReasons]answerRow{
	ReasonQueueFull:         {status: http.StatusTooManyRequests, code: "scheduler_queue_full", message: "request queue is full for this priority class", retryAfter: "2", shape: shapeSMG},
	ReasonQueueTimeout:      {status: http.StatusServiceUnavailable, code: "scheduler_queue_timeout", message: "timed out waiting for an admission slot", retryAfter: "2", shape: shapeSMG},
	ReasonPreempted:         {status: http.StatusServiceUnavailable, code: "scheduler_preempted", message: "request preempted by higher-priority traffic", retryAfter: "1", preempted: true, shape: shapeSMG},
	ReasonClassLimit:        {status: 529, code: "Overloaded", shape: shapeDynamoOverload},
	ReasonNoEndpoints:       {status: http.StatusServiceUnavailable, code: "no_endpoints", message: "no endpoints available to route work", shape: shapeSMG},
	ReasonModelNotFound:     {status: http.StatusNotFound, code: "model_not_found", message: "the model does not exist", shape: shapeOpenAI},
	ReasonPinInvalid:        {status: http.StatusServiceUnavailable, code: "pinned_worker_not_eligible", message: "pinned worker is not eligible", shape: shapeSMG},
	ReasonShutdown:          {status: http.StatusServiceUnavailable, code: "server_shutting_down", message: "the server is shutting down", retryAfter: "1", shape: shapeSMG},
	ReasonUnauthorized:      {status: http.StatusUnauthorized, code: "unauthorized", message: "missing or invalid api key", shape: shapeSMG},
	ReasonBadRequest:        {status: http.StatusBadRequest, code: "invalid_request", message: "invalid request", shape: shapeOpenAI},
	ReasonBodyTooLarge:      {status: http.StatusRequestEntityTooLarge, code: "request_too_large", message: "request body is too large", shape: shapeOpenAI},
	ReasonHeadersTooLarge:   {status: http.StatusRequestHeaderFieldsTooLarge, code: "request_headers_too_large", message: "request headers are too large", shape: shapeSMG},
	ReasonAdmissionFull:     {status: http.StatusTooManyRequests, code: "admission_queue_full", message: "admission queue is at capacity", retryAfter: "2", shape: shapeSMG},
	ReasonAdmissionTimeout:  {status: http.StatusServiceUnavailable, code: "admission_queue_timeout", message: "timed out waiting for an admission slot", retryAfter: "2", shape: shapeSMG},
	ReasonTenantRateLimited: {status: http.StatusTooManyRequests, code: "tenant_rate_limit_exceeded", message: "Tenant rate limit exceeded for this request", shape: shapeSMG},
	ReasonDeadlineExceeded:  {status: 529, code: "Overloaded", shape: shapeDynamoDeadline},
	ReasonUnknownClass:      {status: http.StatusBadRequest, code: "unknown_policy_class", message: "unknown router policy class", shape: shapeOpenAI},
}

// Rejection is one answer to give: a reason plus the details its body needs.
type Rejection struct {
	Reason Reason
	// Message replaces the row's default message when set.
	Message string
	// Param names the offending field or header (OpenAI shape).
	Param string
	// ErrType and ErrCode replace the OpenAI shape's type
	// (invalid_request_error) and code (the row's).
	ErrType, ErrCode string
	// Model is named in a no-endpoints body.
	Model string
	// Status replaces the row's HTTP status when set (the operator's
	// choice for per-worker queue limits, the shell's ClassLimitStatus).
	Status int
	// RetryAfter replaces the row's Retry-After when set.
	RetryAfter string
	// Dynamo queue-limit and deadline details.
	PolicyClass string
	LimitKind   sched.LimitKind
	Current     uint64
	Limit       uint64
	Stage       sched.DeadlineStage
	SLO         time.Duration
	Overdue     time.Duration
}

// String describes the rejection for logs.
func (r *Rejection) String() string {
	row := answerTable[r.Reason]
	return fmt.Sprintf("%d %s: %s", r.HTTPStatus(), row.code, r.Text())
}

// HTTPStatus is the answer's HTTP status.
func (r *Rejection) HTTPStatus() int {
	if r.Status != 0 {
		return r.Status
	}
	return answerTable[r.Reason].status
}

// Code is the row's error code (the metric label).
func (r *Rejection) Code() string { return answerTable[r.Reason].code }

// Text is the message the body carries.
func (r *Rejection) Text() string {
	switch r.Reason {
	case ReasonUnknown, ReasonQueueFull, ReasonQueueTimeout, ReasonPreempted, ReasonNoEndpoints,
		ReasonModelNotFound, ReasonPinInvalid, ReasonShutdown, ReasonUnauthorized, ReasonBadRequest,
		ReasonBodyTooLarge, ReasonHeadersTooLarge, ReasonAdmissionFull, ReasonAdmissionTimeout,
		ReasonTenantRateLimited, ReasonUnknownClass:
		// the caller's message or the row's
	case ReasonClassLimit:
		return fmt.Sprintf("router policy class %q queue %s limit reached (current=%d, limit=%d)",
			r.PolicyClass, r.LimitKind, r.Current, r.Limit)
	case ReasonDeadlineExceeded:
		return fmt.Sprintf("router policy class %q deadline exceeded at %s (slo=%dms, overdue=%dms)",
			r.PolicyClass, r.Stage, r.SLO.Milliseconds(), r.Overdue.Milliseconds())
	}
	if r.Message != "" {
		return r.Message
	}
	return answerTable[r.Reason].message
}

// ModelNotFound is OpenAI's answer for a model no worker serves, as vLLM
// gives it: 404, invalid_request_error, code model_not_found, param model.
func ModelNotFound(model string) *Rejection {
	return &Rejection{Reason: ReasonModelNotFound, Param: "model", Message: fmt.Sprintf("The model `%s` does not exist.", model)}
}

// For maps a scheduler outcome to its rejection. ok is false for
// outcomes that are not answered (admitted, client cancelled).
func For(a *sched.Action) (*Rejection, bool) {
	var r Rejection
	switch a.Outcome {
	case sched.OutcomeQueueFull, sched.OutcomeRateLimited:
		r.Reason = ReasonQueueFull
	case sched.OutcomeQueueTimeout:
		r.Reason = ReasonQueueTimeout
	case sched.OutcomePreempted:
		r.Reason = ReasonPreempted
	case sched.OutcomeClassLimit:
		r = Rejection{Reason: ReasonClassLimit, PolicyClass: a.PolicyClass, LimitKind: a.LimitKind, Current: a.LimitCurrent, Limit: a.LimitValue}
	case sched.OutcomeNoEndpoints:
		r = Rejection{Reason: ReasonNoEndpoints, Message: a.Message, Model: a.Model}
	case sched.OutcomePinInvalid:
		r = Rejection{Reason: ReasonPinInvalid, Message: a.Message}
	case sched.OutcomeShutdown:
		r.Reason = ReasonShutdown
	case sched.OutcomeAdmissionFull:
		r = Rejection{Reason: ReasonAdmissionFull, Message: a.Message}
	case sched.OutcomeAdmissionTimeout:
		r.Reason = ReasonAdmissionTimeout
	case sched.OutcomeTenantRateLimited:
		r.Reason = ReasonTenantRateLimited
		if a.RetryAfter > 0 {
			r.RetryAfter = strconv.FormatInt(int64(a.RetryAfter/time.Second), 10)
		}
	case sched.OutcomeDeadlineExceeded:
		r = Rejection{Reason: ReasonDeadlineExceeded, PolicyClass: a.PolicyClass, Stage: a.Stage, SLO: a.SLO, Overdue: a.Overdue}
	case sched.OutcomeUnknownClass:
		r = Rejection{Reason: ReasonUnknownClass, Param: policy.HeaderPolicyClass}
	case sched.OutcomeUnknown, sched.OutcomeAdmitted, sched.OutcomeClientCancelled:
		return nil, false
	default: // an outcome this table does not know yet
		return nil, false
	}
	return &r, true
}

// Immediate renders the rejection as Envoy's ImmediateResponse.
func (r *Rejection) Immediate() *extprocv3.ImmediateResponse {
	row := answerTable[r.Reason]
	hdrs := []*corev3.HeaderValueOption{SetHeader("content-type", "application/json")}
	if ra := cmp.Or(r.RetryAfter, row.retryAfter); ra != "" {
		hdrs = append(hdrs, SetHeader("retry-after", ra))
	}
	if row.shape == shapeSMG {
		hdrs = append(hdrs, SetHeader("x-smg-error-code", row.code))
	}
	if row.preempted {
		hdrs = append(hdrs, SetHeader("x-smg-preempted", "true"))
	}
	SortHeaders(hdrs)
	return &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(r.HTTPStatus())},
		Headers: &extprocv3.HeaderMutation{SetHeaders: hdrs},
		Body:    r.Body(),
		Details: "tollgate_" + row.code,
	}
}

// Body renders the JSON body of the rejection's shape.
func (r *Rejection) Body() []byte {
	row := answerTable[r.Reason]
	var v any
	switch row.shape {
	case shapeDynamoOverload, shapeDynamoDeadline:
		v = dynamoOverload{Message: r.Text(), Type: "Overloaded", Code: r.HTTPStatus(), Details: r.dynamoDetails(row.shape)}
	case shapeOpenAI:
		e := openai.Error{Status: row.status, Message: r.Text(), Param: r.Param, Type: r.ErrType, Code: r.ErrCode}
		if e.Code == "" {
			e.Code = row.code
		}
		return e.JSON()
	case shapeSMG:
		fallthrough
	default:
		e := smgError{Type: openai.ErrorType(r.HTTPStatus()), Code: row.code, Message: r.Text()}
		if r.Reason == ReasonNoEndpoints {
			e.Model = &r.Model
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

// dynamoDetails is the details object of Dynamo's 529 of shape sh.
func (r *Rejection) dynamoDetails(sh bodyShape) any {
	if sh == shapeDynamoDeadline {
		return dynamoDeadlineDetails{PolicyClass: r.PolicyClass, Stage: r.Stage.String(),
			SLOMillis: uint64(r.SLO.Milliseconds()), OverdueMillis: uint64(max(0, r.Overdue.Milliseconds()))}
	}
	return dynamoOverloadDetails{PolicyClass: r.PolicyClass, LimitKind: r.LimitKind.String(), Current: r.Current, Limit: r.Limit}
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

// SetHeader returns an overwriting header mutation as Envoy's ext_proc
// filter applies it: raw_value only, append explicitly false.
func SetHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header: &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		// Envoy's ext_proc filter honours only the deprecated append flag;
		// it ignores append_action.
		Append: wrapperspb.Bool(false), //nolint:staticcheck // SA1019: see above.
	}
}

// SortHeaders orders mutations by key, so answers are deterministic.
func SortHeaders(h []*corev3.HeaderValueOption) {
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

// BodyTooLarge is the 413 rejection for a body over limit bytes.
func BodyTooLarge(limit int) *Rejection { return FromIntake(intake.BodyTooLarge(limit)) }

// intakeReasons maps intake's reasons to rows of the table.
var intakeReasons = map[intake.Reason]Reason{
	intake.ReasonBadRequest:   ReasonBadRequest,
	intake.ReasonUnauthorized: ReasonUnauthorized,
	intake.ReasonBodyTooLarge: ReasonBodyTooLarge,
}

// FromIntake is the answer to intake's refusal of a request.
func FromIntake(r *intake.Rejection) *Rejection {
	return &Rejection{Reason: intakeReasons[r.Reason], Message: r.Message, Param: r.Param, ErrType: r.Type, ErrCode: r.Code}
}
