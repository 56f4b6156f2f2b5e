package extproc

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollgate/tollgate/extproc/engine/enginemetrics"
	"github.com/tollgate/tollgate/extproc/intake"

	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

// Defaults of the Config fields. The flag defaults of cmd/tollgate match.
const (
	// DefaultMaxBodyBytes bounds a request body (--max-body-bytes).
	DefaultMaxBodyBytes = 8 << 20
	// DefaultMaxHeaderBytes bounds the request headers, names plus values.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultEnvoyMessageTimeout is Envoy's message_timeout as the shipped
	// configurations set it (--envoy-message-timeout).
	DefaultEnvoyMessageTimeout = time.Second
	// DefaultEnvoyMaxMessageTimeout is Envoy's max_message_timeout as the
	// shipped configurations set it (--envoy-max-message-timeout).
	DefaultEnvoyMaxMessageTimeout = 310 * time.Second
	// DefaultEnvoyTimeoutMargin is how long before Envoy's message timer
	// would fire tollgate answers a held message.
	DefaultEnvoyTimeoutMargin = 100 * time.Millisecond
	// DefaultTenantMetricTopN bounds the distinct tenant label values
	// (--priority-scheduler-tenant-metric-top-n).
	DefaultTenantMetricTopN = 32
	// DefaultDrainDelay is how long Drain waits after marking the server not
	// ready before it sheds the queue (--drain-delay).
	DefaultDrainDelay = 5 * time.Second
	// DefaultShutdownTimeout bounds how long Drain waits for in-flight
	// streams (--shutdown-timeout).
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultMaxConcurrentStreams bounds the open ext_proc streams
	// (--max-concurrent-streams): every held request is one stream. It
	// matches the circuit breakers of the shipped Envoy configurations.
	DefaultMaxConcurrentStreams = 40000
	// DefaultFirstMessageTimeout bounds how long a stream may stay open
	// without sending its first message (--first-message-timeout). Envoy
	// sends the request headers as soon as it opens a stream.
	DefaultFirstMessageTimeout = 10 * time.Second
	// DefaultClassLimitStatus is Dynamo's answer to a per-worker queue
	// limit, 529 Overloaded (--class-limit-status).
	DefaultClassLimitStatus = 529
)

// ClientIPSource says where the client address of the ip: tenant tier
// comes from. Envoy's own peer address is never used.
type ClientIPSource uint8

// Client address sources.
const (
	// ClientIPSourceAddress reads the source.address request attribute
	// (request_attributes: [source.address] in the filter configuration).
	ClientIPSourceAddress ClientIPSource = iota
	// ClientIPForwardedFor reads x-forwarded-for, skipping
	// Config.ForwardedForTrustedHops entries from the right.
	ClientIPForwardedFor
)

// String returns the flag spelling.
func (s ClientIPSource) String() string {
	if s == ClientIPForwardedFor {
		return "x-forwarded-for"
	}
	return "source-address"
}

// ParseClientIPSource parses the flag spelling of a ClientIPSource.
func ParseClientIPSource(v string) (ClientIPSource, error) {
	switch v {
	case "source-address", "":
		return ClientIPSourceAddress, nil
	case "x-forwarded-for":
		return ClientIPForwardedFor, nil
	}
	return 0, fmt.Errorf("extproc: unknown client ip source %q (want source-address or x-forwarded-for)", v)
}

// GRPCConfig configures the ext_proc gRPC listener. See ServerOptions.
type GRPCConfig struct {
	// TLSCert and TLSKey are PEM files; both or neither (--grpc-tls-cert,
	// --grpc-tls-key). Without them the listener is plaintext.
	TLSCert, TLSKey string
	// ClientCA, when set, requires and verifies client certificates
	// (--grpc-client-ca). It needs TLSCert and TLSKey.
	ClientCA string
	// KeepaliveTime is how long a connection may be idle before the server
	// pings it; 0 means 30 s.
	KeepaliveTime time.Duration
	// KeepaliveTimeout is how long the server waits for a ping ack; 0 means 10 s.
	KeepaliveTimeout time.Duration
	// MinPingInterval is the shortest client ping interval the server
	// tolerates; 0 means 5 s.
	MinPingInterval time.Duration
}

