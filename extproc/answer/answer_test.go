package answer

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/sched"
)

// TestAnswerTable checks every row of the rejection table: status, headers
// (sorted, raw_value only, append false) and the exact JSON body.
func TestAnswerTable(t *testing.T) {
	tests := []struct {
		name    string
		r       *Rejection
		status  int32
		headers map[string]string
		body    string
	}{
		{
			name: "queue full", r: &Rejection{Reason: ReasonQueueFull}, status: 429,
			headers: map[string]string{"content-type": "application/json", "retry-after": "2", "x-smg-error-code": "scheduler_queue_full"},
			body:    `{"error":{"type":"rate_limit_error","code":"scheduler_queue_full","message":"request queue is full for this priority class","param":null}}`,
		},
		{
			name: "queue timeout", r: &Rejection{Reason: ReasonQueueTimeout}, status: 503,
			headers: map[string]string{"content-type": "application/json", "retry-after": "2", "x-smg-error-code": "scheduler_queue_timeout"},
			body:    `{"error":{"type":"service_unavailable_error","code":"scheduler_queue_timeout","message":"timed out waiting for an admission slot","param":null}}`,
		},
		{
			name: "preempted", r: &Rejection{Reason: ReasonPreempted}, status: 503,
			headers: map[string]string{"content-type": "application/json", "retry-after": "1", "x-smg-error-code": "scheduler_preempted", "x-smg-preempted": "true"},
			body:    `{"error":{"type":"service_unavailable_error","code":"scheduler_preempted","message":"request preempted by higher-priority traffic","param":null}}`,
		},
		{
			name: "dynamo queue limit", r: &Rejection{Reason: ReasonClassLimit, PolicyClass: "premium", LimitKind: sched.LimitRawISLTokens, Current: 9000, Limit: 8192}, status: 529,
			headers: map[string]string{"content-type": "application/json"},
			body:    `{"message":"router policy class \"premium\" queue raw_isl_tokens limit reached (current=9000, limit=8192)","type":"Overloaded","code":529,"details":{"policy_class":"premium","limit_kind":"raw_isl_tokens","current":9000,"limit":8192}}`,
		},
		{
			name: "no endpoints", r: &Rejection{Reason: ReasonNoEndpoints, Model: "llama", Message: `no endpoints available to route work: no ready worker serves the model`}, status: 503,
			headers: map[string]string{"content-type": "application/json", "x-smg-error-code": "no_endpoints"},
			body:    `{"error":{"type":"service_unavailable_error","code":"no_endpoints","message":"no endpoints available to route work: no ready worker serves the model","param":null,"model":"llama"}}`,
		},
		{
			name: "model not found", r: ModelNotFound("gpt-nope"), status: 404,
			headers: map[string]string{"content-type": "application/json"},
			body:    "{\"error\":{\"message\":\"The model `gpt-nope` does not exist.\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_not_found\"}}",
		},
		{
			name: "pin invalid", r: &Rejection{Reason: ReasonPinInvalid, Message: "Pinned worker w9 dp_rank 0 is not eligible: worker w9 is unavailable"}, status: 503,
			headers: map[string]string{"content-type": "application/json", "x-smg-error-code": "pinned_worker_not_eligible"},
			body:    `{"error":{"type":"service_unavailable_error","code":"pinned_worker_not_eligible","message":"Pinned worker w9 dp_rank 0 is not eligible: worker w9 is unavailable","param":null}}`,
		},
		{
			name: "shutdown", r: &Rejection{Reason: ReasonShutdown}, status: 503,
			headers: map[string]string{"content-type": "application/json", "retry-after": "1", "x-smg-error-code": "server_shutting_down"},
			body:    `{"error":{"type":"service_unavailable_error","code":"server_shutting_down","message":"the server is shutting down","param":null}}`,
		},
		{
			name: "unauthorized", r: &Rejection{Reason: ReasonUnauthorized, Message: "missing API key: send it as Authorization: Bearer <key>"}, status: 401,
			headers: map[string]string{"content-type": "application/json", "x-smg-error-code": "unauthorized"},
			body:    `{"error":{"type":"authentication_error","code":"unauthorized","message":"missing API key: send it as Authorization: Bearer <key>","param":null}}`,
		},
		{
			name: "bad request", r: &Rejection{Reason: ReasonBadRequest, Message: "'model' is required", Param: "model", ErrCode: "missing_required_parameter"}, status: 400,
			headers: map[string]string{"content-type": "application/json"},
			body:    `{"error":{"message":"'model' is required","type":"invalid_request_error","param":"model","code":"missing_required_parameter"}}`,
		},
		{
			name: "body too large", r: BodyTooLarge(1024), status: 413,
			headers: map[string]string{"content-type": "application/json"},
			body:    `{"error":{"message":"request body exceeds the limit of 1024 bytes","type":"invalid_request_error","param":null,"code":"request_too_large"}}`,
		},
		{
			name: "headers too large", r: &Rejection{Reason: ReasonHeadersTooLarge, Message: "request headers exceed the limit of 65536 bytes"}, status: 431,
			headers: map[string]string{"content-type": "application/json", "x-smg-error-code": "request_headers_too_large"},
			body:    `{"error":{"type":"invalid_request_error","code":"request_headers_too_large","message":"request headers exceed the limit of 65536 bytes","param":null}}`,
		},
		{
			name: "admission queue full", r: mustReject(t, &sched.Action{Outcome: sched.OutcomeAdmissionFull, Message: "concurrency limit reached and queuing is disabled"}), status: 429,
			headers: map[string]string{"content-type": "application/json", "retry-after": "2", "x-smg-error-code": "admission_queue_full"},
			body:    `{"error":{"type":"rate_limit_error","code":"admission_queue_full","message":"concurrency limit reached and queuing is disabled","param":null}}`,
		},
		{
			name: "admission queue timeout", r: mustReject(t, &sched.Action{Outcome: sched.OutcomeAdmissionTimeout}), status: 503,
			headers: map[string]string{"content-type": "application/json", "retry-after": "2", "x-smg-error-code": "admission_queue_timeout"},
			body:    `{"error":{"type":"service_unavailable_error","code":"admission_queue_timeout","message":"timed out waiting for an admission slot","param":null}}`,
		},
		{
			name: "tenant rate limit", r: mustReject(t, &sched.Action{Outcome: sched.OutcomeTenantRateLimited, RetryAfter: 51 * time.Second}), status: 429,
			headers: map[string]string{"content-type": "application/json", "retry-after": "51", "x-smg-error-code": "tenant_rate_limit_exceeded"},
			body:    `{"error":{"type":"rate_limit_error","code":"tenant_rate_limit_exceeded","message":"Tenant rate limit exceeded for this request","param":null}}`,
		},
		{
			name: "dynamo deadline", r: mustReject(t, &sched.Action{Outcome: sched.OutcomeDeadlineExceeded, PolicyClass: "latency", Stage: sched.StageDispatch, SLO: 3 * time.Second, Overdue: 1500 * time.Millisecond}), status: 529,
			headers: map[string]string{"content-type": "application/json"},
			body:    `{"message":"router policy class \"latency\" deadline exceeded at dispatch (slo=3000ms, overdue=1500ms)","type":"Overloaded","code":529,"details":{"policy_class":"latency","stage":"dispatch","slo_ms":3000,"overdue_ms":1500}}`,
		},
		{
			name: "unknown policy class", r: mustReject(t, &sched.Action{Outcome: sched.OutcomeUnknownClass}), status: 400,
			headers: map[string]string{"content-type": "application/json"},
			body:    `{"error":{"message":"unknown router policy class","type":"invalid_request_error","param":"x-dynamo-meta-policy-class","code":"unknown_policy_class"}}`,
		},
	}
	seen := map[Reason]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen[tt.r.Reason] = true
			ir := tt.r.Immediate()
			if got := int32(ir.GetStatus().GetCode()); got != tt.status {
				t.Errorf("status %d, want %d", got, tt.status)
			}
			if diff := cmp.Diff(tt.headers, headerMap(ir.GetHeaders())); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
			var keys []string
			for _, h := range ir.GetHeaders().GetSetHeaders() {
				keys = append(keys, h.GetHeader().GetKey())
				if !appendFalse(h) || h.GetHeader().GetValue() != "" {
					t.Errorf("header %s: want raw_value only and append=false", h.GetHeader().GetKey())
				}
			}
			for i := 1; i < len(keys); i++ {
				if keys[i-1] >= keys[i] {
					t.Errorf("headers not sorted: %v", keys)
				}
			}
			if diff := cmp.Diff(tt.body, string(ir.GetBody())); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
	for r := ReasonUnknown + 1; r < NumReasons; r++ {
		if !seen[r] {
			t.Errorf("reason %d has no test row", r)
		}
	}
}

