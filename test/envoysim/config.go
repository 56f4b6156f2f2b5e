package envoysim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/grpc"
)

// Defaults, taken from Envoy's ext_proc filter, HTTP connection manager and
// ORIGINAL_DST cluster unless a comment says otherwise.
const (
	// DefaultMessageTimeout is Envoy's message_timeout default.
	DefaultMessageTimeout = 200 * time.Millisecond
	// DefaultStatusOnError is Envoy's status_on_error default.
	DefaultStatusOnError = 500
	// DefaultRemoteCloseTimeout is how long a half-closed side stream may
	// stay open before Envoy resets it
	// (envoy.filters.http.ext_proc.remote_close_timeout_milliseconds).
	DefaultRemoteCloseTimeout = time.Second
	// DefaultDestinationHeader is the header the project's ORIGINAL_DST
	// cluster reads (http_header_name).
	DefaultDestinationHeader = "x-gateway-destination-endpoint"
	// DefaultMetadataNamespace is the dynamic metadata namespace read by
	// load balancers (metadata_key.key).
	DefaultMetadataNamespace = "envoy.lb"
	// DefaultConnectTimeout is the upstream connect_timeout of the shipped
	// ORIGINAL_DST cluster.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultMaxHeadersCount is the HTTP connection manager's
	// max_headers_count default.
	DefaultMaxHeadersCount = 100
	// DefaultMaxHeadersKB is the HTTP connection manager's
	// max_request_headers_kb default.
	DefaultMaxHeadersKB = 60
	// DefaultMaxRequestBodyBytes bounds the request body Handler reads into
	// memory. It is a guard of the simulator, not an Envoy buffer limit.
	DefaultMaxRequestBodyBytes = 64 << 20

	// maxTimerValue is the upper bound Envoy's config validation puts on
	// message_timeout and max_message_timeout.
	maxTimerValue = time.Hour
	// upstreamReadSize is the size of one read from an upstream response
	// body; each read becomes one body chunk.
	upstreamReadSize = 32 << 10
)

// Version is the Envoy release whose behaviour the simulator follows where
// releases differ, as its minor number: 34 is Envoy 1.34. Zero means the
// newest behaviour modelled, VersionLatest.
type Version int

// Envoy releases with behaviour of their own.
const (
	// Version1_34 is the oldest release modelled: the first to send
	// protocol_config and the gRPC message in error details.
	Version1_34 Version = 34
	// Version1_36 added status_on_error; before it the field is ignored
	// (as xDS-delivered config is) and errors answer 500.
	Version1_36 Version = 36
	// Version1_37 sends Envoy's own local replies through ext_proc (PR
	// #41769 removed skip_ext_proc_on_local_reply; 1.34 to 1.36 skipped
	// them) and closes the side stream right after the last needed reply
	// (ext_proc_stream_close_optimization; before, at the end of the HTTP
	// stream).
	Version1_37 Version = 37
	// VersionLatest is the newest behaviour modelled: 1.37 and later.
	VersionLatest = Version1_37
	// versionNewest bounds the releases accepted.
	versionNewest Version = 39
)

// String returns the release, for example "1.37".
func (v Version) String() string { return fmt.Sprintf("1.%d", int(v)) }

// localRepliesToProcessor reports whether Envoy's own local replies go
// through ext_proc (ext_proc.cc:1351-1393 at 1.37+).
func (v Version) localRepliesToProcessor() bool { return v >= Version1_37 }

// closesAfterLastReply reports whether the side stream closes as soon as
// nothing more will be sent on it (ext_proc.cc:1733-1789, 1.37+).
func (v Version) closesAfterLastReply() bool { return v >= Version1_37 }

// CloseStyle is how the simulated filter closes its side stream: when the
// ext_proc conversation is over, after an error, or when the downstream client
// goes away.
type CloseStyle int

const (
	// CloseDefault means "use the Sim's Config.Close" on a Request, and
	// CloseReset in a Config.
	CloseDefault CloseStyle = iota
	// CloseReset half-closes and resets the stream at once, as Envoy does by
	// default: the server's stream context is cancelled.
	CloseReset
	// CloseGraceful only half-closes the stream (runtime
	// ext_proc_graceful_grpc_close): the server's Recv returns io.EOF and the
	// stream is reset after RemoteCloseTimeout unless the server ends it.
	CloseGraceful
)

