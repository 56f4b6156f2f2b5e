package intake

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/sched/policy"
)

// Reason is why intake refuses a request. The shell maps each to its HTTP
// answer.
type Reason uint8

// Reasons.
const (
	// ReasonBadRequest: an unparsable body, a conversation the chat
	// template refuses, or a malformed header value (400).
	ReasonBadRequest Reason = iota + 1
	// ReasonUnauthorized: a missing or unknown tenant API key (401).
	ReasonUnauthorized
	// ReasonBodyTooLarge: a body over the limit (413).
	ReasonBodyTooLarge
)

// Rejection is intake's refusal of a request, with what the answer's body
// names. It is an error.
type Rejection struct {
	Reason Reason
	// Message replaces the answer's default message when set.
	Message string
	// Param names the offending field or header.
	Param string
	// Type and Code replace the OpenAI error object's type and code.
	Type, Code string
}

func (r *Rejection) Error() string { return r.Message }

// BodyTooLarge is the rejection of a body over limit bytes.
func BodyTooLarge(limit int) *Rejection {
	return &Rejection{Reason: ReasonBodyTooLarge, Message: "request body exceeds the limit of " + strconv.Itoa(limit) + " bytes"}
}

// badRequest maps a body parse error to its rejection.
func badRequest(err error) *Rejection {
	var oe *openai.Error
	if errors.As(err, &oe) {
		r := &Rejection{Reason: ReasonBadRequest, Message: oe.Message, Param: oe.Param, Type: oe.Type, Code: oe.Code}
		if oe.Status == http.StatusRequestEntityTooLarge {
			r.Reason = ReasonBodyTooLarge
		}
		return r
	}
	return &Rejection{Reason: ReasonBadRequest, Message: err.Error()}
}

// headerRejection answers a malformed flow-control or pin header with a
// 400 naming it.
func headerRejection(err error) *Rejection {
	r := &Rejection{Reason: ReasonBadRequest, Message: err.Error()}
	var he *policy.HeaderError
	var pe *policy.PinError
	switch {
	case errors.As(err, &he):
		r.Param = he.Header
	case errors.As(err, &pe):
		r.Param = pe.Header
	}
	return r
}
