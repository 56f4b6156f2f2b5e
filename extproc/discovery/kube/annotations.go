package kube

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tollgate/tollgate/extproc/engine/enginemetrics"
	"github.com/tollgate/tollgate/extproc/engine/kvevents"
	"github.com/tollgate/tollgate/extproc/fleet"
)

// Pod annotations that describe a worker. A pod without one gets the
// corresponding Defaults field.
const (
	// AnnotationWorkerID names the worker (what pins name). Without it the
	// worker is "NAMESPACE/POD-NAME", which survives tollgate restarts and
	// pod IP changes alike.
	AnnotationWorkerID = "tollgate.io/worker-id"
	// AnnotationMaxRunningRequests is the worker's SMG slot count, a
	// positive integer (vLLM's --max-num-seqs).
	AnnotationMaxRunningRequests = "tollgate.io/max-running-requests"
	// AnnotationMaxNumBatchedTokens is Dynamo's max_num_batched_tokens, a
	// positive integer.
	AnnotationMaxNumBatchedTokens = "tollgate.io/max-num-batched-tokens"
	// AnnotationDPSize is the number of data-parallel ranks, 1 to MaxPodDPSize.
	AnnotationDPSize = "tollgate.io/dp-size"
	// AnnotationDPStartRank is the first data-parallel rank, a non-negative
	// integer (0 unless one DP group spans several pods).
	AnnotationDPStartRank = "tollgate.io/dp-start-rank"
	// AnnotationTaints is a comma-separated list of taints; an empty value
	// means none.
	AnnotationTaints = "tollgate.io/taints"
	// AnnotationModel is the served model name; an empty value serves every
	// model, overriding Defaults.Model.
	AnnotationModel = "tollgate.io/model"
	// AnnotationMetricsURL overrides where the engine's metrics are read:
	// ":PORT/PATH" or "/PATH" relative to the pod IP and port, or an
	// absolute http(s) URL. Without it: http://POD_IP:PORT/metrics.
	AnnotationMetricsURL = "tollgate.io/metrics-url"
	// AnnotationKVEventsEndpoint is the engine's KV-event PUB endpoint: a
	// port of the pod's IP, or tcp://IP:PORT.
	AnnotationKVEventsEndpoint = "tollgate.io/kv-events-endpoint"
	// AnnotationKVEventsReplayEndpoint is the engine's replay endpoint,
	// written the same way.
	AnnotationKVEventsReplayEndpoint = "tollgate.io/kv-events-replay-endpoint"
	// AnnotationRole is the worker's part in prefill/decode
	// disaggregation, as the workers file writes it: both (also empty),
	// prefill or decode. It overrides LabelRole.
	AnnotationRole = "tollgate.io/role"

	// annotationPrefix is the prefix every annotation above shares.
	annotationPrefix = "tollgate.io/"
)

// MaxPodDPSize bounds the data-parallel ranks of one discovered pod
// (AnnotationDPSize and the default dp size). The scheduler keeps state per
// rank, so a pod must not be able to make it allocate without bound; this
// bound is tighter than sched.MaxDPSize, which holds for every worker,
// because anyone who can annotate a pod sets it.
const MaxPodDPSize = 1024

// maxWorkerIDLen bounds AnnotationWorkerID: a DNS subdomain's length, ample
// for a name and short enough for a header.
const maxWorkerIDLen = 253

// knownAnnotations lists every annotation read from a pod.
var knownAnnotations = []string{
	AnnotationWorkerID, AnnotationMaxRunningRequests, AnnotationMaxNumBatchedTokens,
	AnnotationDPSize, AnnotationDPStartRank, AnnotationTaints, AnnotationModel, AnnotationMetricsURL,
	AnnotationKVEventsEndpoint, AnnotationKVEventsReplayEndpoint, AnnotationRole,
}

// Defaults is what a worker gets for each annotation its pod lacks. Zero
// fields select extproc's own defaults (64 slots, 10,000,000 batched
// tokens, one DP rank, every model).
type Defaults struct {
	// MaxRunningRequests is the default SMG slot count.
	MaxRunningRequests uint32
	// MaxNumBatchedTokens is the default max_num_batched_tokens.
	MaxNumBatchedTokens uint64
	// DPSize is the default number of data-parallel ranks.
	DPSize uint32
	// Model is the default served model; empty serves every model.
	Model string
}

// Validate reports every bad field, joined.
func (d Defaults) Validate() error {
	var errs []error
	if d.DPSize > MaxPodDPSize {
		errs = append(errs, fmt.Errorf("kube: default dp size %d exceeds %d", d.DPSize, MaxPodDPSize))
	}
	if strings.TrimSpace(d.Model) != d.Model {
		errs = append(errs, fmt.Errorf("kube: default model %q has surrounding whitespace", d.Model))
	}
	return errors.Join(errs...)
}

