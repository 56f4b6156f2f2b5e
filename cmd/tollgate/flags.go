package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

// options holds every serving flag. check-config takes the same set.
type options struct {
	grpcAddr    string
	metricsAddr string
	workersFile string
	logLevel    string

	routerPolicyConfig   string
	routerQueueThreshold optionalFloat
	routerQueuePolicy    string
	routerTemperature    float64
	prefillLoadScale     float64
	overlapCredit        float64
	blockSize            uint64
	routerTTLSecs        uint64
	seed                 uint64

	priorityEnabled   bool
	priorityConfig    string
	defaultMaxClass   string
	tenantMetricTopN  int
	rateLimits        rateLimitOptions
	pdThreshold       uint64
	tenantAPIKeys     stringList
	tenantAPIKeysFile string
	apiKey            string
	trustTenantHeader bool
	tenantHeaderName  string
	clientIPSource    string
	forwardedForHops  int

	tokenizer              string
	modelTokenizers        stringList
	tokenizerCacheBytes    int64
	envoyMessageTimeout    time.Duration
	envoyMaxMessageTimeout time.Duration
	maxBodyBytes           int
	gcHeapFloor            int64

	grpcTLSCert  string
	grpcTLSKey   string
	grpcClientCA string

	drainDelay      time.Duration
	shutdownTimeout time.Duration

	maxConcurrentStreams int
	firstMessageTimeout  time.Duration

	discovery discoveryOptions
	engine    engineOptions
	kvEvents  kvEventsOptions
	fairness  fairnessOptions
	picker    pickerOptions
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// optionalFloat is a float flag that remembers whether it was set.
type optionalFloat struct {
	v   float64
	set bool
}

func (f *optionalFloat) String() string {
	if !f.set {
		return ""
	}
	return strconv.FormatFloat(f.v, 'g', -1, 64)
}

func (f *optionalFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("not a number")
	}
	f.v, f.set = v, true
	return nil
}

// commandSummary is the paragraph under the usage line of the commands
// that take the serving flags.
var commandSummary = map[string]string{
	"serve": "Serves ext_proc for Envoy until SIGTERM or SIGINT, then drains. Run\n" +
		"'tollgate check-config' with the same flags to see every problem at once.",
	"check-config": "Validates every file and flag serve would use, prints every problem and\n" +
		"exits 1 if there is one. It takes serve's flags.",
}

