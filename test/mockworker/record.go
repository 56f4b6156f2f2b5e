package mockworker

import (
	"fmt"
	"net/http"
	"time"
)

// RequestInfo describes an accepted inference request. It is what Hold
// receives and the fixed part of a Record.
type RequestInfo struct {
	// ID is the request's x-request-id header, or a generated
	// "<worker id>-<n>" when the header is absent.
	ID string
	// Endpoint is the request path: "/v1/completions" or
	// "/v1/chat/completions".
	Endpoint string
	// Model is the served model the request named.
	Model string
	// Header is a copy of the request headers as the worker received them.
	// It is shared by every copy of the record: do not modify it.
	Header http.Header
	// Stream reports whether the client asked for a streamed response.
	Stream bool
	// PromptTokens is the prompt length: the number of token ids for a
	// token-id prompt, otherwise the length under Tokenize (after RenderChat
	// for chat requests).
	PromptTokens int
	// MaxTokens is the number of output tokens the request will produce.
	MaxTokens int
	// RemoteDecode marks the prefill half of a disaggregated request
	// (kv_transfer_params.do_remote_decode): the answer carries the
	// kv_transfer_params a decode worker needs to fetch the prompt's KV.
	RemoteDecode bool
	// RemotePrefill marks the decode half of a disaggregated request
	// (kv_transfer_params.do_remote_prefill): the prompt's KV comes from
	// the engine RemoteEngineID names, so the engine computes only the
	// prompt tokens that its own cache lacks and the transfer cannot cover
	// (the last one, as in vLLM).
	RemotePrefill bool
	// RemoteEngineID is kv_transfer_params.remote_engine_id of a
	// RemotePrefill request: a mock prefill worker puts its Config.ID there.
	RemoteEngineID string
	// PrefillPeer is the prefill worker ("IP:port", from
	// x-prefiller-host-port) that the decode sidecar called for this
	// request, or "" when the sidecar called none.
	PrefillPeer string
}

// Outcome is how a request ended.
type Outcome int

// The outcomes. A request is OutcomeInFlight until it ends.
const (
	// OutcomeInFlight means the request is waiting or running.
	OutcomeInFlight Outcome = iota
	// OutcomeFinished means the request produced all its tokens.
	OutcomeFinished
	// OutcomeCancelled means the request ended early: its client went
	// away, Hold failed, or the worker closed.
	OutcomeCancelled
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case OutcomeInFlight:
		return "in_flight"
	case OutcomeFinished:
		return "finished"
	case OutcomeCancelled:
		return "cancelled"
	default:
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
}

// Record is what the worker observed of one request. Times are zero until
// the request reaches the stage they name.
type Record struct {
	RequestInfo
	// CachedTokens is the number of prompt tokens served from the prefix
	// cache, known when prefill starts.
	CachedTokens int
	// TransferredTokens is the number of prompt tokens whose KV came from
	// a remote prefill (RemotePrefill) rather than the prefix cache or the
	// worker's own prefill, known when prefill starts.
	TransferredTokens int
	// CompletionTokens is the number of output tokens produced so far.
	CompletionTokens int
	// Arrival is when the request reached the engine.
	Arrival time.Time
	// Admitted is when the request took a running slot.
	Admitted time.Time
	// FirstToken is when the first output token was produced (prefill done).
	FirstToken time.Time
	// Finish is when the request ended, finished or cancelled.
	Finish time.Time
	// Outcome is how the request ended.
	Outcome Outcome
}

// Stats is a snapshot of the worker's counters. Every request the engine
// accepts is in exactly one state, so
// Received == Waiting + Running + Finished + Cancelled, and
// Started == Running + Finished + (cancelled after they started).
type Stats struct {
	// Received counts requests that reached the engine.
	Received int
	// Started counts requests that took a running slot.
	Started int
	// Finished counts requests that produced all their tokens.
	Finished int
	// Cancelled counts requests that ended early, waiting or running.
	Cancelled int
	// Running is the number of sequences holding a slot, held ones included.
	Running int
	// Waiting is the number of requests in the FIFO queue for a slot.
	Waiting int
	// Held is the number of running sequences inside the Hold hook.
	Held int
	// MaxRunning is the largest Running ever observed.
	MaxRunning int
	// MaxWaiting is the largest Waiting ever observed.
	MaxWaiting int
	// PromptTokens, CachedTokens, TransferredTokens and GenerationTokens
	// are token totals: prompt tokens prefilled (cached and transferred
	// ones included), the part of them served from the prefix cache, the
	// part whose KV came from a remote prefill, and output tokens produced.
	PromptTokens, CachedTokens, TransferredTokens, GenerationTokens int
	// CachedBlocks is the number of blocks in the prefix cache.
	CachedBlocks int
	// PrefillCalls counts the decode sidecar's calls to prefill workers,
	// and PrefillFailures those of them that failed (answered 502).
	PrefillCalls, PrefillFailures int
	// PrefillServed counts finished RemoteDecode requests: prefills this
	// worker ran for a remote decode.
	PrefillServed int
	// Steps counts the steps the shared batch ran (Config.Batch); it
	// stays 0 without one.
	Steps int
}

// recordLog keeps the newest records, at most max of them, in arrival
// order. It is not safe for concurrent use; the engine guards it.
type recordLog struct {
	max   int
	order []*Record // Oldest first.
	byID  map[string]*Record
}

func newRecordLog(maxRecords int) *recordLog {
	return &recordLog{max: maxRecords, byID: make(map[string]*Record)}
}

// add appends r, dropping the oldest record beyond max. A later record with
// the same ID shadows an earlier one in get.
func (l *recordLog) add(r *Record) {
	l.order = append(l.order, r)
	l.byID[r.ID] = r
	if len(l.order) > l.max {
		old := l.order[0]
		l.order[0] = nil
		l.order = l.order[1:]
		if l.byID[old.ID] == old {
			delete(l.byID, old.ID)
		}
	}
}

// get returns the newest record with id.
func (l *recordLog) get(id string) (*Record, bool) {
	r, ok := l.byID[id]
	return r, ok
}

// all returns copies of every record, oldest first.
func (l *recordLog) all() []Record {
	out := make([]Record, len(l.order))
	for i, r := range l.order {
		out[i] = *r
	}
	return out
}
