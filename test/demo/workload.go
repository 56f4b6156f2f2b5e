package demo

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tollgate/tollgate/test/envoysim"
	"github.com/tollgate/tollgate/test/mockworker"
)

// reqSpec is one client request: a streamed or plain /v1/completions call
// whose prompt is tokens copies of one token id, so its cost is exact and
// its prefix shares nothing with other requests.
type reqSpec struct {
	// class indexes the scenario's class list (the chart's series).
	class int
	// id is the x-request-id.
	id string
	// gateway indexes the simulated Envoy the request goes through, for
	// the chart; the caller picks the Envoy.
	gateway   int
	header    http.Header
	tokenID   int
	tokens    int
	maxTokens int
	stream    bool
}

// request builds the HTTP request the client sends.
func (r *reqSpec) request() envoysim.Request {
	body := completionBody(r.tokenID, r.tokens, r.maxTokens, r.stream)
	h := http.Header{}
	for k, vs := range r.header {
		h[k] = slices.Clone(vs)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Request-Id", r.id)
	return envoysim.Request{Method: http.MethodPost, Path: mockworker.PathCompletions, Header: h, Body: body}
}

// completionBody is a completions request with a token-id prompt.
func completionBody(tokenID, n, maxTokens int, stream bool) []byte {
	b := make([]byte, 0, 64+n*(len(strconv.Itoa(tokenID))+1))
	b = append(b, `{"model":"`+demoModel+`","prompt":[`...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(tokenID), 10)
	}
	b = append(b, `],"max_tokens":`...)
	b = strconv.AppendInt(b, int64(maxTokens), 10)
	b = append(b, `,"temperature":0,"stream":`...)
	b = strconv.AppendBool(b, stream)
	return append(b, '}')
}

// outcome is how a request ended, as the client sees it.
type outcome uint8

const (
	// outcomeOK: 200 and a complete response.
	outcomeOK outcome = iota
	// outcomePreempted: 503 scheduler_preempted.
	outcomePreempted
	// outcomeQueueFull: 429 scheduler_queue_full.
	outcomeQueueFull
	// outcomeQueueTimeout: 503 scheduler_queue_timeout.
	outcomeQueueTimeout
	// outcomeOverloaded: 529, a Dynamo per-worker queue limit.
	outcomeOverloaded
	// outcomeOther: any other status, or a reset stream.
	outcomeOther
	numOutcomes
)

// rejectReasons names the rejecting outcomes in table order.
var rejectReasons = []struct {
	o    outcome
	name string
}{
	{outcomeQueueFull, "queue_full"},
	{outcomeQueueTimeout, "queue_timeout"},
	{outcomeOverloaded, "overloaded"},
	{outcomeOther, "other"},
}

// classify maps a response to its outcome.
func classify(r *envoysim.Response) outcome {
	switch {
	case r.Reset:
		return outcomeOther
	case r.Status == http.StatusOK:
		return outcomeOK
	case r.Header.Get("X-Smg-Preempted") == "true":
		return outcomePreempted
	}
	switch r.Header.Get("X-Smg-Error-Code") {
	case "scheduler_queue_full":
		return outcomeQueueFull
	case "scheduler_queue_timeout":
		return outcomeQueueTimeout
	}
	if r.Status == 529 {
		return outcomeOverloaded
	}
	return outcomeOther
}

// completion is one finished request as the client saw it.
type completion struct {
	// at is when the response ended, since the scenario started.
	at      time.Duration
	class   int
	outcome outcome
	status  int
	// wait is the time from sending the request until tollgate's routing
	// or rejection answer: the queue wait plus the ext_proc round trips.
	wait time.Duration
	// endpoint is the worker address the request was routed to.
	endpoint string
	// gateway is the reqSpec's.
	gateway int
	// sent is when the request was sent, since the scenario started; only
	// the scenarios that need it set it.
	sent time.Duration
}

// recorder collects completions in the order the client saw them end. It
// is safe for concurrent use.
type recorder struct {
	// start is the origin of completion times; it may be reset only
	// before the recorder is shared.
	start time.Time

	// mu guards the fields below it.
	mu     sync.Mutex
	list   []completion
	counts []int // per class
}

func newRecorder(classes int) *recorder {
	return &recorder{start: time.Now(), counts: make([]int, classes)}
}

func (r *recorder) add(c completion) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.at = time.Since(r.start)
	r.list = append(r.list, c)
	r.counts[c.class]++
}

// snapshot returns the completions per class so far.
func (r *recorder) snapshot() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.counts)
}

// completions returns a copy of every completion, in completion order.
func (r *recorder) completions() []completion {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.list)
}

// send sends one request through the simulated Envoy and records how it
// ended. It fails only when the client gave up (ctx) or the stack closed.
func send(ctx context.Context, sim *envoysim.Sim, rec *recorder, spec *reqSpec) (*envoysim.Response, error) {
	resp, err := sim.Do(ctx, spec.request())
	if err != nil {
		return nil, fmt.Errorf("demo: request %s: %w", spec.id, err)
	}
	rec.add(completion{
		class:    spec.class,
		outcome:  classify(resp),
		status:   resp.Status,
		wait:     resp.Timings.Decision,
		endpoint: resp.Endpoint,
		gateway:  spec.gateway,
	})
	return resp, nil
}

// percentile returns the nearest-rank p-quantile (0 < p <= 1) of ds, or 0
// for none. ds is sorted in place.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(p*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// series turns completions into one cumulative series per class: the
// points (t, n) at which class c reached n completions.
func series(list []completion, names []string, colors []string) []Series {
	return seriesBy(list, func(c completion) int { return c.class }, names, colors)
}

// seriesBy turns completions into one cumulative series per key: the
// points (t, n) at which completions of key k reached n.
func seriesBy(list []completion, key func(completion) int, names []string, colors []string) []Series {
	out := make([]Series, len(names))
	for i, n := range names {
		out[i] = Series{Name: n, Color: colors[i%len(colors)], Points: []Point{{0, 0}}}
	}
	for _, c := range list {
		s := &out[key(c)]
		s.Points = append(s.Points, Point{X: c.at.Seconds(), Y: float64(len(s.Points))})
	}
	return out
}
