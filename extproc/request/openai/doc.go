// Package openai reads the parts of OpenAI-style inference requests and
// responses that admission needs: the route kind, the model, the prompt (as
// text to tokenize or as exact token ids), the output budget, the streaming
// flag, the routing and priority hints in the nvext extension, and the usage
// a worker reports.
//
// Parse never panics on any input. Every rejection is an *Error with status
// 400 whose message names the offending field (for example
// 'messages[2].content' must be a string or an array of content parts), and
// (*Error).JSON renders the OpenAI error body. One pass over the body checks
// its JSON syntax, as strictly as encoding/json, and splits it into members;
// a syntax error names the byte offset and what was expected there.
// FindModel reads the model in that same pass, for requests that are
// routed without admission and for model rewrites.
//
// Chat messages, Responses input items and tool definitions are rendered
// into one string with a fixed template (see Request.Text), so that two
// conversations sharing a history share a rendered prefix and therefore
// prefix-cache block hashes. The template approximates, but is not, the
// model's own chat template: counts are estimates within a few tokens per
// message.
//
// A UsageScanner follows a response body chunk by chunk, streamed (SSE) or
// not, and extracts the usage object with memory bounded by MaxUsageBytes,
// whatever the body's size or how it is split.
//
// Parse, FindModel and RouteKind are safe for concurrent use. A UsageScanner belongs to
// one response and is not safe for concurrent use.
package openai
