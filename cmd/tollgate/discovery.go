package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/tollgate/tollgate/extproc"
	"github.com/tollgate/tollgate/extproc/discovery/kube"
	"github.com/tollgate/tollgate/extproc/election"
)

// The server is what leader election switches.
var _ kube.Activator = (*extproc.Server)(nil)

// Values of --discovery.
const (
	discoveryStatic        = "static"
	discoveryKubernetes    = "kubernetes"
	discoveryInferencePool = "inferencepool"
)

// serviceAccountNamespace is where Kubernetes mounts the pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// discoveryOptions holds the worker discovery and leader election flags.
type discoveryOptions struct {
	mode       string
	kubeconfig string

	service   string // NAMESPACE/NAME
	selector  string
	namespace string
	port      string
	pool      string // NAMESPACE/NAME
	debounce  time.Duration

	defaultMaxRunning uint64
	defaultMaxBatched uint64
	defaultDPSize     uint64
	model             string

	leaderElect bool
	// backend, etcdEndpoints and peerAddr: see replicas.go.
	backend       string
	etcdEndpoints string
	peerAddr      string
	leaseNS       string
	leaseName     string
	identity      string
	leaseDuration time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration
}

// registerDiscoveryFlags registers the discovery flags on fs.
func registerDiscoveryFlags(fs *flag.FlagSet, d *discoveryOptions) {
	fs.StringVar(&d.mode, "discovery", discoveryStatic, "worker source: static (the --workers file), kubernetes (EndpointSlices) or inferencepool (a Gateway API Inference Extension InferencePool)")
	fs.StringVar(&d.kubeconfig, "kubeconfig", "", "kubeconfig file for discovery and leader election (empty: the in-cluster service account)")

	fs.StringVar(&d.service, "k8s-service", "", "kubernetes discovery: the Service whose EndpointSlices list the workers, as NAMESPACE/NAME")
	fs.StringVar(&d.selector, "k8s-selector", "", "kubernetes discovery: label selector of the EndpointSlices (instead of --k8s-service)")
	fs.StringVar(&d.namespace, "k8s-namespace", "", "kubernetes discovery: namespace of --k8s-selector (empty: tollgate's own)")
	fs.StringVar(&d.port, "k8s-port", "", "kubernetes discovery: the worker port, by Service port name or endpoint port number (empty: the only port)")
	fs.StringVar(&d.pool, "pool", "", "inferencepool discovery: the InferencePool, as NAMESPACE/NAME")
	fs.DurationVar(&d.debounce, "k8s-debounce", kube.DefaultDebounce, "kubernetes and inferencepool discovery: wait after a change before rebuilding the worker set")
	fs.Uint64Var(&d.defaultMaxRunning, "k8s-default-max-running-requests", 0, "slots of a pod without the "+kube.AnnotationMaxRunningRequests+" annotation (0: 64)")
	fs.Uint64Var(&d.defaultMaxBatched, "k8s-default-max-num-batched-tokens", 0, "max_num_batched_tokens of a pod without the "+kube.AnnotationMaxNumBatchedTokens+" annotation (0: 10000000)")
	fs.Uint64Var(&d.defaultDPSize, "k8s-default-dp-size", 0, "data-parallel ranks of a pod without the "+kube.AnnotationDPSize+" annotation (0: 1)")
	fs.StringVar(&d.model, "k8s-model", "", "model of a pod without the "+kube.AnnotationModel+" annotation (empty: every model)")

	fs.BoolVar(&d.leaderElect, "leader-elect", false, "run as one of several replicas; the elected one schedules for all (with --peer-addr every replica serves Envoy, without it only the elected one does)")
	registerReplicaFlags(fs, d)
	fs.StringVar(&d.leaseNS, "leader-elect-namespace", "", "kube backend: namespace of the Lease (empty: tollgate's own)")
	fs.StringVar(&d.leaseName, "leader-elect-name", "tollgate", "name of the Lease, or of the etcd election (key prefix /tollgate/leader/NAME)")
	fs.StringVar(&d.identity, "leader-elect-identity", "", "this replica's name in the election record (empty: the hostname, which is the pod name)")
	fs.DurationVar(&d.leaseDuration, "leader-elect-lease-duration", election.DefaultLeaseDuration, "how long others wait after the leader's last renewal before taking over (whole seconds; the etcd lease TTL)")
	fs.DurationVar(&d.renewDeadline, "leader-elect-renew-deadline", kube.DefaultRenewDeadline, "how long the leader retries a renewal before it steps down")
	fs.DurationVar(&d.retryPeriod, "leader-elect-retry-period", election.DefaultRetryPeriod, "interval between leader election attempts")
}

