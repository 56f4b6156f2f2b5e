package kube

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/tollgate/tollgate/extproc/fleet"
)

// SliceSelection says which EndpointSlices describe the workers and which
// of their ports to use.
type SliceSelection struct {
	// Service selects the slices of one Service (label
	// kubernetes.io/service-name). Exactly one of Service and Selector is
	// set.
	Service string
	// Selector is a label selector over EndpointSlices (which carry their
	// Service's labels), for workers behind several Services.
	Selector string
	// Port picks the endpoint port: a name is the Service port's name, a
	// number the endpoint's (container) port. Empty means the only port;
	// a slice with several ports is then reported and skipped.
	Port string
}

// portRef is a parsed SliceSelection.Port; both zero means "the only
// port".
type portRef struct {
	name   string
	number int32
}

// ParsePort parses a port given by name or number; empty means the only
// port.
func ParsePort(s string) (portRef, error) {
	if s == "" {
		return portRef{}, nil
	}
	if n, err := strconv.ParseUint(s, 10, 16); err == nil && n > 0 {
		return portRef{number: int32(n)}, nil
	}
	if strings.Trim(s, "0123456789") == "" {
		return portRef{}, fmt.Errorf("kube: port %q is not in [1, 65535]", s)
	}
	if msgs := validation.IsValidPortName(s); len(msgs) > 0 {
		return portRef{}, fmt.Errorf("kube: port name %q: %s", s, msgs[0])
	}
	return portRef{name: s}, nil
}

func (p portRef) String() string {
	switch {
	case p.name != "":
		return strconv.Quote(p.name)
	case p.number != 0:
		return strconv.Itoa(int(p.number))
	}
	return "the only port"
}

// pick returns the port number p selects among ports.
func (p portRef) pick(ports []discoveryv1.EndpointPort) (int32, error) {
	var listed []string
	var only int32
	for _, ep := range ports {
		if ep.Port == nil {
			continue
		}
		name := ""
		if ep.Name != nil {
			name = *ep.Name
		}
		if (p.name != "" && name == p.name) || (p.number != 0 && *ep.Port == p.number) {
			return *ep.Port, nil
		}
		listed = append(listed, fmt.Sprintf("%q=%d", name, *ep.Port))
		only = *ep.Port
	}
	switch {
	case len(listed) == 0:
		return 0, errors.New("lists no port")
	case p.name != "" || p.number != 0:
		return 0, fmt.Errorf("has no port %s (ports: %s)", p, strings.Join(listed, ", "))
	case len(listed) > 1:
		return 0, fmt.Errorf("has several ports (%s); select one by name or number", strings.Join(listed, ", "))
	}
	return only, nil // exactly one port, and none was asked for
}

// selector resolves the slice selection to a label selector.
func (s SliceSelection) selector() (labels.Selector, error) {
	switch {
	case s.Service != "" && s.Selector != "":
		return nil, errors.New("kube: select EndpointSlices by service or by label selector, not both")
	case s.Service != "":
		if msgs := validation.IsDNS1035Label(s.Service); len(msgs) > 0 {
			return nil, fmt.Errorf("kube: service name %q: %s", s.Service, msgs[0])
		}
		return labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: s.Service}), nil
	case s.Selector != "":
		sel, err := labels.Parse(s.Selector)
		if err != nil {
			return nil, fmt.Errorf("kube: label selector %q: %w", s.Selector, err)
		}
		if sel.Empty() {
			return nil, fmt.Errorf("kube: label selector %q selects everything", s.Selector)
		}
		return sel, nil
	}
	return nil, errors.New("kube: a service or a label selector is required to find EndpointSlices")
}

// Validate reports every problem with s, joined.
func (s SliceSelection) Validate() error {
	_, err := s.selector()
	_, perr := ParsePort(s.Port)
	return errors.Join(err, perr)
}

// NewEndpointSliceSource returns a source that builds one worker per ready
// endpoint of the selected EndpointSlices (discovery.k8s.io/v1), with
// capacity from the annotations of the endpoint's Pod. Only ready,
// non-terminating endpoints whose Pod is known, Ready and not being deleted
// are workers: the Pod's own state also counts because it can be ahead of
// the slice, and because a Service with publishNotReadyAddresses marks
// every endpoint ready.
func NewEndpointSliceSource(cfg SourceConfig, sel SliceSelection) (*Source, error) {
	if err := errors.Join(cfg.validate(), sel.Validate()); err != nil {
		return nil, err
	}
	ls, _ := sel.selector()
	port, _ := ParsePort(sel.Port)
	api := cfg.Client.DiscoveryV1().EndpointSlices(cfg.Namespace)
	slices := newInformer(&discoveryv1.EndpointSlice{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = ls.String()
			return api.List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = ls.String()
			return api.Watch(ctx, o)
		})
	pods := newPodInformer(cfg.Client, cfg.Namespace)
	b := &sliceBuilder{ns: cfg.Namespace, sel: ls, port: port, defaults: cfg.Defaults, slices: slices.GetStore(), pods: pods.GetStore()}
	return newSource(&cfg, b.build,
		named{"endpointslices.discovery.k8s.io", slices},
		named{"pods", pods})
}

