package kube

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// newPodInformer returns an informer over the pods of namespace. Its cache
// keeps only what discovery reads (see slimPod), so a namespace with many
// unrelated pods costs little memory.
func newPodInformer(client kubernetes.Interface, namespace string) cache.SharedIndexInformer {
	pods := client.CoreV1().Pods(namespace)
	inf := newInformer(&corev1.Pod{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) },
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return pods.Watch(ctx, o) })
	_ = inf.SetTransform(slimPod) // fails only once the informer runs
	return inf
}

// slimPod is the pod informer's transform: it keeps the name, namespace,
// UID, labels, tollgate.io/ annotations, deletion timestamp, phase, IPs and
// Ready condition, and drops the rest (spec, managed fields, other
// annotations such as last-applied-configuration).
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone: left as it is
	}
	s := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              p.Name,
			Namespace:         p.Namespace,
			UID:               p.UID,
			ResourceVersion:   p.ResourceVersion,
			Labels:            p.Labels,
			DeletionTimestamp: p.DeletionTimestamp,
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}
	for k, v := range p.Annotations {
		if strings.HasPrefix(k, annotationPrefix) {
			if s.Annotations == nil {
				s.Annotations = make(map[string]string)
			}
			s.Annotations[k] = v
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			s.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return s, nil
}

// podServing reports whether pod takes new requests: Running, Ready, with
// an IP, and not being deleted. A terminating pod keeps its in-flight
// requests (the scheduler keeps their bookings) but gets no new ones.
func podServing(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// getPod returns the cached pod namespace/name, or nil.
func getPod(store cache.Store, namespace, name string) *corev1.Pod {
	obj, ok, err := store.GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	p, _ := obj.(*corev1.Pod)
	return p
}

// matchingPods returns the cached pods that sel matches.
func matchingPods(store cache.Store, sel labels.Selector) []*corev1.Pod {
	var out []*corev1.Pod
	for _, obj := range store.List() {
		if p, ok := obj.(*corev1.Pod); ok && sel.Matches(labels.Set(p.Labels)) {
			out = append(out, p)
		}
	}
	return out
}