// validate reports every problem with the discovery flags.
func (d *discoveryOptions) validate(o *options) error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	kubeMode := d.mode == discoveryKubernetes
	poolMode := d.mode == discoveryInferencePool
	switch d.mode {
	case discoveryStatic:
	case discoveryKubernetes, discoveryInferencePool:
		if o.workersFile != "" {
			add(fmt.Errorf("--workers and --discovery=%s are exclusive", d.mode))
		}
		if d.debounce <= 0 {
			add(fmt.Errorf("--k8s-debounce must be positive, got %v", d.debounce))
		}
		_, err := d.defaults()
		add(err)
	default:
		add(fmt.Errorf("--discovery: unknown source %q (want static, kubernetes or inferencepool)", d.mode))
	}
	known := d.mode == discoveryStatic || kubeMode || poolMode
	for _, f := range []struct {
		name string
		set  bool
		ok   bool
	}{
		{"--k8s-service", d.service != "", kubeMode},
		{"--k8s-selector", d.selector != "", kubeMode},
		{"--k8s-namespace", d.namespace != "", kubeMode},
		{"--k8s-port", d.port != "", kubeMode},
		{"--pool", d.pool != "", poolMode},
	} {
		if known && f.set && !f.ok {
			add(fmt.Errorf("%s does not apply to --discovery=%s", f.name, d.mode))
		}
	}
	if kubeMode {
		_, _, err := d.sliceSelection()
		add(err)
	}
	if poolMode {
		if d.pool == "" {
			add(errors.New("--discovery=inferencepool needs --pool NAMESPACE/NAME"))
		} else if _, _, err := splitRef("--pool", d.pool); err != nil {
			add(err)
		}
	}
	add(d.validateReplicas())
	return errors.Join(errs...)
}

// defaults resolves the --k8s-default-* flags and --k8s-model.
func (d *discoveryOptions) defaults() (kube.Defaults, error) {
	var errs []error
	if d.defaultMaxRunning > math.MaxUint32 {
		errs = append(errs, fmt.Errorf("--k8s-default-max-running-requests %d exceeds %d", d.defaultMaxRunning, uint64(math.MaxUint32)))
	}
	if d.defaultDPSize > kube.MaxPodDPSize {
		errs = append(errs, fmt.Errorf("--k8s-default-dp-size %d exceeds %d", d.defaultDPSize, kube.MaxPodDPSize))
	}
	if strings.TrimSpace(d.model) != d.model {
		errs = append(errs, fmt.Errorf("--k8s-model %q has surrounding whitespace", d.model))
	}
	if len(errs) > 0 {
		return kube.Defaults{}, errors.Join(errs...)
	}
	return kube.Defaults{
		MaxRunningRequests:  uint32(d.defaultMaxRunning),
		MaxNumBatchedTokens: d.defaultMaxBatched,
		DPSize:              uint32(d.defaultDPSize),
		Model:               d.model,
	}, nil
}

// sliceSelection resolves the EndpointSlice flags to a namespace and a
// selection, reporting every problem.
func (d *discoveryOptions) sliceSelection() (string, kube.SliceSelection, error) {
	sel := kube.SliceSelection{Selector: d.selector, Port: d.port}
	var ns string
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case d.service != "" && d.selector != "":
		add(errors.New("--k8s-service and --k8s-selector are exclusive"))
	case d.service != "" && d.namespace != "":
		add(errors.New("--k8s-namespace applies to --k8s-selector; --k8s-service names its namespace"))
	case d.service != "":
		var err error
		ns, sel.Service, err = splitRef("--k8s-service", d.service)
		add(err)
		if err == nil {
			add(prefixed("--k8s-service", kube.SliceSelection{Service: sel.Service}.Validate()))
		}
	case d.selector != "":
		add(prefixed("--k8s-selector", kube.SliceSelection{Selector: d.selector}.Validate()))
		var err error
		ns, err = ownNamespace("--k8s-namespace", d.namespace)
		add(err)
	default:
		add(errors.New("--discovery=kubernetes needs --k8s-service NAMESPACE/NAME or --k8s-selector"))
	}
	_, err := kube.ParsePort(d.port)
	add(prefixed("--k8s-port", err))
	return ns, sel, errors.Join(errs...)
}

// prefixed prefixes err, if any, with a flag name.
func prefixed(flagName string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", flagName, err)
}