// sliceBuilder builds worker sets from the EndpointSlice and Pod caches.
type sliceBuilder struct {
	ns       string
	sel      labels.Selector
	port     portRef
	defaults Defaults
	slices   cache.Store
	pods     cache.Store
}

// endpoint is one pod's address as the slices list it.
type endpoint struct {
	uid     types.UID
	addr    netip.AddrPort
	serving bool
}

// better reports whether e should represent its pod rather than o: the
// same pod can appear twice while the controller moves it between slices,
// and in an IPv4 and an IPv6 slice on a dual-stack Service.
func (e endpoint) better(o endpoint) bool {
	if e.serving != o.serving {
		return e.serving
	}
	if e.addr.Addr().Is4() != o.addr.Addr().Is4() {
		return e.addr.Addr().Is4()
	}
	return e.addr.Compare(o.addr) < 0
}

// endpointServing reports whether an endpoint takes new requests: ready
// (nil counts as ready, per the API) and not terminating. A Service with
// publishNotReadyAddresses marks terminating endpoints ready, hence the
// second check.
func endpointServing(c discoveryv1.EndpointConditions) bool {
	return (c.Ready == nil || *c.Ready) && (c.Terminating == nil || !*c.Terminating)
}

func (b *sliceBuilder) build() snapshot {
	notes := make(map[string]string)
	byPod := make(map[string]endpoint)
	for _, obj := range b.slices.List() {
		es, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || es.Namespace != b.ns || !b.sel.Matches(labels.Set(es.Labels)) {
			continue
		}
		subject := "EndpointSlice " + es.Namespace + "/" + es.Name
		if es.AddressType != discoveryv1.AddressTypeIPv4 && es.AddressType != discoveryv1.AddressTypeIPv6 {
			notes[subject] = fmt.Sprintf("address type %s is not supported (workers need IP addresses)", es.AddressType)
			continue
		}
		port, err := b.port.pick(es.Ports)
		if err != nil {
			notes[subject] = err.Error()
			continue
		}
		for _, ep := range es.Endpoints {
			b.collect(es, ep, port, byPod, notes)
		}
	}
	var ws []fleet.Worker
	for name, e := range byPod {
		if !e.serving {
			continue
		}
		pod := getPod(b.pods, b.ns, name)
		if pod == nil || (e.uid != "" && pod.UID != e.uid) || !podServing(pod) {
			continue // not cached yet, replaced, going away or not ready; a later event settles it
		}
		noteIgnored(pod, notes)
		w, err := podWorker(pod, b.defaults)
		if err != nil {
			notes["pod "+b.ns+"/"+name] = err.Error()
			continue
		}
		w.Address = e.addr.String()
		ws = append(ws, w)
	}
	sortWorkers(ws)
	return snapshot{workers: ws, notes: notes}
}

// collect records one endpoint of es under its pod.
func (b *sliceBuilder) collect(es *discoveryv1.EndpointSlice, ep discoveryv1.Endpoint, port int32, byPod map[string]endpoint, notes map[string]string) {
	if len(ep.Addresses) == 0 {
		return
	}
	ip, err := netip.ParseAddr(ep.Addresses[0])
	if err != nil || ip.Zone() != "" {
		notes["EndpointSlice "+es.Namespace+"/"+es.Name+" address "+ep.Addresses[0]] = "not a literal IP address"
		return
	}
	ref := ep.TargetRef
	if ref == nil || ref.Kind != "Pod" || (ref.Namespace != "" && ref.Namespace != b.ns) {
		notes["EndpointSlice "+es.Namespace+"/"+es.Name+" address "+ip.String()] =
			"no Pod in the slice's namespace as its targetRef (workers need a pod for their id and capacity)"
		return
	}
	e := endpoint{uid: ref.UID, addr: netip.AddrPortFrom(ip, uint16(port)), serving: endpointServing(ep.Conditions)}
	if old, ok := byPod[ref.Name]; !ok || e.better(old) {
		byPod[ref.Name] = e
	}
}

// noteIgnored notes what of pod nothing reads: unknown tollgate.io/
// annotations, and a role label value tollgate does not know (the worker
// is then both).
func noteIgnored(pod *corev1.Pod, notes map[string]string) {
	subject := "pod " + pod.Namespace + "/" + pod.Name
	if unknown := unknownAnnotations(pod); len(unknown) > 0 {
		notes[subject+" annotations"] =
			fmt.Sprintf("unknown annotations %s are ignored (known: %s)", strings.Join(unknown, ", "), strings.Join(knownAnnotations, ", "))
	}
	if v, ok := unknownRoleLabel(pod); ok {
		notes[subject+" labels"] = fmt.Sprintf("label %s=%q is not a role tollgate knows (known: %s): the worker is both; annotate %s to set its role",
			LabelRole, v, knownLabelRoles(), AnnotationRole)
	}
}
