// Package policy turns tollgate's configuration files and request inputs
// into the values the scheduling core consumes.
//
// It parses, strictly, the three files operators bring from upstream:
//
//   - the NVIDIA Dynamo router policy file (--router-policy-config) into a
//     sched.PolicyConfig whose profiles carry their class, bucket, matrix
//     and explicit-class indexes (ParseRouterPolicy, LoadRouterPolicy), plus
//     the synthetic no-file profile from --router-queue-threshold and
//     --router-queue-policy (SyntheticDefault). Two generations are read:
//     family/bucket (default_policy_family) and flat SLO
//     (default_policy_class, a required slo_ms per class, queue_policy edf,
//     fcfs or wspt), told apart by the keys only one of them has; a
//     document with keys of both is an error naming one of each, and
//     PolicyConfig.Schema says which was read (SchemaFamily, SchemaFlat);
//   - the SMG priority scheduler file (--priority-scheduler-config) into a
//     PriorityFile (ParsePriorityConfig, LoadPriorityConfig);
//   - the SMG tenant rate-limit file (--tenant-rate-limit-config) into
//     sched.TenantBudgets (ParseTenantRateLimits, LoadTenantRateLimits), in
//     tenantlimit.go. Its header: tenant keys need the trusted tenant
//     header (CheckTenantHeaderTrust).
//
// Strict means: any unknown key anywhere is an error naming the key,
// duplicate keys are errors, integer fields reject floats, negatives and
// strings, sequence order is kept (class order is the DRR ring order), and
// the first rule violation is reported with upstream's exact text, in
// upstream's order. The tenant rate-limit file is the exception: every
// problem is reported, each with its line and column, in SMG's wording.
// Marshal functions write a parsed configuration back as YAML that parses
// to an equal value.
//
// The same strict reader is exported as YAMLReader (ReadYAML) for
// tollgate's own files, the workers file first: there it reports every
// problem of a document with its line and column (*DecodeError), not only
// the first.
//
// It also reads the per-request inputs: the x-smg-priority header
// (ParsePriorityHeader), the tenant key (Tenants.Resolve) and the tenant
// clamp (Clamp), the Dynamo priority headers and body hints
// (PriorityInputs), the worker pin headers (ParsePinHeaders, PinHeaders.Pin) and the requested
// policy class (PolicyClass). These are pure functions of header values;
// the shell reads the headers.
//
// Deviations from upstream, each deliberate: unknown and duplicate keys in
// the priority file are errors (upstream ignores them); worker_selection in
// the router policy file is rejected as unsupported; an unknown
// --priority-scheduler-default-max-class is an error (upstream quietly uses
// "default"); duplicate --tenant-api-key ids or keys are errors.
//
// Invariants: every value returned is fully validated and owned by the
// caller; nothing is cached or shared between calls. Concurrency: all
// functions are safe for concurrent use, and a Tenants value is immutable
// after NewTenants.
package policy