// leaderConfig resolves the leader election flags; the caller adds the
// client, activator and logger.
func (d *discoveryOptions) leaderConfig() (kube.LeaderConfig, error) {
	ns, err := ownNamespace("--leader-elect-namespace", d.leaseNS)
	if err != nil {
		return kube.LeaderConfig{}, err
	}
	id, err := d.identityName()
	if err != nil {
		return kube.LeaderConfig{}, err
	}
	c := kube.LeaderConfig{
		Namespace: ns, Name: d.leaseName, Identity: id,
		LeaseDuration: d.leaseDuration, RenewDeadline: d.renewDeadline, RetryPeriod: d.retryPeriod,
	}
	if d.leaseDuration <= 0 || d.renewDeadline <= 0 || d.retryPeriod <= 0 {
		return c, errors.New("--leader-elect-lease-duration, --leader-elect-renew-deadline and --leader-elect-retry-period must be positive")
	}
	return c, c.Validate()
}

// splitRef parses NAMESPACE/NAME.
func splitRef(flagName, v string) (ns, name string, err error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%s %q: want NAMESPACE/NAME", flagName, v)
	}
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return "", "", fmt.Errorf("%s %q: namespace: %s", flagName, v, msgs[0])
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return "", "", fmt.Errorf("%s %q: name: %s", flagName, v, msgs[0])
	}
	return ns, name, nil
}

// ownNamespace returns v, else tollgate's own namespace: $POD_NAMESPACE,
// else the service account's namespace file.
func ownNamespace(flagName, v string) (string, error) {
	if v == "" {
		v = os.Getenv("POD_NAMESPACE")
	}
	if v == "" {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
			v = strings.TrimSpace(string(b))
		}
	}
	if v == "" {
		return "", fmt.Errorf("%s is required outside a cluster (no $POD_NAMESPACE, no service account namespace)", flagName)
	}
	if msgs := validation.IsDNS1123Label(v); len(msgs) > 0 {
		return "", fmt.Errorf("%s %q: %s", flagName, v, msgs[0])
	}
	return v, nil
}

// restConfig returns the Kubernetes client configuration: --kubeconfig, or
// the in-cluster service account.
func restConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		err = fmt.Errorf("%w (outside a cluster, pass --kubeconfig)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	cfg.UserAgent = "tollgate"
	return cfg, nil
}

// kubeClients are the Kubernetes clients of discovery and leader
// election.
type kubeClients struct {
	// core reads EndpointSlices and Pods, and holds the leader Lease.
	core kubernetes.Interface
	// dynamic reads the InferencePool, its InferenceObjectives and its
	// InferenceModelRewrites; needed with --discovery=inferencepool only.
	dynamic dynamic.Interface
}

// needsKube reports whether the flags call for a Kubernetes client.
func (d *discoveryOptions) needsKube() bool {
	return d.mode != discoveryStatic || (d.leaderElect && d.backend == backendKube)
}

// startDiscovery builds the Kubernetes clients from --kubeconfig, or the
// in-cluster service account, and starts discovery and leader election
// over them (see discoveryOptions.start). With --discovery=static and no
// --leader-elect it does nothing.
func startDiscovery(ctx context.Context, o *options, srv *extproc.Server, log *slog.Logger, wg *sync.WaitGroup) (handover, error) {
	d := &o.discovery
	var clients kubeClients
	if d.needsKube() {
		klog.SetSlogLogger(log.With("component", "client-go"))
		var err error
		if clients, err = d.clients(); err != nil {
			return noHandover, err
		}
	}
	return d.start(ctx, clients, srv, log, wg)
}

// handover ends leader election at shutdown: the elected replica resigns
// (releases the Lease, deletes its etcd key), so another one takes over
// at once, and the call returns once the election has stopped or ctx
// ended.
type handover func(ctx context.Context)

// noHandover is the handover without leader election.
func noHandover(context.Context) {}