// newFlagSet registers every serving flag on a new FlagSet named name
// (serve or check-config); its Usage prints them grouped by area.
func newFlagSet(name string, o *options) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: tollgate %s [flags]\n\n%s\n\nFlags by area (write -name or --name, and --name value or --name=value):\n",
			name, commandSummary[name])
		printGroupedFlags(fs.Output(), fs)
	}
	fs.StringVar(&o.grpcAddr, "grpc-addr", ":9002", "ext_proc gRPC listen address")
	fs.StringVar(&o.metricsAddr, "metrics-addr", ":9090", "listen address of /metrics, /healthz and /readyz")
	fs.StringVar(&o.workersFile, "workers", "", "workers YAML file (reloaded on SIGHUP and when it changes)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")

	fs.StringVar(&o.routerPolicyConfig, "router-policy-config", "", "Dynamo router policy YAML (policy classes, buckets, quanta)")
	fs.Var(&o.routerQueueThreshold, "router-queue-threshold", "busy fraction of max_num_batched_tokens for the synthetic default class (unset: no queueing)")
	fs.StringVar(&o.routerQueuePolicy, "router-queue-policy", "fcfs", "queue policy of the synthetic default class: fcfs or wspt")
	fs.Float64Var(&o.routerTemperature, "router-temperature", 0, "softmax temperature of worker selection (0: lowest cost wins)")
	fs.Float64Var(&o.prefillLoadScale, "router-prefill-load-scale", 1, "weight of prefill blocks in the worker cost")
	fs.Float64Var(&o.overlapCredit, "router-kv-overlap-score-credit", 1, "credit per cached block in the worker cost")
	fs.Uint64Var(&o.blockSize, "block-size", sched.DefaultBlockSize, "KV block size in tokens")
	fs.Uint64Var(&o.routerTTLSecs, "router-ttl-secs", uint64(intake.DefaultRouterTTL/time.Second), "seconds a routed prefix stays in the prefix index")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the worker-selection tie-breaker (0: random)")

	fs.BoolVar(&o.priorityEnabled, "priority-scheduler-enabled", false, "enable SMG priority admission (slot reservations, preemption)")
	fs.StringVar(&o.priorityConfig, "priority-scheduler-config", "", "SMG priority scheduler YAML (classes, tenant_policies)")
	fs.StringVar(&o.defaultMaxClass, "priority-scheduler-default-max-class", "default", "priority ceiling of tenants not in tenant_policies")
	fs.IntVar(&o.tenantMetricTopN, "priority-scheduler-tenant-metric-top-n", extproc.DefaultTenantMetricTopN, "distinct tenant label values in metrics; the rest are \"other\"")
	fs.Var(&o.tenantAPIKeys, "tenant-api-key", "tenant API key as ID:KEY (repeatable); requests then need a matching bearer token")
	fs.StringVar(&o.tenantAPIKeysFile, "tenant-api-keys-file", "", "file of tenant API keys, one ID:KEY per line")
	fs.StringVar(&o.apiKey, "api-key", "", "shared API key; its tenant is auth:<sha256 hex>")
	fs.BoolVar(&o.trustTenantHeader, "trust-tenant-header", false, "take the tenant from the tenant header when no key matched")
	fs.StringVar(&o.tenantHeaderName, "tenant-header-name", policy.DefaultTenantHeader, "tenant header name")
	fs.StringVar(&o.clientIPSource, "client-ip-source", "source-address", "client address for ip: tenants: source-address (request attribute) or x-forwarded-for")
	fs.IntVar(&o.forwardedForHops, "forwarded-for-trusted-hops", 0, "x-forwarded-for entries, from the right, added by trusted proxies")

	registerTokenizerFlags(fs, o)
	fs.DurationVar(&o.envoyMessageTimeout, "envoy-message-timeout", extproc.DefaultEnvoyMessageTimeout, "Envoy's ext_proc message_timeout")
	fs.DurationVar(&o.envoyMaxMessageTimeout, "envoy-max-message-timeout", extproc.DefaultEnvoyMaxMessageTimeout, "Envoy's max_message_timeout (0: overrides disabled)")
	fs.IntVar(&o.maxBodyBytes, "max-body-bytes", extproc.DefaultMaxBodyBytes, "largest request body accepted (413 above)")

	fs.StringVar(&o.grpcTLSCert, "grpc-tls-cert", "", "PEM certificate of the gRPC listener")
	fs.StringVar(&o.grpcTLSKey, "grpc-tls-key", "", "PEM key of the gRPC listener")
	fs.StringVar(&o.grpcClientCA, "grpc-client-ca", "", "PEM CA that client certificates must chain to (mTLS)")

	fs.DurationVar(&o.drainDelay, "drain-delay", extproc.DefaultDrainDelay, "on SIGTERM, time between failing readiness and shedding the queue")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", extproc.DefaultShutdownTimeout, "on SIGTERM, time in-flight streams get to finish; the process exits within --drain-delay + --shutdown-timeout")
	fs.Int64Var(&o.gcHeapFloor, "gc-heap-floor-bytes", defaultGCHeapFloor, "heap size below which the garbage collector does not start a cycle (0: Go's default, a cycle each time the heap doubles; off when GOGC is set)")
	fs.IntVar(&o.maxConcurrentStreams, "max-concurrent-streams", extproc.DefaultMaxConcurrentStreams, "most open ext_proc streams (one per request, held ones included); more end with RESOURCE_EXHAUSTED")
	fs.DurationVar(&o.firstMessageTimeout, "first-message-timeout", extproc.DefaultFirstMessageTimeout, "how long an ext_proc stream may stay open without sending its first message")
	registerDiscoveryFlags(fs, &o.discovery)
	registerEngineFlags(fs, &o.engine)
	registerKVEventsFlags(fs, &o.kvEvents)
	registerRateLimitFlags(fs, &o.rateLimits)
	registerPDFlags(fs, &o.pdThreshold)
	registerFairnessFlags(fs, &o.fairness)
	registerPickerFlags(fs, &o.picker)
	return fs
}

// setup is everything the options resolve to.
type setup struct {
	cfg     extproc.Config
	workers []fleet.Worker
	// warnings are valid but likely unintended settings; check-config
	// prints them and serve logs them.
	warnings []string
}