// Config configures a Server. Every field is optional: the zero value of a
// field selects its documented default. Validate reports every bad value.
type Config struct {
	// Logger receives structured logs. Nil discards them.
	Logger *slog.Logger

	// Sched configures the scheduling core: policy classes, priority
	// admission, fallback capacity, block size (--block-size), selection.
	Sched sched.Config

	// Tenancy resolves tenants and clamps priorities. Nil means no tenant
	// keys, no trusted tenant header and default-max-class "default".
	Tenancy *intake.Tenancy

	// Fairness selects the fairness key of flows inside a lane
	// (--fairness); FairnessNone, the default, keeps Dynamo's lanes. It is
	// the one switch of fairness: Sched.Fairness.Enabled follows it.
	Fairness policy.FairnessMode
	// Objectives maps objective header values to priority classes
	// (--objective-class); the tenant clamp still applies. They win over
	// the names Server.SetObjectives installs later. Nil, and nothing
	// installed: the objective header is ignored.
	Objectives policy.Objectives

	// MaxBodyBytes bounds a request body (413 above it). 0 means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int
	// MaxHeaderBytes bounds the request headers, names plus values (431
	// above it). 0 means DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// MaxHeaderCount bounds the number of request header entries (431 above
	// it), whatever their size. 0 means DefaultMaxHeaderCount, Envoy's own
	// max_headers_count default.
	MaxHeaderCount int

	// EnvoyMessageTimeout is Envoy's message_timeout
	// (--envoy-message-timeout). 0 means DefaultEnvoyMessageTimeout.
	EnvoyMessageTimeout time.Duration
	// EnvoyMaxMessageTimeout is Envoy's max_message_timeout
	// (--envoy-max-message-timeout). 0 means DefaultEnvoyMaxMessageTimeout;
	// a negative value means Envoy does not accept overrides.
	EnvoyMaxMessageTimeout time.Duration
	// ClassLimitStatus is the HTTP status of a Dynamo per-worker queue
	// limit (--class-limit-status): 529, Dynamo's Overloaded and the
	// default, or 429, which the endpoint picker protocol suggests for
	// shed requests and which generic clients retry with backoff.
	ClassLimitStatus int
	// ModelRewrites maps a requested model name to the models tollgate
	// prices, routes and sends upstream instead, one chosen per request by
	// weight (--model-rewrite), at most MaxModelRewrites entries. The
	// request body is rewritten wherever the body mode lets tollgate
	// replace it (not in STREAMED mode decided on the headers alone, nor
	// NONE). Rules installed later with Server.SetModelRewrites add to it;
	// these win for the names they hold.
	ModelRewrites map[string][]intake.RewriteTarget
	// TestEndpointSelection honours the conformance suite's test-only
	// test-epp-endpoint-selection request header, which restricts a
	// request to the endpoints it names (--test-endpoint-selection). Never
	// enable it in production: any client could pick its worker.
	TestEndpointSelection bool
	// AssumedProtocol is the protocol to assume on a stream whose first
	// message carries no protocol_config, as Envoy releases before 1.34
	// send it (--assume-request-body-mode, --assume-response-body-mode). It
	// must match the filter's processing_mode. Nil means DefaultProtocol.
	AssumedProtocol *extprocv3.ProtocolConfiguration
	// EnvoyTimeoutMargin is how long before Envoy's timer fires tollgate
	// answers. 0 means DefaultEnvoyTimeoutMargin; it must be less than
	// EnvoyMessageTimeout.
	EnvoyTimeoutMargin time.Duration

	// RouterTTL is the prefix index TTL (--router-ttl-secs). 0 means
	// intake.DefaultRouterTTL.
	RouterTTL time.Duration
	// PrefixMaxEntries bounds the prefix index. 0 means
	// intake.DefaultPrefixMaxEntries.
	PrefixMaxEntries int
	// PrefixBytesPerToken sizes byte blocks for prefix hashing when the
	// tokenizer is not exact. 0 means
	// intake.DefaultPrefixBytesPerToken.
	PrefixBytesPerToken int
	// SpeculativeTTL is how long, with KV events, a routed prompt counts
	// as cached on its synced worker before the engine reports it
	// (--kv-events-speculative-ttl). 0 means intake.DefaultSpeculativeTTL.
	SpeculativeTTL time.Duration
	// Tokenizer counts prompt tokens (--tokenizer). Nil means the default
	// estimator.
	Tokenizer intake.Tokenizer

	// ClientIP selects where the ip: tenant tier reads the client address.
	ClientIP ClientIPSource
	// ForwardedForTrustedHops is how many x-forwarded-for entries, counted
	// from the right, belong to trusted proxies.
	ForwardedForTrustedHops int
	// TenantMetricTopN bounds distinct tenant label values; the rest are
	// labelled "other". 0 means DefaultTenantMetricTopN.
	TenantMetricTopN int

	// DrainDelay is how long Drain waits after marking the server not
	// ready (--drain-delay). 0 means DefaultDrainDelay; negative means none.
	DrainDelay time.Duration
	// ShutdownTimeout bounds how long Drain waits for in-flight streams
	// (--shutdown-timeout). 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// MaxConcurrentStreams bounds the open ext_proc streams; a stream over
	// it ends at once with ResourceExhausted (Envoy answers its
	// status_on_error). 0 means DefaultMaxConcurrentStreams.
	MaxConcurrentStreams int
	// FirstMessageTimeout bounds how long a stream may stay open without
	// sending a message; it then ends with DeadlineExceeded. Once Drain
	// sheds the queue, such streams end at once. 0 means
	// DefaultFirstMessageTimeout.
	FirstMessageTimeout time.Duration

	// GRPC configures the ext_proc listener.
	GRPC GRPCConfig

	// EngineMetrics, when set, scrapes every worker's engine metrics and
	// reports them to the scheduler (Sched.Engine says how they are used).
	// Nil turns scraping off (--engine-metrics-interval 0).
	EngineMetrics *enginemetrics.Config

	// Build identifies the binary the server runs in, for the
	// tollgate_build_info gauge.
	Build BuildInfo

	// Replica, when set, runs the server as one of several replicas that
	// all serve Envoy while one, elected, schedules for all (replica.go).
	// Nil runs one replica that schedules for itself.
	Replica *ReplicaConfig
}