// mustReject is For of an answered outcome.
func mustReject(t *testing.T, a *sched.Action) *Rejection {
	t.Helper()
	r, ok := For(a)
	if !ok {
		t.Fatalf("outcome %s is not answered", a.Outcome)
	}
	return r
}

// A tenant denial that waiting cannot help carries no Retry-After.
func TestAnswerTable_TenantDenialWithoutWait(t *testing.T) {
	ir := mustReject(t, &sched.Action{Outcome: sched.OutcomeTenantRateLimited}).Immediate()
	if _, ok := headerMap(ir.GetHeaders())["retry-after"]; ok {
		t.Fatal("retry-after on a denial no wait can help")
	}
}

func TestFor_MapsEveryAnsweredOutcome(t *testing.T) {
	want := map[sched.Outcome]Reason{
		sched.OutcomeQueueFull:    ReasonQueueFull,
		sched.OutcomeQueueTimeout: ReasonQueueTimeout,
		sched.OutcomePreempted:    ReasonPreempted,
		sched.OutcomeClassLimit:   ReasonClassLimit,
		sched.OutcomeNoEndpoints:  ReasonNoEndpoints,
		sched.OutcomePinInvalid:   ReasonPinInvalid,
		sched.OutcomeShutdown:     ReasonShutdown,

		sched.OutcomeRateLimited:       ReasonQueueFull,
		sched.OutcomeAdmissionFull:     ReasonAdmissionFull,
		sched.OutcomeAdmissionTimeout:  ReasonAdmissionTimeout,
		sched.OutcomeTenantRateLimited: ReasonTenantRateLimited,
		sched.OutcomeDeadlineExceeded:  ReasonDeadlineExceeded,
		sched.OutcomeUnknownClass:      ReasonUnknownClass,
	}
	for o := sched.OutcomeUnknown; o < sched.NumOutcomes; o++ {
		r, ok := For(&sched.Action{Outcome: o})
		w, answered := want[o]
		if ok != answered || (ok && r.Reason != w) {
			t.Errorf("outcome %d: got %v %v, want %v %v", o, r, ok, w, answered)
		}
	}
}

// headerMap flattens a header mutation.
func headerMap(m *extprocv3.HeaderMutation) map[string]string {
	out := map[string]string{}
	for _, h := range m.GetSetHeaders() {
		out[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	return out
}

// appendFalse reports whether a mutation sets the deprecated append flag,
// the one Envoy's ext_proc filter reads, explicitly to false.
func appendFalse(h *corev3.HeaderValueOption) bool {
	a := h.GetAppend() //nolint:staticcheck // SA1019: ext_proc reads only this flag.
	return a != nil && !a.GetValue()
}