// build loads every file the options name and builds the server
// configuration. It reports every problem it finds, joined.
func (o *options) build(log *slog.Logger) (*setup, error) {
	cfg, serverErr := o.serverConfig(log)
	tok, tokErr := o.buildTokenizer()
	cfg.Tokenizer = tok
	workers, workersErr := o.workers()
	var replicaErr error
	cfg.Replica, replicaErr = o.replicaConfig()
	err := errors.Join(serverErr, tokErr, o.scheduling(&cfg), workersErr, replicaErr,
		o.discovery.validate(o), o.kvEvents.validate(), o.kvEvents.checkWorkers(workers), cfg.Validate(),
		checkGCHeapFloor(o.gcHeapFloor))
	if err == nil && cfg.GRPC.TLSCert != "" {
		_, err = extproc.ServerOptions(cfg) // loads the certificate, key and client CA
	}
	if err != nil {
		return nil, err
	}
	return &setup{cfg: cfg, workers: workers, warnings: o.warnings(workers)}, nil
}

// serverConfig reads the listener, Envoy, limit and shutdown flags.
func (o *options) serverConfig(log *slog.Logger) (extproc.Config, error) {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	cfg := extproc.Config{
		Logger:                  log,
		MaxBodyBytes:            o.maxBodyBytes,
		EnvoyMessageTimeout:     o.envoyMessageTimeout,
		EnvoyMaxMessageTimeout:  o.envoyMaxMessageTimeout,
		RouterTTL:               time.Duration(o.routerTTLSecs) * time.Second,
		SpeculativeTTL:          o.kvEvents.speculative,
		TenantMetricTopN:        o.tenantMetricTopN,
		ForwardedForTrustedHops: o.forwardedForHops,
		DrainDelay:              o.drainDelay,
		ShutdownTimeout:         o.shutdownTimeout,
		MaxConcurrentStreams:    o.maxConcurrentStreams,
		FirstMessageTimeout:     o.firstMessageTimeout,
		GRPC:                    extproc.GRPCConfig{TLSCert: o.grpcTLSCert, TLSKey: o.grpcTLSKey, ClientCA: o.grpcClientCA},
	}
	if o.envoyMaxMessageTimeout == 0 {
		cfg.EnvoyMaxMessageTimeout = -1 // the flag's 0 means overrides are off
	}
	if o.drainDelay == 0 {
		cfg.DrainDelay = -1
	}
	if o.drainDelay < 0 {
		add(fmt.Errorf("--drain-delay must not be negative, got %v (0 drains without delay)", o.drainDelay))
	}
	if o.maxConcurrentStreams <= 0 {
		add(fmt.Errorf("--max-concurrent-streams must be positive, got %d", o.maxConcurrentStreams))
	}
	if o.firstMessageTimeout <= 0 {
		add(fmt.Errorf("--first-message-timeout must be positive, got %v", o.firstMessageTimeout))
	}
	if o.shutdownTimeout == 0 {
		add(errors.New("--shutdown-timeout must be positive, got 0s"))
	}
	if o.envoyMessageTimeout <= 0 {
		add(fmt.Errorf("--envoy-message-timeout must be positive, got %v (Envoy's message_timeout, 1s when unset there)", o.envoyMessageTimeout))
	}
	if o.maxBodyBytes <= 0 {
		add(fmt.Errorf("--max-body-bytes must be positive, got %d", o.maxBodyBytes))
	}
	if o.blockSize == 0 {
		add(errors.New("--block-size must be positive"))
	}
	if o.routerTTLSecs == 0 {
		add(errors.New("--router-ttl-secs must be positive"))
	}
	if o.tenantMetricTopN <= 0 {
		add(fmt.Errorf("--priority-scheduler-tenant-metric-top-n must be positive, got %d", o.tenantMetricTopN))
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		add(err)
	}
	add(checkListenAddr("--grpc-addr", o.grpcAddr))
	add(checkListenAddr("--metrics-addr", o.metricsAddr))
	ip, err := extproc.ParseClientIPSource(o.clientIPSource)
	add(err)
	cfg.ClientIP = ip
	return cfg, errors.Join(errs...)
}

// scheduling reads the scheduling flags into cfg: the Dynamo and SMG
// files, the core's settings, engine signals, fairness, the picker and
// tenancy.
func (o *options) scheduling(cfg *extproc.Config) error {
	var frac *float64
	if o.routerQueueThreshold.set {
		frac = &o.routerQueueThreshold.v
	}
	pc, pf, policyErr := policy.Load(policy.Files{
		RouterPolicy:    o.routerPolicyConfig,
		QueueThreshold:  frac,
		QueuePolicy:     o.routerQueuePolicy,
		PriorityEnabled: o.priorityEnabled,
		PriorityConfig:  o.priorityConfig,
	})
	sc, schedErr := o.schedConfig()
	sc.Policy = pc
	if pf != nil {
		sc.Priority = pf.PriorityConfig()
	}
	rateErr := o.rateLimits.apply(&sc, o.trustTenantHeader)
	em, ec, engineErr := o.engine.configs()
	sc.Engine = ec
	cfg.Sched = sc
	cfg.EngineMetrics = em
	ten, tenancyErr := o.tenancy(pf)
	cfg.Tenancy = ten
	return errors.Join(policyErr, schedErr, rateErr, engineErr, o.fairness.apply(cfg), o.picker.apply(cfg), tenancyErr)
}

