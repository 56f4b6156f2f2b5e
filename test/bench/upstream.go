package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Upstream is the model server of the end-to-end benchmarks, as cheap as an
// HTTP server can be so that the ext_proc path dominates: it reads the
// request body and answers every POST at once with one fixed one-token
// completion whose usage reports a prompt of body length / 4 tokens. GET
// requests get a one-model list.
//
// A request with the header X-Bench-Chunks: N (N >= 1) gets a server-sent
// event stream instead, as a "stream": true completion does: N token
// events, each written and flushed after a pause of X-Bench-Chunk-Gap (a
// Go duration, default none), then one event with the usage and
// "data: [DONE]". With a gap the events reach the client one by one, so
// that each is one response body chunk at the proxy. X-Bench-One-Write:
// true keeps the same pauses but writes every event at once after the
// last: the same bytes at the same pace, in as few chunks as the proxy
// reads them.
//
// For the held-request benchmark it has a gate, driven over HTTP:
// POST /bench/hold?n=N parks the next N requests (after reading their
// bodies, before answering), GET /bench/parked returns {"parked":P}, and
// POST /bench/release answers every parked request and stops parking.
//
// An Upstream is an http.Handler and is safe for concurrent use.
type Upstream struct {
	requests atomic.Uint64

	// mu guards the gate.
	mu       sync.Mutex
	holdLeft int
	parked   int
	release  chan struct{} // closed by Release; replaced by Hold
}

// NewUpstream returns an Upstream that parks nothing.
func NewUpstream() *Upstream { return &Upstream{release: make(chan struct{})} }

// Requests returns the number of completions answered or parked so far.
func (u *Upstream) Requests() uint64 { return u.requests.Load() }

// Hold makes the next n requests park until Release.
func (u *Upstream) Hold(n int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	select {
	case <-u.release: // released before: parked requests kept the old channel
		u.release = make(chan struct{})
	default:
	}
	u.holdLeft += n
}

// Parked returns the number of requests parked now.
func (u *Upstream) Parked() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.parked
}

// Release answers every parked request and cancels the rest of any Hold.
func (u *Upstream) Release() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.holdLeft = 0
	select {
	case <-u.release:
	default:
		close(u.release)
	}
}

// park blocks the request if the gate holds it; it returns false when the
// client went away first.
func (u *Upstream) park(r *http.Request) bool {
	u.mu.Lock()
	if u.holdLeft == 0 {
		u.mu.Unlock()
		return true
	}
	u.holdLeft--
	u.parked++
	release := u.release
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.parked--
		u.mu.Unlock()
	}()
	select {
	case <-release:
		return true
	case <-r.Context().Done():
		return false
	}
}

// ServeHTTP implements http.Handler.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/bench/hold" && r.Method == http.MethodPost:
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 0 {
			http.Error(w, "n must be a non-negative integer", http.StatusBadRequest)
			return
		}
		u.Hold(n)
	case r.URL.Path == "/bench/release" && r.Method == http.MethodPost:
		u.Release()
	case r.URL.Path == "/bench/parked":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int{"parked": u.Parked()})
	case r.Method == http.MethodPost:
		u.complete(w, r)
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"`+BenchModel+`","object":"model"}]}`)
	}
}

// complete answers one completion.
func (u *Upstream) complete(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	if err != nil {
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	u.requests.Add(1)
	if !u.park(r) {
		return
	}
	prompt := max(n/4, 1)
	if h := r.Header.Get(ChunksHeader); h != "" {
		u.stream(w, r, h, prompt)
		return
	}
	body := fmt.Sprintf(`{"id":"cmpl-bench","object":"text_completion","created":0,"model":"%s",`+
		`"choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":"length"}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d}}`, BenchModel, prompt, prompt+1)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = io.WriteString(w, body)
}

// The headers that ask Upstream for a streamed answer.
const (
	ChunksHeader   = "X-Bench-Chunks"
	ChunkGapHeader = "X-Bench-Chunk-Gap"
	OneWriteHeader = "X-Bench-One-Write"
)

// Events of a streamed answer.
const (
	tokenEvent = `data: {"id":"cmpl-bench","object":"text_completion","created":0,"model":"` + BenchModel +
		`","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null}]}` + "\n\n"
	usageEvent = `data: {"id":"cmpl-bench","object":"text_completion","created":0,"model":"` + BenchModel +
		`","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}` + "\n\ndata: [DONE]\n\n"
)

// stream answers one completion as a server-sent event stream of the
// number of token events in chunks.
func (u *Upstream) stream(w http.ResponseWriter, r *http.Request, chunks string, prompt int64) {
	n, err := strconv.Atoi(chunks)
	if err != nil || n < 1 {
		http.Error(w, ChunksHeader+" must be a positive integer", http.StatusBadRequest)
		return
	}
	var gap time.Duration
	if g := r.Header.Get(ChunkGapHeader); g != "" {
		if gap, err = time.ParseDuration(g); err != nil || gap < 0 {
			http.Error(w, ChunkGapHeader+" must be a non-negative duration", http.StatusBadRequest)
			return
		}
	}
	oneWrite := r.Header.Get(OneWriteHeader) == "true"
	flush := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_ = flush.Flush()
	var all []byte
	for range n {
		if gap > 0 {
			t := time.NewTimer(gap)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		if oneWrite {
			all = append(all, tokenEvent...)
			continue
		}
		if _, err := io.WriteString(w, tokenEvent); err != nil {
			return
		}
		if err := flush.Flush(); err != nil {
			return
		}
	}
	all = fmt.Appendf(all, usageEvent, prompt, n, prompt+int64(n))
	_, _ = w.Write(all)
}
