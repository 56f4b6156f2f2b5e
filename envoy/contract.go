package envoy

import "time"

// The facts about tollgate that every Envoy artefact must respect. They
// mirror tollgate's outside contract; change them only with it.
const (
	// LongestQueueWait is the longest time tollgate may hold a request: SMG's
	// bulk class queue_timeout_secs default. Every timer that counts queue
	// time must be longer, or disabled.
	LongestQueueWait = 300 * time.Second

	// DestinationHeader carries the IP:port of the worker tollgate chose.
	DestinationHeader = "x-gateway-destination-endpoint"

	// LBNamespace is the dynamic metadata namespace tollgate writes the
	// same value into; Envoy drops it unless ext_proc may receive it.
	LBNamespace = "envoy.lb"

	// PreemptedDetails is Envoy's response code details for the local reply
	// it sends when tollgate ends a preempted request's stream with gRPC
	// UNAVAILABLE (14) and the message "scheduler_preempted".
	PreemptedDetails = "ext_proc_error_gRPC_error_14{scheduler_preempted}"

	// PreemptedExpression is the CEL filter that selects that local reply.
	PreemptedExpression = "response.code_details == '" + PreemptedDetails + "'"

	// PreemptedBody is SMG's JSON body for a preempted request.
	PreemptedBody = `{"error":{"type":"Service Unavailable","code":"scheduler_preempted",` +
		`"message":"request preempted by higher-priority traffic","param":null}}`

	// MinCircuitBreaker is the least each circuit breaker threshold of the
	// ext_proc and worker clusters may be. Every held request is one gRPC
	// stream, and Envoy's default of 1024 would cap the queue depth.
	MinCircuitBreaker = 10000

	// MinBodyBufferBytes is the least connection buffer a listener in front
	// of tollgate may have: BUFFERED request bodies must fit in it.
	MinBodyBufferBytes = 8 << 20
)

// Names of the Envoy extensions the checks look for.
const (
	extProcFilter        = "envoy.filters.http.ext_proc"
	headerMutationFilter = "envoy.filters.http.header_mutation"
	routerFilter         = "envoy.filters.http.router"
	celFilterName        = "envoy.access_loggers.extension_filters.cel"
)

// PreemptedHeaders are the headers SMG sends with a preempted request's 503.
var PreemptedHeaders = map[string]string{
	"x-smg-preempted":  "true",
	"x-smg-error-code": "scheduler_preempted",
	"retry-after":      "1",
}