// String returns the style's name.
func (c CloseStyle) String() string {
	switch c {
	case CloseDefault:
		return "default"
	case CloseReset:
		return "reset"
	case CloseGraceful:
		return "graceful"
	}
	return fmt.Sprintf("CloseStyle(%d)", int(c))
}

// Config describes the simulated Envoy: its ext_proc filter, its
// ORIGINAL_DST cluster and the connection manager limits that matter to
// ext_proc. The zero value of every optional field gives Envoy's default
// unless the field says otherwise.
type Config struct {
	// Version is the Envoy release to follow where releases differ. Zero
	// means VersionLatest (1.37 and later); 34 to 39 are accepted.
	Version Version

	// ExtProcAddr is the gRPC target of the ext_proc server, for example
	// "127.0.0.1:9002" or "passthrough:///bufnet". Required.
	ExtProcAddr string
	// DialOptions are added to the gRPC dial options (for example a bufconn
	// dialer). Transport credentials default to insecure.
	DialOptions []grpc.DialOption

	// Mode is the filter's processing_mode. Nil means Envoy's default:
	// request and response headers SEND, bodies NONE, trailers SKIP.
	// request_header_mode SKIP, BUFFERED_PARTIAL, GRPC and a
	// FULL_DUPLEX_STREAMED response body are not modelled and rejected.
	Mode *extprocfilterv3.ProcessingMode
	// OmitProtocolConfig sends no protocol_config, as Envoy releases
	// before 1.34 do (ext_proc.cc:1135-1147 came with 1.34): the server
	// must know the body modes from its own configuration. Only the
	// protocol_config field is affected; other behaviour follows Version.
	OmitProtocolConfig bool
	// SendBodyWithoutWaitingForHeaderResponse is the processing mode flag
	// of that name: in a STREAMED direction, body chunks go to the server
	// while the headers message is outstanding, each restarting the
	// message timer (ext_proc.cc:1085-1094, 982-984). Other modes ignore
	// it.
	SendBodyWithoutWaitingForHeaderResponse bool
	// MessageTimeout is message_timeout. Zero means 200 ms.
	MessageTimeout time.Duration
	// MaxMessageTimeout is max_message_timeout, the upper bound for
	// override_message_timeout. Zero disables overrides, as in Envoy.
	MaxMessageTimeout time.Duration
	// FailureModeAllow is failure_mode_allow: on a timeout, gRPC error or
	// spurious message the request continues without ext_proc.
	FailureModeAllow bool
	// StatusOnError is status_on_error, the HTTP status of the local reply
	// sent on a gRPC error, a spurious message or a rejected mutation.
	// Zero means 500. Releases before 1.36 ignore it and answer 500.
	StatusOnError int
	// ReceivingNamespaces is metadata_options.receiving_namespaces.untyped.
	// Nil means ["envoy.lb"] (the project's configuration; Envoy itself
	// defaults to none); an empty non-nil slice accepts no namespace.
	ReceivingNamespaces []string
	// RequestAttributes is request_attributes, sent once on the first
	// request-direction message under "envoy.filters.http.ext_proc".
	// Supported: source.address, source.port, destination.address,
	// destination.port, request.path, request.url_path, request.query,
	// request.host, request.scheme, request.method, request.id,
	// request.protocol.
	RequestAttributes []string
	// RequestChunkSize splits a STREAMED or FULL_DUPLEX_STREAMED request body
	// into chunks of at most this many bytes. Zero sends the body as one
	// chunk, which is what Envoy does when the whole body arrived while the
	// header message was outstanding.
	RequestChunkSize int
	// Close is how side streams are closed. CloseDefault means CloseReset.
	Close CloseStyle
	// RemoteCloseTimeout bounds a graceful close. Zero means 1 s.
	RemoteCloseTimeout time.Duration
	// MaxReceiveMessageBytes limits one ProcessingResponse
	// (envoy_grpc.max_receive_message_length). Zero means no limit.
	MaxReceiveMessageBytes int
	// MaxHeadersCount is max_headers_count. Zero means 100.
	MaxHeadersCount int
	// MaxHeadersKB is max_request_headers_kb. Zero means 60.
	MaxHeadersKB int
	// BufferLimitBytes is the listener's per_connection_buffer_limit_bytes
	// as the filter manager applies it to a buffered request body: a
	// BUFFERED body above it gets Envoy's 413 (filter_manager.cc:569-576).
	// STREAMED and FULL_DUPLEX_STREAMED bodies are never buffered whole, so
	// they never get it. Zero means no limit (Envoy's default is 1 MiB).
	BufferLimitBytes int
	// StreamIdleTimeout is the HTTP connection manager's
	// stream_idle_timeout: a stream with no traffic to or from the client
	// for this long gets Envoy's 504 (408 only before the whole request was
	// received, which never happens here: the simulator has the request in
	// full), or a reset once the response started. Zero means off (Envoy's
	// default is 5 min).
	StreamIdleTimeout time.Duration
	// RequestTimeout is the HTTP connection manager's request_timeout: the
	// whole request, queue time included, must have gone upstream (or a
	// response have started) within it, or the client gets 504. Zero means
	// off, as in Envoy.
	RequestTimeout time.Duration

	// Route configures the simulated ORIGINAL_DST cluster.
	Route Route
	// ConnectTimeout is the upstream connect timeout. Zero means 5 s.
	ConnectTimeout time.Duration
	// UpstreamDialer, when set, opens the upstream connections instead of a
	// TCP dialer (for example to in-memory workers, so that a test can run
	// in a testing/synctest bubble). ConnectTimeout still bounds each dial.
	UpstreamDialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxRequestBodyBytes bounds the body Handler reads from a client; a
	// larger body gets 413. Zero means 64 MiB.
	MaxRequestBodyBytes int64
}

