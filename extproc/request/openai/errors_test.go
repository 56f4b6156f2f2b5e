package openai

import "testing"

func TestErrorType(t *testing.T) {
	for status, want := range map[int]string{
		400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error", 413: "invalid_request_error",
		429: "rate_limit_error", 431: "invalid_request_error", 500: "server_error", 503: "service_unavailable_error",
	} {
		if got := ErrorType(status); got != want {
			t.Errorf("ErrorType(%d) = %q, want %q", status, got, want)
		}
	}
}
