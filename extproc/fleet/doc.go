// Package fleet is tollgate's worker set: the Worker type and its
// validation, the workers file (read with file:line:column problems) and
// its watcher, and the Applier, the one path by which a worker set takes
// effect. An applied set is validated once and diffed once; the owner of
// the scheduling core commits it first (the only step that may refuse),
// then every other holder (the prefix indexes, the engine metrics scraper,
// the KV-event subscriptions, the metric labels) takes its projection of
// the same immutable Set.
//
// A worker's role in prefill/decode disaggregation (Worker.Role: both,
// prefill or decode) reaches the core as sched.Worker.Role; a prefill
// worker is never a request's destination, only the prefill half of split
// requests runs there.
//
// fleet imports the engine adapters only for the projection types they
// take (kvevents.Endpoint, enginemetrics.Target) and the endpoint checks;
// it never imports the shell.
package fleet