// podWorker describes the worker behind pod from its annotations, its
// role label and d; the caller fills in the address. A pod with any bad
// annotation is reported with every problem joined and gets no worker:
// guessing its capacity could overbook it, and a fallback id would
// silently break pins (see the package documentation). So does an
// encode-only pod, which is no worker.
func podWorker(pod *corev1.Pod, d Defaults) (fleet.Worker, error) {
	w := fleet.Worker{
		ID:                  pod.Namespace + "/" + pod.Name,
		MaxRunningRequests:  d.MaxRunningRequests,
		MaxNumBatchedTokens: d.MaxNumBatchedTokens,
		DPSize:              d.DPSize,
		Model:               d.Model,
	}
	ann := pod.Annotations
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("annotation %s=%q: %s", key, ann[key], fmt.Sprintf(format, args...)))
	}
	if v, ok := ann[AnnotationWorkerID]; ok {
		if err := checkWorkerID(v); err != nil {
			bad(AnnotationWorkerID, "%v", err)
		}
		w.ID = v
	}
	if v, ok := ann[AnnotationMaxRunningRequests]; ok {
		n, err := parseCount(v, 1, 1<<32-1)
		if err != nil {
			bad(AnnotationMaxRunningRequests, "%v", err)
		}
		w.MaxRunningRequests = uint32(n)
	}
	if v, ok := ann[AnnotationMaxNumBatchedTokens]; ok {
		n, err := parseCount(v, 1, 1<<64-1)
		if err != nil {
			bad(AnnotationMaxNumBatchedTokens, "%v", err)
		}
		w.MaxNumBatchedTokens = n
	}
	if v, ok := ann[AnnotationDPSize]; ok {
		n, err := parseCount(v, 1, MaxPodDPSize)
		if err != nil {
			bad(AnnotationDPSize, "%v", err)
		}
		w.DPSize = uint32(n)
	}
	if v, ok := ann[AnnotationDPStartRank]; ok {
		n, err := parseCount(v, 0, 1<<32-1)
		if err != nil {
			bad(AnnotationDPStartRank, "%v", err)
		}
		w.DPStartRank = uint32(n)
	}
	if uint64(w.DPStartRank)+uint64(max(w.DPSize, 1)) > 1<<32 {
		bad(AnnotationDPStartRank, "dp start rank %d + dp size %d overflows a 32-bit rank", w.DPStartRank, max(w.DPSize, 1))
	}
	if v, ok := ann[AnnotationTaints]; ok {
		ts, err := parseTaints(v)
		if err != nil {
			bad(AnnotationTaints, "%v", err)
		}
		w.Taints = ts
	}
	if v, ok := ann[AnnotationModel]; ok {
		if strings.TrimSpace(v) != v {
			bad(AnnotationModel, "surrounding whitespace")
		}
		w.Model = v
	}
	if v, ok := ann[AnnotationRole]; ok {
		if _, err := fleet.ParseRole(v); err != nil {
			bad(AnnotationRole, "%v", err)
		}
		w.Role = v
	}
	if role, err := labelRole(pod); err != nil {
		errs = append(errs, err)
	} else if role != "" {
		w.Role = role
	}
	if v, ok := ann[AnnotationMetricsURL]; ok {
		// Checked against a placeholder address: the pod IP comes later.
		if _, err := enginemetrics.ResolveURL("192.0.2.1:1", v); err != nil {
			bad(AnnotationMetricsURL, "%v", err)
		}
		w.MetricsURL = v
	}
	for _, a := range []struct {
		key string
		dst *string
	}{{AnnotationKVEventsEndpoint, &w.KVEventsEndpoint}, {AnnotationKVEventsReplayEndpoint, &w.KVEventsReplayEndpoint}} {
		if v, ok := ann[a.key]; ok {
			ep, err := kvEndpoint(v, pod.Status.PodIP)
			if err != nil {
				bad(a.key, "%v", err)
			}
			*a.dst = ep
		}
	}
	if len(errs) > 0 {
		return fleet.Worker{}, errors.Join(errs...)
	}
	return w, nil
}

// kvEndpoint resolves a KV-event endpoint annotation: a bare port means
// that port of the pod's IP.
func kvEndpoint(v, podIP string) (string, error) {
	if port, err := strconv.ParseUint(v, 10, 16); err == nil {
		if podIP == "" || port == 0 {
			return "", errors.New("a port needs the pod's IP and must not be 0")
		}
		return "tcp://" + net.JoinHostPort(podIP, v), nil
	}
	if err := kvevents.CheckEndpoint(v); err != nil {
		return "", err
	}
	return v, nil
}

// unknownAnnotations returns the tollgate.io/ annotation keys of pod that
// tollgate does not read, sorted; most likely typos.
func unknownAnnotations(pod *corev1.Pod) []string {
	var out []string
	for k := range pod.Annotations {
		if strings.HasPrefix(k, annotationPrefix) && !slices.Contains(knownAnnotations, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// checkWorkerID accepts printable ASCII without spaces: an id travels in
// the x-dynamo-worker-instance-id header.
func checkWorkerID(id string) error {
	if id == "" {
		return errors.New("empty")
	}
	if len(id) > maxWorkerIDLen {
		return fmt.Errorf("longer than %d bytes", maxWorkerIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f || c == ',' {
			return errors.New("only printable ASCII without spaces or commas is allowed")
		}
	}
	return nil
}

// parseCount parses a decimal integer in [lo, hi].
func parseCount(s string, lo, hi uint64) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("not an integer in [%d, %d]", lo, hi)
	}
	return n, nil
}

// parseTaints splits a comma-separated taint list; blanks around items are
// trimmed, duplicates dropped, empty items refused.
func parseTaints(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for t := range strings.SplitSeq(s, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			return nil, errors.New("empty taint in the list")
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, nil
}