// clients builds the clients the flags call for.
func (d *discoveryOptions) clients() (kubeClients, error) {
	cfg, err := restConfig(d.kubeconfig)
	if err != nil {
		return kubeClients{}, err
	}
	var c kubeClients
	if c.core, err = kubernetes.NewForConfig(cfg); err != nil {
		return kubeClients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	if d.mode == discoveryInferencePool {
		if c.dynamic, err = dynamic.NewForConfig(cfg); err != nil {
			return kubeClients{}, fmt.Errorf("kubernetes dynamic client: %w", err)
		}
	}
	return c, nil
}

// start starts, over clients, the worker source of --discovery, feeding
// srv.SetWorkers; with inferencepool discovery the pool's
// InferenceObjectives and InferenceModelRewrites, feeding srv.SetObjectives
// and srv.SetModelRewrites, which merge what is found under
// --objective-class and --model-rewrite; and with --leader-elect leader
// election, which switches srv between standby and active, and which the
// returned handover ends. Nothing starts unless every part could be built.
// Goroutines are added to wg and end with ctx.
func (d *discoveryOptions) start(ctx context.Context, clients kubeClients, srv *extproc.Server, log *slog.Logger, wg *sync.WaitGroup) (handover, error) {
	if !d.needsKube() && !d.leaderElect {
		return noHandover, nil
	}
	if d.leaderElect {
		// A standby until the Lease says otherwise. This only fails when
		// ctx has ended, and then nothing is served anyway.
		if err := srv.SetActive(ctx, false); err != nil {
			return noHandover, fmt.Errorf("leader election: %w", err)
		}
	}
	src, err := d.source(clients, srv, log)
	if err != nil {
		return noHandover, err
	}
	poolObjects, err := d.poolObjectSources(clients.dynamic, srv, log)
	if err != nil {
		return noHandover, err
	}
	var el elector
	if d.leaderElect {
		if el, err = d.elector(clients, srv, log.With("component", "leader-election")); err != nil {
			return noHandover, err
		}
	}
	if src != nil {
		wg.Go(func() { _ = src.Run(ctx) })
	}
	for _, o := range poolObjects {
		wg.Go(func() { _ = o.Run(ctx) })
	}
	if el == nil {
		return noHandover, nil
	}
	electCtx, stepDown := context.WithCancel(ctx)
	elected := make(chan struct{})
	wg.Go(func() {
		defer close(elected)
		defer stepDown()
		if err := el.Run(electCtx); err != nil {
			log.Error("leader election stopped", "error", err)
		}
	})
	return func(ctx context.Context) {
		log.Info("shutting down: handing over the scheduler role")
		stepDown()
		select {
		case <-elected:
		case <-ctx.Done():
			log.Warn("leader election still stopping", "error", ctx.Err())
		}
	}, nil
}

// source builds the worker source of --discovery, or nil for static.
func (d *discoveryOptions) source(clients kubeClients, srv *extproc.Server, log *slog.Logger) (*kube.Source, error) {
	if d.mode == discoveryStatic {
		return nil, nil
	}
	defaults, err := d.defaults()
	if err != nil {
		return nil, err
	}
	sc := kube.SourceConfig{
		Client:   clients.core,
		Defaults: defaults,
		Apply:    srv.SetWorkers,
		Logger:   log.With("component", "discovery", "source", d.mode),
		Debounce: d.debounce,
	}
	switch d.mode {
	case discoveryKubernetes:
		ns, sel, err := d.sliceSelection()
		if err != nil {
			return nil, err
		}
		sc.Namespace = ns
		return kube.NewEndpointSliceSource(sc, sel)
	case discoveryInferencePool:
		ns, name, err := splitRef("--pool", d.pool)
		if err != nil {
			return nil, err
		}
		sc.Namespace = ns
		return kube.NewPoolSource(sc, clients.dynamic, name)
	}
	return nil, fmt.Errorf("--discovery: unknown source %q", d.mode)
}

// poolObjectSources builds the InferenceObjective and
// InferenceModelRewrite sources of inferencepool discovery, or none in the
// other modes. They report every object they find; the server merges them
// under the flags and answers what the flags shadow, which they log.
func (d *discoveryOptions) poolObjectSources(dyn dynamic.Interface, srv *extproc.Server, log *slog.Logger) ([]interface{ Run(context.Context) error }, error) {
	if d.mode != discoveryInferencePool {
		return nil, nil
	}
	ns, name, err := splitRef("--pool", d.pool)
	if err != nil {
		return nil, err
	}
	logger := func(resource string) *slog.Logger {
		return log.With("component", "discovery", "source", resource)
	}
	objectives, err := kube.NewObjectiveSource(kube.ObjectiveConfig{Namespace: ns, Pool: name,
		Apply: srv.SetObjectives, Logger: logger("inferenceobjectives"), Debounce: d.debounce}, dyn)
	if err != nil {
		return nil, err
	}
	rewrites, err := kube.NewRewriteSource(kube.RewriteConfig{Namespace: ns, Pool: name,
		Apply: srv.SetModelRewrites, Logger: logger("inferencemodelrewrites"), Debounce: d.debounce}, dyn)
	if err != nil {
		return nil, err
	}
	return []interface{ Run(context.Context) error }{objectives, rewrites}, nil
}