// Route configures how the simulated ORIGINAL_DST cluster finds the upstream
// host (original_dst_lb_config). The metadata key, when set, is consulted
// first, then the header, as in Envoy.
type Route struct {
	// Header is http_header_name. Empty means x-gateway-destination-endpoint.
	Header string
	// IgnoreHeader turns use_http_header off, so only metadata routes.
	IgnoreHeader bool
	// MetadataNamespace is metadata_key.key. Empty means envoy.lb.
	MetadataNamespace string
	// MetadataKey is the single metadata_key.path element. Empty means
	// metadata is not consulted.
	MetadataKey string
	// Fallbacks reads the chosen value as the endpoint picker protocol's
	// list, "IP:port,IP:port,...", first preferred, and retries the next
	// endpoint when connecting fails (override_host with retry_on:
	// connect-failure). Off, a list is an invalid host, as in ORIGINAL_DST.
	Fallbacks bool
	// ReportServed sends, in metadata_context of every response-direction
	// message, envoy.lb/x-gateway-destination-endpoint-served: the
	// endpoint that served the request, as the protocol's data plane must.
	ReportServed bool
}

// settings is a validated Config with every default applied.
type settings struct {
	version     Version
	addr        string
	dialOptions []grpc.DialOption

	requestBodyMode     extprocfilterv3.ProcessingMode_BodySendMode
	requestTrailerSend  bool
	responseHeaderSend  bool
	responseBodyMode    extprocfilterv3.ProcessingMode_BodySendMode
	responseTrailerSend bool

	early             bool
	omitProtocol      bool
	messageTimeout    time.Duration
	maxMessageTimeout time.Duration
	failureModeAllow  bool
	statusOnError     int
	receiving         []string
	attributes        []string
	chunkSize         int
	closeStyle        CloseStyle
	remoteClose       time.Duration
	maxRecvMsg        int
	maxHeadersCount   int
	maxHeadersBytes   int
	bufferLimit       int
	streamIdle        time.Duration
	requestTimeout    time.Duration

	routeHeader      string
	useHeader        bool
	metadataNS       string
	metadataKey      string
	fallbacks        bool
	reportServed     bool
	connectTimeout   time.Duration
	upstreamDialer   func(ctx context.Context, network, addr string) (net.Conn, error)
	maxRequestBodyIn int64
}

