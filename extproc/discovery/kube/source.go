package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/tollgate/tollgate/extproc/fleet"
)

// SourceConfig is what every worker source needs.
type SourceConfig struct {
	// Client reads EndpointSlices and Pods. Required.
	Client kubernetes.Interface
	// Namespace holds the workers (and the Service or InferencePool).
	// Required.
	Namespace string
	// Defaults fill in what a pod's annotations leave out.
	Defaults Defaults
	// Apply installs a complete worker set; normally
	// (*extproc.Server).SetWorkers. It must validate the whole set and
	// leave the current one in force when it returns an error. Required.
	Apply func([]fleet.Worker) error
	// Logger receives the source's logs. Nil discards them.
	Logger *slog.Logger
	// Debounce is how long to wait after a change before rebuilding.
	// 0 means DefaultDebounce.
	Debounce time.Duration
}

// validate reports every problem, joined.
func (c *SourceConfig) validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("kube: a kubernetes client is required"))
	}
	if c.Apply == nil {
		errs = append(errs, errors.New("kube: an apply function is required"))
	}
	if msgs := validation.IsDNS1123Label(c.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("kube: namespace %q: %s", c.Namespace, msgs[0]))
	}
	if c.Debounce < 0 {
		errs = append(errs, fmt.Errorf("kube: debounce %v is negative", c.Debounce))
	}
	errs = append(errs, c.Defaults.Validate())
	return errors.Join(errs...)
}

// Source keeps a worker set in step with the Kubernetes objects it
// watches. Build one with NewEndpointSliceSource or NewPoolSource, then call
// Run once.
type Source struct {
	log       *slog.Logger
	informers []cache.SharedIndexInformer
	sync      *syncer
	// kick carries "something changed" from informer handlers to Run; a
	// buffer of one folds any number of changes into one pending signal.
	kick chan struct{}

	// mu guards started.
	mu      sync.Mutex
	started bool
}

// named pairs an informer with the resource it watches, for logs.
type named struct {
	resource string
	inf      cache.SharedIndexInformer
}

// newSource wires informers to a syncer over build. cfg is validated.
func newSource(cfg *SourceConfig, build func() snapshot, infs ...named) (*Source, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Source{log: log, kick: make(chan struct{}, 1)}
	debounce := cfg.Debounce
	if debounce == 0 {
		debounce = DefaultDebounce
	}
	s.sync = &syncer{build: build, apply: cfg.Apply, log: log, debounce: debounce}
	kick := func() {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kick() },
		UpdateFunc: func(any, any) { kick() },
		DeleteFunc: func(any) { kick() },
	}
	for _, n := range infs {
		if _, err := n.inf.AddEventHandler(handler); err != nil {
			return nil, fmt.Errorf("kube: %s informer: %w", n.resource, err)
		}
		resource := n.resource
		if err := n.inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			if errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return // a watch ended normally; the reflector resumes it
			}
			log.Warn("kubernetes list/watch failed; retrying", "resource", resource, "error", err)
		}); err != nil {
			return nil, fmt.Errorf("kube: %s informer: %w", n.resource, err)
		}
		s.informers = append(s.informers, n.inf)
	}
	return s, nil
}

// newInformer returns an informer of obj over list and watch that uses the
// classic list-then-watch protocol rather than a streamed initial list
// (client-go's WatchList): the classic path reports every failure, such as
// a missing RBAC rule or CRD, to the informer's watch error handler, where
// the streaming path retries silently, and it stops as soon as its context
// ends, where the streaming path first sleeps out its backoff. The lists
// here are one namespace's pods and slices, where streaming saves little.
func newInformer(obj runtime.Object, list cache.ListWithContextFunc, watch cache.WatchFuncWithContext) cache.SharedIndexInformer {
	lw := classicListWatch{&cache.ListWatch{ListWithContextFunc: list, WatchFuncWithContext: watch}}
	return cache.NewSharedIndexInformerWithOptions(lw, obj, cache.SharedIndexInformerOptions{})
}

// classicListWatch is a ListWatch that declines the WatchList protocol.
type classicListWatch struct{ *cache.ListWatch }

// IsWatchListSemanticsUnSupported tells the reflector to list, then watch.
func (classicListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// Run starts the informers, waits until their caches are complete, applies
// the first worker set, and then applies every change until ctx ends. It
// returns nil once ctx has ended and every informer has stopped, and an
// error only when called twice.
func (s *Source) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("kube: source Run called twice")
	}
	s.started = true
	s.mu.Unlock()

	var wg sync.WaitGroup
	defer wg.Wait()
	synced := make([]cache.InformerSynced, len(s.informers))
	for i, inf := range s.informers {
		synced[i] = inf.HasSynced
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	s.log.Info("waiting for the kubernetes caches")
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // ctx ended first
	}
	s.log.Info("kubernetes caches ready")
	s.sync.run(ctx, s.kick)
	return nil
}
