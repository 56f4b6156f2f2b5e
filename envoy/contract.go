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

	// SourceAddressAttribute is the ext_proc request attribute tollgate
	// reads the client address of ip: tenants from, by default.
	SourceAddressAttribute = "source.address"

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
)

// Needs is what the checks must know about the tollgate behind a
// configuration.
type Needs struct {
	// LongestQueueWait is tollgate's longest queue wait: LongestQueueWait
	// unless the operator raised SMG's bulk queue timeout.
	LongestQueueWait time.Duration
	// SourceAddress is set when tollgate reads the client address of ip:
	// tenants from the source.address request attribute
	// (--client-ip-source source-address, the default).
	SourceAddress bool
}

// Defaults is what tollgate run with its default flags needs.
func Defaults() Needs {
	return Needs{LongestQueueWait: LongestQueueWait, SourceAddress: true}
}