// supportedAttributes lists the request attributes the simulator can
// evaluate.
var supportedAttributes = []string{
	"source.address", "source.port", "destination.address", "destination.port",
	"request.path", "request.url_path", "request.query", "request.host",
	"request.scheme", "request.method", "request.id", "request.protocol",
}

// resolve validates c and applies defaults. It reports every problem at once.
func (c *Config) resolve() (*settings, error) {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("envoysim: "+format, args...))
	}
	s := &settings{
		version:           orDefault(c.Version, VersionLatest),
		addr:              c.ExtProcAddr,
		dialOptions:       c.DialOptions,
		early:             c.SendBodyWithoutWaitingForHeaderResponse,
		omitProtocol:      c.OmitProtocolConfig,
		messageTimeout:    orDefault(c.MessageTimeout, DefaultMessageTimeout),
		maxMessageTimeout: c.MaxMessageTimeout,
		failureModeAllow:  c.FailureModeAllow,
		statusOnError:     orDefault(c.StatusOnError, DefaultStatusOnError),
		receiving:         c.ReceivingNamespaces,
		attributes:        c.RequestAttributes,
		chunkSize:         c.RequestChunkSize,
		closeStyle:        orDefault(c.Close, CloseReset),
		remoteClose:       orDefault(c.RemoteCloseTimeout, DefaultRemoteCloseTimeout),
		maxRecvMsg:        orDefault(c.MaxReceiveMessageBytes, math.MaxInt32),
		maxHeadersCount:   orDefault(c.MaxHeadersCount, DefaultMaxHeadersCount),
		maxHeadersBytes:   orDefault(c.MaxHeadersKB, DefaultMaxHeadersKB) * 1024,
		bufferLimit:       c.BufferLimitBytes,
		streamIdle:        c.StreamIdleTimeout,
		requestTimeout:    c.RequestTimeout,
		routeHeader:       orDefault(c.Route.Header, DefaultDestinationHeader),
		useHeader:         !c.Route.IgnoreHeader,
		metadataNS:        orDefault(c.Route.MetadataNamespace, DefaultMetadataNamespace),
		metadataKey:       c.Route.MetadataKey,
		fallbacks:         c.Route.Fallbacks,
		reportServed:      c.Route.ReportServed,
		connectTimeout:    orDefault(c.ConnectTimeout, DefaultConnectTimeout),
		upstreamDialer:    c.UpstreamDialer,
		maxRequestBodyIn:  orDefault(c.MaxRequestBodyBytes, DefaultMaxRequestBodyBytes),
	}
	if s.version < Version1_36 {
		s.statusOnError = DefaultStatusOnError // the field does not exist yet
	}
	if s.receiving == nil {
		s.receiving = []string{DefaultMetadataNamespace}
	}
	if c.ExtProcAddr == "" {
		fail("ExtProcAddr is required")
	}
	if c.Version != 0 && (c.Version < Version1_34 || c.Version > versionNewest) {
		fail("Version %v is not modelled (want 1.%d to 1.%d)", c.Version, int(Version1_34), int(versionNewest))
	}
	if c.MessageTimeout < 0 || c.MessageTimeout > maxTimerValue {
		fail("MessageTimeout %v is outside [0s, 1h]", c.MessageTimeout)
	}
	if c.MaxMessageTimeout < 0 || c.MaxMessageTimeout > maxTimerValue {
		fail("MaxMessageTimeout %v is outside [0s, 1h]", c.MaxMessageTimeout)
	}
	if c.StatusOnError != 0 && (c.StatusOnError < 200 || c.StatusOnError > 599) {
		fail("StatusOnError %d is not an HTTP status in [200, 599]", c.StatusOnError)
	}
	for _, a := range c.RequestAttributes {
		if !slices.Contains(supportedAttributes, a) {
			fail("request attribute %q is not modelled", a)
		}
	}
	if c.RequestChunkSize < 0 {
		fail("RequestChunkSize %d is negative", c.RequestChunkSize)
	}
	if c.Close < CloseDefault || c.Close > CloseGraceful {
		fail("unknown close style %d", int(c.Close))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxReceiveMessageBytes", int64(c.MaxReceiveMessageBytes)},
		{"MaxHeadersCount", int64(c.MaxHeadersCount)},
		{"MaxHeadersKB", int64(c.MaxHeadersKB)},
		{"RemoteCloseTimeout", int64(c.RemoteCloseTimeout)},
		{"ConnectTimeout", int64(c.ConnectTimeout)},
		{"MaxRequestBodyBytes", c.MaxRequestBodyBytes},
		{"BufferLimitBytes", int64(c.BufferLimitBytes)},
		{"StreamIdleTimeout", int64(c.StreamIdleTimeout)},
		{"RequestTimeout", int64(c.RequestTimeout)},
	} {
		if f.v < 0 {
			fail("%s is negative", f.name)
		}
	}
	if c.Route.IgnoreHeader && c.Route.MetadataKey == "" {
		fail("Route ignores the header and has no metadata key, so no request can be routed")
	}
	errs = append(errs, s.resolveMode(c.Mode)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// resolveMode copies the processing mode into s and returns what is invalid
// or not modelled.
func (s *settings) resolveMode(m *extprocfilterv3.ProcessingMode) []error {
	if m == nil {
		m = &extprocfilterv3.ProcessingMode{}
	}
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("envoysim: "+format, args...))
	}
	const (
		send = extprocfilterv3.ProcessingMode_SEND
		skip = extprocfilterv3.ProcessingMode_SKIP
		dflt = extprocfilterv3.ProcessingMode_DEFAULT
	)
	validHeaderMode := func(field string, v extprocfilterv3.ProcessingMode_HeaderSendMode) {
		if v != dflt && v != send && v != skip {
			fail("%s %v is not a header send mode", field, v)
		}
	}
	validHeaderMode("request_header_mode", m.GetRequestHeaderMode())
	validHeaderMode("response_header_mode", m.GetResponseHeaderMode())
	validHeaderMode("request_trailer_mode", m.GetRequestTrailerMode())
	validHeaderMode("response_trailer_mode", m.GetResponseTrailerMode())
	if m.GetRequestHeaderMode() == skip {
		fail("request_header_mode SKIP is not modelled")
	}
	s.requestTrailerSend = m.GetRequestTrailerMode() == send
	s.responseHeaderSend = m.GetResponseHeaderMode() != skip
	s.responseTrailerSend = m.GetResponseTrailerMode() == send
	s.requestBodyMode = m.GetRequestBodyMode()
	s.responseBodyMode = m.GetResponseBodyMode()
	switch s.requestBodyMode {
	case extprocfilterv3.ProcessingMode_NONE, extprocfilterv3.ProcessingMode_STREAMED,
		extprocfilterv3.ProcessingMode_BUFFERED:
	case extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		if !s.requestTrailerSend {
			fail("request_body_mode FULL_DUPLEX_STREAMED requires request_trailer_mode SEND")
		}
		if s.failureModeAllow {
			fail("request_body_mode FULL_DUPLEX_STREAMED with failure_mode_allow is not modelled (Envoy 1.35 rejects it; later releases fail open until the first body chunk)")
		}
	case extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL, extprocfilterv3.ProcessingMode_GRPC:
		fail("request_body_mode %v is not modelled", s.requestBodyMode)
	default:
		fail("request_body_mode %v is not a body send mode", s.requestBodyMode)
	}
	switch s.responseBodyMode {
	case extprocfilterv3.ProcessingMode_NONE, extprocfilterv3.ProcessingMode_STREAMED,
		extprocfilterv3.ProcessingMode_BUFFERED:
	case extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL, extprocfilterv3.ProcessingMode_GRPC:
		fail("response_body_mode %v is not modelled", s.responseBodyMode)
	default:
		fail("response_body_mode %v is not a body send mode", s.responseBodyMode)
	}
	return errs
}

// orDefault returns v, or def when v is the zero value.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
