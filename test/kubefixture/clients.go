package kubefixture

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// NewDynamic returns a fake dynamic client holding objs that can list
// InferencePools, InferenceObjectives and InferenceModelRewrites.
func NewDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{InferencePoolGVR: "InferencePoolList", InferenceObjectiveGVR: "InferenceObjectiveList",
			InferenceModelRewriteGVR: "InferenceModelRewriteList"}, objs...)
}

// LeaseClient returns a fake clientset whose Lease updates behave like the
// API server's: an update carrying a stale resourceVersion conflicts. (The
// fake's tracker accepts any update, which would let a replica that read
// the Lease before another took it over overwrite it.) While *partitioned
// is true, every write that names holder "a" fails as if the network were
// down.
func LeaseClient(partitioned *atomic.Bool) *fake.Clientset {
	client := fake.NewClientset()
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	var mu sync.Mutex
	client.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		l := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		mu.Lock()
		defer mu.Unlock()
		cur, err := client.Tracker().Get(gvr, l.Namespace, l.Name)
		if err != nil {
			return true, nil, err
		}
		if cur.(*coordinationv1.Lease).ResourceVersion != l.ResourceVersion {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), l.Name, errors.New("the object has been modified"))
		}
		n, _ := strconv.Atoi(l.ResourceVersion)
		l.ResourceVersion = strconv.Itoa(n + 1)
		if err := client.Tracker().Update(gvr, l, l.Namespace); err != nil {
			return true, nil, err
		}
		return true, l, nil
	})
	client.PrependReactor("*", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		var obj runtime.Object
		if w, ok := action.(interface{ GetObject() runtime.Object }); ok { // create or update
			obj = w.GetObject()
		}
		l, ok := obj.(*coordinationv1.Lease)
		if ok && partitioned.Load() && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "a" {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	return client
}
