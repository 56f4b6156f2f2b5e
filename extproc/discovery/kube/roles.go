package kube

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tollgate/tollgate/sched"
)

// LabelRole is llm-d's pod label for a worker's part in prefill/decode
// disaggregation: prefill, decode or prefill-decode (both), and llm-d's
// other values (labelRoles). AnnotationRole overrides it; a pod with
// neither is both.
const LabelRole = "llm-d.ai/role"

// labelEncode is llm-d's role of an encode-only pod: it serves neither
// prefill nor decode, so it is no worker.
const labelEncode = "encode"

// labelRoles maps llm-d's values of LabelRole to roles. "both" is llm-d's
// deprecated spelling of "prefill-decode" (KServe still sets it); tollgate
// routes no encode stage, so an encode-* role counts for its other stages.
var labelRoles = map[string]sched.Role{
	"prefill":               sched.RolePrefill,
	"encode-prefill":        sched.RolePrefill,
	"decode":                sched.RoleDecode,
	"prefill-decode":        sched.RoleBoth,
	"both":                  sched.RoleBoth,
	"encode-prefill-decode": sched.RoleBoth,
}

// roleLabel returns pod's LabelRole value; ok is false when the pod has
// none or AnnotationRole overrides it.
func roleLabel(pod *corev1.Pod) (v string, ok bool) {
	if _, ann := pod.Annotations[AnnotationRole]; ann {
		return "", false
	}
	v, ok = pod.Labels[LabelRole]
	return v, ok
}

// labelRole returns the worker role (fleet.Worker.Role) pod's LabelRole
// gives it: "" without one, and for a value tollgate does not know, which
// serves both and noteIgnored reports. An encode-only pod is an error: it
// is no worker.
func labelRole(pod *corev1.Pod) (string, error) {
	v, ok := roleLabel(pod)
	if !ok {
		return "", nil
	}
	if v == labelEncode {
		return "", fmt.Errorf("label %s=%q: an encode-only pod serves neither prefill nor decode", LabelRole, v)
	}
	if r, known := labelRoles[v]; known {
		return r.String(), nil
	}
	return "", nil
}

// unknownRoleLabel returns pod's LabelRole value when tollgate does not
// know it.
func unknownRoleLabel(pod *corev1.Pod) (string, bool) {
	v, ok := roleLabel(pod)
	if _, known := labelRoles[v]; !ok || known || v == labelEncode {
		return "", false
	}
	return v, true
}

// knownLabelRoles lists LabelRole's values, sorted.
func knownLabelRoles() string {
	names := append(slices.Collect(maps.Keys(labelRoles)), labelEncode)
	slices.Sort(names)
	return strings.Join(names, ", ")
}