// BuildInfo identifies a build of tollgate. /metrics exports it as
// tollgate_build_info{version,revision,goversion} 1; an empty field reads
// "unknown", and goversion is the Go release the binary was built with.
type BuildInfo struct {
	// Version is the release version, e.g. 0.1.0.
	Version string
	// Revision is the source commit.
	Revision string
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	setDefault(&c.MaxBodyBytes, DefaultMaxBodyBytes)
	setDefault(&c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	setDefault(&c.MaxHeaderCount, DefaultMaxHeaderCount)
	setDefault(&c.EnvoyMessageTimeout, DefaultEnvoyMessageTimeout)
	setDefault(&c.EnvoyMaxMessageTimeout, DefaultEnvoyMaxMessageTimeout)
	if c.EnvoyMaxMessageTimeout < 0 {
		c.EnvoyMaxMessageTimeout = 0
	}
	setDefault(&c.EnvoyTimeoutMargin, DefaultEnvoyTimeoutMargin)
	setDefault(&c.RouterTTL, intake.DefaultRouterTTL)
	setDefault(&c.PrefixMaxEntries, intake.DefaultPrefixMaxEntries)
	setDefault(&c.PrefixBytesPerToken, intake.DefaultPrefixBytesPerToken)
	setDefault(&c.SpeculativeTTL, intake.DefaultSpeculativeTTL)
	setDefault(&c.TenantMetricTopN, DefaultTenantMetricTopN)
	setDefault(&c.DrainDelay, DefaultDrainDelay)
	if c.DrainDelay < 0 {
		c.DrainDelay = 0
	}
	setDefault(&c.ShutdownTimeout, DefaultShutdownTimeout)
	setDefault(&c.MaxConcurrentStreams, DefaultMaxConcurrentStreams)
	setDefault(&c.FirstMessageTimeout, DefaultFirstMessageTimeout)
	setDefault(&c.GRPC.KeepaliveTime, 30*time.Second)
	setDefault(&c.GRPC.KeepaliveTimeout, 10*time.Second)
	setDefault(&c.GRPC.MinPingInterval, 5*time.Second)
	if c.Sched.BlockSize == 0 {
		c.Sched.BlockSize = sched.DefaultBlockSize
	}
	// Fairness is one switch: the core's flows follow the key's mode.
	c.Sched.Fairness.Enabled = c.Fairness != policy.FairnessNone
	if c.Tenancy == nil {
		c.Tenancy = &intake.Tenancy{}
	}
	if c.AssumedProtocol == nil {
		c.AssumedProtocol = DefaultProtocol()
	}
	setDefault(&c.ClassLimitStatus, DefaultClassLimitStatus)
	return c
}

// DefaultProtocol is the protocol assumed when Envoy sends no
// protocol_config: BUFFERED request and STREAMED response bodies, without
// send_body_without_waiting_for_header_response, as the shipped
// configuration sets them.
func DefaultProtocol() *extprocv3.ProtocolConfiguration {
	return &extprocv3.ProtocolConfiguration{
		RequestBodyMode:  extprocfilterv3.ProcessingMode_BUFFERED,
		ResponseBodyMode: extprocfilterv3.ProcessingMode_STREAMED,
	}
}

// ParseBodyMode parses a body send mode by its Envoy name, case and "-"
// versus "_" ignored: NONE, STREAMED, BUFFERED, BUFFERED_PARTIAL or
// FULL_DUPLEX_STREAMED. GRPC is not a mode tollgate can read.
func ParseBodyMode(s string) (extprocfilterv3.ProcessingMode_BodySendMode, error) {
	name := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
	if v, ok := extprocfilterv3.ProcessingMode_BodySendMode_value[name]; ok && validBodyMode(extprocfilterv3.ProcessingMode_BodySendMode(v)) {
		return extprocfilterv3.ProcessingMode_BodySendMode(v), nil
	}
	return 0, fmt.Errorf("unknown body mode %q: want NONE, STREAMED, BUFFERED, BUFFERED_PARTIAL or FULL_DUPLEX_STREAMED", s)
}

func validBodyMode(m extprocfilterv3.ProcessingMode_BodySendMode) bool {
	return m >= extprocfilterv3.ProcessingMode_NONE && m <= extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
}

func setDefault[T int | time.Duration](p *T, v T) {
	if *p == 0 {
		*p = v
	}
}

// Validate reports every invalid field, joined, or nil. Zero values are
// valid: they select the defaults.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("extproc: "+format, args...)) }
	if c.MaxBodyBytes < 0 {
		bad("max body bytes %d is negative", c.MaxBodyBytes)
	}
	if c.MaxBodyBytes > math.MaxInt32/2 {
		bad("max body bytes %d exceeds %d", c.MaxBodyBytes, math.MaxInt32/2)
	}
	if c.MaxHeaderBytes < 0 {
		bad("max header bytes %d is negative", c.MaxHeaderBytes)
	}
	if c.MaxHeaderCount < 0 {
		bad("max header count %d is negative", c.MaxHeaderCount)
	}
	if c.EnvoyMessageTimeout < 0 || c.EnvoyMessageTimeout > time.Hour {
		bad("envoy message timeout %v is outside [0s, 1h] (Envoy's range)", c.EnvoyMessageTimeout)
	}
	if c.EnvoyMaxMessageTimeout > time.Hour {
		bad("envoy max message timeout %v exceeds 1h (Envoy's range)", c.EnvoyMaxMessageTimeout)
	}
	if c.EnvoyTimeoutMargin < 0 {
		bad("envoy timeout margin %v is negative", c.EnvoyTimeoutMargin)
	}
	d := c.withDefaults()
	if d.EnvoyTimeoutMargin >= d.EnvoyMessageTimeout {
		bad("envoy timeout margin %v must be less than the envoy message timeout %v", d.EnvoyTimeoutMargin, d.EnvoyMessageTimeout)
	}
	if d.EnvoyMaxMessageTimeout > 0 && d.EnvoyMaxMessageTimeout < d.EnvoyMessageTimeout {
		bad("envoy max message timeout %v is less than the envoy message timeout %v", d.EnvoyMaxMessageTimeout, d.EnvoyMessageTimeout)
	}
	if c.Sched.Fairness.Enabled && c.Fairness == policy.FairnessNone {
		bad("Sched.Fairness.Enabled is set without a fairness mode: set Fairness (--fairness), which switches the flows on")
	}
	if err := c.Objectives.Validate(); err != nil {
		bad("objective classes: %v", err)
	}
	if c.RouterTTL < 0 {
		bad("router ttl %v is negative", c.RouterTTL)
	}
	if c.PrefixMaxEntries < 0 {
		bad("prefix max entries %d is negative", c.PrefixMaxEntries)
	}
	if c.SpeculativeTTL < 0 {
		bad("speculative ttl %v is negative", c.SpeculativeTTL)
	}
	if c.PrefixBytesPerToken < 0 {
		bad("prefix bytes per token %d is negative", c.PrefixBytesPerToken)
	}
	if c.ClientIP > ClientIPForwardedFor {
		bad("unknown client ip source %d", c.ClientIP)
	}
	if c.ForwardedForTrustedHops < 0 {
		bad("x-forwarded-for trusted hops %d is negative", c.ForwardedForTrustedHops)
	}
	if c.TenantMetricTopN < 0 {
		bad("tenant metric top-n %d is negative", c.TenantMetricTopN)
	}
	if c.ShutdownTimeout < 0 {
		bad("shutdown timeout %v is negative", c.ShutdownTimeout)
	}
	if c.MaxConcurrentStreams < 0 {
		bad("max concurrent streams %d is negative", c.MaxConcurrentStreams)
	}
	if c.FirstMessageTimeout < 0 {
		bad("first message timeout %v is negative", c.FirstMessageTimeout)
	}
	if c.Sched.BlockSize > math.MaxInt32 {
		bad("block size %d is too large", c.Sched.BlockSize)
	}
	if err := intake.ValidRewrites(c.ModelRewrites); err != nil {
		bad("%v", err)
	}
	if s := c.ClassLimitStatus; s != 0 && s != http.StatusTooManyRequests && s != DefaultClassLimitStatus {
		bad("class limit status %d is neither 529 nor 429", s)
	}
	if p := c.AssumedProtocol; p != nil {
		if !validBodyMode(p.GetRequestBodyMode()) {
			bad("assumed request body mode %v is not one tollgate reads", p.GetRequestBodyMode())
		}
		if !validBodyMode(p.GetResponseBodyMode()) {
			bad("assumed response body mode %v is not one tollgate reads", p.GetResponseBodyMode())
		}
	}
	if c.Tenancy != nil {
		if err := c.Tenancy.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.GRPC.validate())
	if c.Replica != nil {
		if err := c.Replica.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (g GRPCConfig) validate() error {
	var errs []error
	if (g.TLSCert == "") != (g.TLSKey == "") {
		errs = append(errs, errors.New("extproc: grpc tls cert and key must be set together"))
	}
	if g.ClientCA != "" && g.TLSCert == "" {
		errs = append(errs, errors.New("extproc: grpc client ca needs a tls cert and key"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"keepalive time", g.KeepaliveTime}, {"keepalive timeout", g.KeepaliveTimeout}, {"min ping interval", g.MinPingInterval}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("extproc: grpc %s %v is negative", d.name, d.v))
		}
	}
	return errors.Join(errs...)
}