// workers reads the workers file, if any.
func (o *options) workers() ([]fleet.Worker, error) {
	if o.workersFile == "" {
		return nil, nil
	}
	return fleet.LoadWorkersFile(o.workersFile)
}

// warnings are the settings that work but deserve a word at startup.
func (o *options) warnings(workers []fleet.Worker) []string {
	var ws []string
	if o.discovery.mode == discoveryStatic && len(workers) == 0 {
		if o.workersFile == "" {
			ws = append(ws, "no workers: --discovery=static without --workers serves no worker; every inference request is answered 503")
		} else {
			ws = append(ws, "no workers: "+o.workersFile+" lists none; every inference request is answered 503 until it does")
		}
	}
	ws = append(ws, o.rateLimits.warnings(o.priorityEnabled)...)
	ws = append(ws, o.discovery.replicaWarnings()...)
	ws = append(ws, gcFloorWarnings(o.gcHeapFloor)...)
	if o.picker.testEndpointSelection {
		ws = append(ws, "--test-endpoint-selection is on: any client can choose its worker with the test-epp-endpoint-selection header; use it for conformance tests only")
	}
	return ws
}

// checkListenAddr reports a listen address that is not host:port with a
// numeric port, before serve fails to listen on it.
func checkListenAddr(flag, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return fmt.Errorf("%s %q: port %q is not a number in [0, 65535]", flag, addr, port)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("%s %q: host %q is not an IP address or a name", flag, addr, host)
	}
	return nil
}

// schedConfig resolves the scheduling-core flags other than the policy and
// priority files (build adds those through policy.Load).
func (o *options) schedConfig() (sched.Config, error) {
	var errs []error
	sc := sched.Config{
		BlockSize:   o.blockSize,
		PDThreshold: o.pdThreshold,
		Selection: &sched.SelectionConfig{
			PrefillLoadScale: o.prefillLoadScale,
			OverlapCredit:    o.overlapCredit,
			Temperature:      o.routerTemperature,
		},
	}
	if o.pdThreshold == 0 {
		errs = append(errs, errors.New("--pd-uncached-threshold must be positive"))
	}
	if o.routerTemperature < 0 || o.prefillLoadScale < 0 || o.overlapCredit < 0 {
		errs = append(errs, errors.New("--router-temperature, --router-prefill-load-scale and --router-kv-overlap-score-credit must be >= 0"))
	}
	seed := o.seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	sc.Rand = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return sc, errors.Join(errs...)
}

// tenancy resolves the tenant flags and the priority file's tenant policies.
func (o *options) tenancy(pf *policy.PriorityFile) (*intake.Tenancy, error) {
	var errs []error
	keys := append([]string(nil), o.tenantAPIKeys...)
	if o.tenantAPIKeysFile != "" {
		fk, err := readKeysFile(o.tenantAPIKeysFile)
		if err != nil {
			errs = append(errs, err)
		}
		keys = append(keys, fk...)
	}
	tenants, err := policy.NewTenants(policy.TenantOptions{
		TenantAPIKeys: keys,
		APIKey:        o.apiKey,
		TrustHeader:   o.trustTenantHeader,
		HeaderName:    o.tenantHeaderName,
	})
	if err != nil {
		errs = append(errs, err)
	}
	// extproc.Config.Validate checks DefaultMaxClass.
	t := &intake.Tenancy{Tenants: tenants, PriorityFile: pf, DefaultMaxClass: o.defaultMaxClass}
	return t, errors.Join(errs...)
}

// readKeysFile reads one ID:KEY per line; blank lines and # comments are skipped.
func readKeysFile(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tenant API keys file: %w", err)
	}
	var keys []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, _, err := policy.ParseTenantAPIKey(line); err != nil {
			return nil, fmt.Errorf("tenant API keys file %s line %d: %w", path, n, err)
		}
		keys = append(keys, line)
	}
	return keys, sc.Err()
}

// parseLevel parses --log-level.
func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level: unknown level %q (want debug, info, warn or error)", s)
	}
	return l, nil
}
