// Package answer holds tollgate's HTTP answers: the one table that maps
// every refusal to its status, headers and body.
//
// Every answer tollgate gives instead of routing a request is a Rejection:
// a Reason (one row of the table) plus the details its body needs. The
// shell asks For what a scheduler outcome is answered with (ModelNotFound,
// BodyTooLarge and FromIntake cover the refusals before the scheduler) and
// sends Immediate, Envoy's ImmediateResponse; Code is the metric label.
// The rows: SMG's 429/503 scheduler_* answers with X-SMG-Error-Code and
// Retry-After, Dynamo's 529 Overloaded body, 503 for no eligible worker or
// an invalid pin, 503 with Retry-After while shutting down, 401, 400, 404,
// 413 and 431. Nothing else chooses a status code.
//
// SetHeader and SortHeaders build header mutations the way Envoy's
// ext_proc filter applies them; the shell's routing mutations use them too.
package answer
