package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/tollgate/tollgate/extproc/fleet"
)

// InferencePoolGVR is the Gateway API Inference Extension's InferencePool
// resource that NewPoolSource reads.
var InferencePoolGVR = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// maxTargetPorts is the API's bound on spec.targetPorts.
const maxTargetPorts = 8

// Failure modes of spec.endpointPickerRef.failureMode.
const (
	failOpen  = "FailOpen"
	failClose = "FailClose"
)

// poolObject is the part of an InferencePool that tollgate reads. Other
// fields, present or future, are ignored; the ones here are checked.
type poolObject struct {
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		TargetPorts []struct {
			Number int64 `json:"number"`
		} `json:"targetPorts"`
		EndpointPickerRef *struct {
			Group *string `json:"group"`
			Kind  string  `json:"kind"`
			Name  string  `json:"name"`
			Port  *struct {
				Number int64 `json:"number"`
			} `json:"port"`
			FailureMode string `json:"failureMode"`
		} `json:"endpointPickerRef"`
	} `json:"spec"`
}

// pool is a decoded, checked InferencePool.
type pool struct {
	selector labels.Selector
	ports    []uint16
	// picker describes spec.endpointPickerRef for logs; empty when absent.
	picker   string
	failOpen bool
}

// decodePool reads and checks the fields of an InferencePool that matter:
// a non-empty selector of valid labels, and 1 to 8 distinct ports in
// [1, 65535]. It reports every problem, joined.
func decodePool(u *unstructured.Unstructured) (*pool, error) {
	data, err := json.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	var o poolObject
	if err := json.Unmarshal(data, &o); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	var errs []error
	ml := o.Spec.Selector.MatchLabels
	if len(ml) == 0 {
		errs = append(errs, errors.New("spec.selector.matchLabels is empty (it would select every pod)"))
	}
	for k, v := range ml {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("spec.selector.matchLabels key %q: %s", k, msgs[0]))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("spec.selector.matchLabels[%q] value %q: %s", k, v, msgs[0]))
		}
	}
	p := &pool{selector: labels.SelectorFromSet(ml)}
	switch n := len(o.Spec.TargetPorts); {
	case n == 0:
		errs = append(errs, errors.New("spec.targetPorts is empty"))
	case n > maxTargetPorts:
		errs = append(errs, fmt.Errorf("spec.targetPorts has %d entries, more than %d", n, maxTargetPorts))
	}
	for i, tp := range o.Spec.TargetPorts {
		switch {
		case tp.Number < 1 || tp.Number > 65535:
			errs = append(errs, fmt.Errorf("spec.targetPorts[%d].number %d is not in [1, 65535]", i, tp.Number))
		case slices.Contains(p.ports, uint16(tp.Number)):
			errs = append(errs, fmt.Errorf("spec.targetPorts[%d].number %d is listed twice", i, tp.Number))
		default:
			p.ports = append(p.ports, uint16(tp.Number))
		}
	}
	if r := o.Spec.EndpointPickerRef; r != nil {
		kind := cmpOr(r.Kind, "Service")
		p.picker = kind + " " + r.Name
		if r.Port != nil {
			p.picker += " port " + strconv.FormatInt(r.Port.Number, 10)
		}
		mode := cmpOr(r.FailureMode, failClose)
		p.picker += " " + mode
		p.failOpen = mode == failOpen
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// cmpOr returns s, or alt when s is empty.
func cmpOr(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// NewPoolSource returns a source that follows one InferencePool
// (inference.networking.k8s.io/v1) named name in cfg.Namespace through the
// dynamic client: its selector picks the pods, and every serving pod (Ready,
// with an IP, not being deleted) gives one worker per target port, with
// capacity from the pod's annotations. With several target ports a worker's
// id gets ":PORT" appended. A missing pool means no workers; a pool whose
// spec is unusable leaves the current set in force.
func NewPoolSource(cfg SourceConfig, dyn dynamic.Interface, name string) (*Source, error) {
	err := cfg.validate()
	if dyn == nil {
		err = errors.Join(err, errors.New("kube: a dynamic client is required"))
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		err = errors.Join(err, fmt.Errorf("kube: inference pool name %q: %s", name, msgs[0]))
	}
	if err != nil {
		return nil, err
	}
	api := dyn.Resource(InferencePoolGVR).Namespace(cfg.Namespace)
	byName := fields.OneTermEqualSelector("metadata.name", name).String()
	pools := newInformer(&unstructured.Unstructured{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return api.List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return api.Watch(ctx, o)
		})
	pods := newPodInformer(cfg.Client, cfg.Namespace)
	b := &poolBuilder{ns: cfg.Namespace, name: name, defaults: cfg.Defaults, pools: pools.GetStore(), pods: pods.GetStore()}
	return newSource(&cfg, b.build,
		named{InferencePoolGVR.GroupResource().String(), pools},
		named{"pods", pods})
}

// poolBuilder builds worker sets from the InferencePool and Pod caches.
type poolBuilder struct {
	ns, name string
	defaults Defaults
	pools    cache.Store
	pods     cache.Store
}

func (b *poolBuilder) build() snapshot {
	subject := "InferencePool " + b.ns + "/" + b.name
	notes := make(map[string]string)
	obj, ok, _ := b.pools.GetByKey(b.ns + "/" + b.name)
	if !ok {
		notes[subject] = "not found: no workers until it exists"
		return snapshot{notes: notes}
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return snapshot{notes: notes, err: fmt.Errorf("%s: unexpected cached type %T", subject, obj)}
	}
	p, err := decodePool(u)
	if err != nil {
		return snapshot{notes: notes, err: fmt.Errorf("%s: %w", subject, err)}
	}
	if p.failOpen {
		notes[subject+" endpointPickerRef"] = fmt.Sprintf("the pool names %s: while tollgate is unreachable the gateway routes around admission", p.picker)
	}
	var ws []fleet.Worker
	for _, pod := range matchingPods(b.pods, p.selector) {
		if pod.Namespace != b.ns || !podServing(pod) {
			continue
		}
		ip, err := netip.ParseAddr(pod.Status.PodIP)
		if err != nil || ip.Zone() != "" {
			notes["pod "+pod.Namespace+"/"+pod.Name] = fmt.Sprintf("pod IP %q is not a literal IP address", pod.Status.PodIP)
			continue
		}
		noteIgnored(pod, notes)
		w, err := podWorker(pod, b.defaults)
		if err != nil {
			notes["pod "+pod.Namespace+"/"+pod.Name] = err.Error()
			continue
		}
		for _, port := range p.ports {
			pw := w
			if len(p.ports) > 1 {
				pw.ID = w.ID + ":" + strconv.Itoa(int(port))
			}
			pw.Address = netip.AddrPortFrom(ip, port).String()
			ws = append(ws, pw)
		}
	}
	sortWorkers(ws)
	return snapshot{workers: ws, notes: notes}
}
