package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Error is a request the server refuses, in the OpenAI error shape.
type Error struct {
	// Status is the HTTP status; Parse always uses 400.
	Status int
	// Message says what is wrong, naming the field.
	Message string
	// Param is the offending field's path (for example messages[1].role),
	// or empty.
	Param string
	// Type is the OpenAI error type; empty renders as invalid_request_error.
	Type string
	// Code is a machine-readable reason (invalid_json, invalid_type,
	// invalid_value, missing_required_parameter), or empty.
	Code string
}

// Error codes used by Parse.
const (
	CodeInvalidJSON     = "invalid_json"
	CodeInvalidType     = "invalid_type"
	CodeInvalidValue    = "invalid_value"
	CodeMissingRequired = "missing_required_parameter"
)

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// ErrorType is the error object's type for an HTTP status, in OpenAI's
// snake_case: rate_limit_error (429), authentication_error (401),
// service_unavailable_error (503), server_error (other 5xx), else
// invalid_request_error.
func ErrorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusServiceUnavailable:
		return "service_unavailable_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// JSON returns the OpenAI error body:
// {"error":{"message":…,"type":…,"param":…,"code":…}}, with param and code
// null when empty.
func (e *Error) JSON() []byte {
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	b := body{Message: e.Message, Type: e.Type}
	if b.Type == "" {
		b.Type = "invalid_request_error"
	}
	if e.Param != "" {
		b.Param = &e.Param
	}
	if e.Code != "" {
		b.Code = &e.Code
	}
	out, err := json.Marshal(struct {
		Error body `json:"error"`
	}{b})
	if err != nil { // unreachable: every field is a string
		return []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}`)
	}
	return out
}

func badRequest(code, param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...), Param: param, Code: code}
}

// missing reports an absent required field.
func missing(field string) *Error {
	return badRequest(CodeMissingRequired, field, "'%s' is required", field)
}

// wrongType reports a field of the wrong JSON type; want completes
// "'field' must be …".
func wrongType(field, want string) *Error {
	return badRequest(CodeInvalidType, field, "'%s' must be %s", field, want)
}

// invalid reports a field of the right type with an unacceptable value.
func invalid(field, want string) *Error {
	return badRequest(CodeInvalidValue, field, "'%s' must be %s", field, want)
}
