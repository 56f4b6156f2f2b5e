// Package kube discovers tollgate's workers in Kubernetes and runs leader
// election between tollgate replicas.
//
// # Worker sources
//
// A Source watches Kubernetes objects with client-go shared informers and
// keeps the ext_proc server's worker set equal to what they describe. Two
// sources exist:
//
//   - NewEndpointSliceSource reads discovery.k8s.io/v1 EndpointSlices,
//     selected by Service (label kubernetes.io/service-name) or by a label
//     selector, and takes one port by name or number. Each endpoint that is
//     ready and not terminating, whose Pod is known, Ready and not being
//     deleted, is one worker at address:port. An endpoint without a Pod
//     targetRef is reported and skipped: a worker needs a pod for its id and
//     capacity.
//   - NewPoolSource follows one Gateway API Inference Extension
//     InferencePool (inference.networking.k8s.io/v1) through the dynamic
//     client, decoding only spec.selector.matchLabels, spec.targetPorts and
//     spec.endpointPickerRef. Every pod the selector matches that is Running,
//     Ready, has an IP and is not being deleted gives one worker per target
//     port at podIP:port. tollgate is then the pool's endpoint picker:
//     extproc answers with the x-gateway-destination-endpoint header and the
//     same value under the envoy.lb dynamic metadata, and serves gRPC health.
//
// Next to an InferencePool source, NewObjectiveSource follows the
// InferenceObjectives (inference.networking.x-k8s.io/v1alpha2) of the same
// namespace whose spec.poolRef names the pool, decoding only spec.priority
// and spec.poolRef. Each gives its name (the objective header value) a
// priority class by policy.ObjectiveClass (negative: bulk, 0 or unset:
// default, positive: interactive). It debounces like the worker sources
// and hands the whole mapping found to ObjectiveConfig.Apply, normally
// (*extproc.Server).SetObjectives, which merges it under the operator's
// --objective-class names (the flags win, and the found names past the
// budget of names they share are left out by name order) and swaps it in
// atomically. The merge has one owner, the server: the source reports
// every valid object it finds (at most policy.MaxObjectives names, by
// name order, a bound on its own memory) and logs the server's answer,
// what a flag shadows and what the budget left out, as problems of the
// objects concerned. It runs apart from the worker sources, so a cluster
// without the InferenceObjective CRD (logged once, then checked again with
// the reflector's backoff) never holds up worker discovery.
//
// NewRewriteSource follows the pool's InferenceModelRewrites the same way
// and hands RewriteConfig.Apply (normally
// (*extproc.Server).SetModelRewrites) one rule per requested model name,
// plus the rule without matches, resolved by the API's precedence: exact
// before generic, the oldest object, the first rule of an object. The
// server merges them under the --model-rewrite table the same way, and the
// source logs its answer on the rules concerned.
//
// Both read worker capacity from the pod's annotations (AnnotationWorkerID,
// AnnotationMaxRunningRequests, AnnotationMaxNumBatchedTokens,
// AnnotationDPSize, AnnotationDPStartRank, AnnotationTaints,
// AnnotationModel) through a Pod informer whose cache keeps only those
// annotations, the labels and the status fields read here; what a pod does
// not annotate comes from Defaults. A worker's prefill/decode role comes
// from llm-d's LabelRole (prefill, decode, prefill-decode), which
// AnnotationRole overrides; a pod with neither is both. A worker's id is
// its worker-id annotation, else "NAMESPACE/POD-NAME" (with ":PORT"
// appended per target port when an InferencePool has several), so it
// stays the same across tollgate restarts and never depends on the pod IP.
//
// # Invariants
//
//   - Every change goes through the same path: an informer event marks the
//     set dirty; DefaultDebounce later (bursts fold into one rebuild) the
//     source builds the full set from its caches, and, if it differs from the
//     set in force, hands it to SourceConfig.Apply, normally
//     (*extproc.Server).SetWorkers, which validates it and swaps it in
//     atomically. A set Apply rejects (for example two pods annotated with
//     the same worker id) is logged and the current set stays in force; an
//     InferencePool whose spec is unusable does the same.
//   - The first set is applied only once every cache is complete, so a
//     partial view never shrinks the set at startup.
//   - A pod with a bad tollgate.io/ annotation value is left out, not given
//     defaults: a guessed slot count could overbook the worker (and skews
//     the SMG reservations computed from total capacity), and a fallback id
//     would silently break pins. The problem is logged once per pod until it
//     changes or is fixed. Unknown tollgate.io/ keys are logged and ignored.
//     So is a LabelRole value tollgate does not know: the label is llm-d's,
//     so the worker stays, as both. An encode-only pod (LabelRole encode)
//     serves neither prefill nor decode and is left out, logged the same way.
//   - A worker that leaves the set (terminating, not ready, deleted) takes
//     no new requests; requests already admitted to it run to their end and
//     keep their booking until then, because the scheduler keeps removed
//     workers' load until their streams end. Queued requests pinned to it
//     are answered 503.
//
// # High availability
//
// An Elector campaigns for a coordination.k8s.io Lease through client-go's
// leaderelection package and switches an Activator (the ext_proc server):
// only the leader is active, reports ready and admits requests. Standbys
// run their worker sources all the same, so their view is current when
// they take over, which happens within LeaseDuration of the leader's last
// renewal (at once when the leader releases the Lease on shutdown). A
// leader that cannot renew steps down after RenewDeadline, which is
// shorter than LeaseDuration, so two replicas never both believe they lead
// (clock rates permitting): on stepping down it fails its health checks at
// once and answers its queued requests 503 with Retry-After, while its
// admitted requests finish.
//
// What a failover loses: the old leader's queues (those clients get 503
// with Retry-After and retry against the new leader), its DRR deficits and
// SMG starvation clocks, and its approximate prefix index, so the new
// leader routes without cache affinity until traffic rebuilds it. The new
// leader also does not know the old leader's in-flight requests: until
// they end, workers carry more load than it has booked.
//
// Active-active is not offered. SMG's slot pool is one global capacity and
// the DRR deficits are per-class state; both have a single owner, the
// dispatcher of one server. Two active replicas would each admit up to the
// full capacity (overbooking every worker by up to the number of replicas)
// and would each run their own DRR, so fairness would hold only per
// replica. Splitting capacity between replicas needs coordination (a
// shared slot ledger or leased capacity shares) that this package does not
// provide yet.
//
// # Concurrency
//
// A Source's Run owns its informers and one goroutine that debounces,
// builds and applies; informer event handlers only signal it. Build reads
// the informer caches, which are safe for concurrent use. The informers
// list, then watch (not client-go's streamed WatchList), so that list
// failures such as a missing RBAC rule or CRD are logged and a cancelled
// context stops them at once. A Source's Run returns only after its
// informers have stopped.
//
// An Elector's Run owns the campaign; client-go's start and stop callbacks
// are serialized by a mutex so the Activator's last call always matches the
// outcome. It returns once the Lease is released and the Activator is
// inactive; client-go's short notification goroutines may outlive it by
// moments.
package kube
