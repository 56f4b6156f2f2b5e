package extproc

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// abnormalLogInterval is the shortest time between two log lines about
// abnormal stream endings; the endings in between are counted and the
// count goes with the next line.
const abnormalLogInterval = time.Second

// streamEnds counts how Process streams end, by gRPC status code, and logs
// the abnormal ones (any code but OK: a half-close or a reset by Envoy ends
// a stream with OK), at most one line per abnormalLogInterval. Oversized and
// undecodable messages end a stream inside gRPC, before tollgate sees a
// message; this is where they leave a trace. Safe for concurrent use.
type streamEnds struct {
	total *prometheus.CounterVec
	log   *slog.Logger
	now   func() time.Time

	// mu guards last and suppressed.
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func newStreamEnds(reg prometheus.Registerer, log *slog.Logger, now func() time.Time) *streamEnds {
	e := &streamEnds{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_extproc_streams_total",
			Help: "ext_proc streams ended, by gRPC status code (OK for a normal end, including a reset by Envoy).",
		}, []string{"code"}),
		log: log,
		now: now,
	}
	reg.MustRegister(e.total)
	return e
}

// ended records a stream that Process ended with err (nil for OK).
func (e *streamEnds) ended(request uint64, err error) {
	code := status.Code(err)
	e.total.WithLabelValues(code.String()).Inc()
	if code == codes.OK {
		return
	}
	now := e.now()
	e.mu.Lock()
	if !e.last.IsZero() && now.Sub(e.last) < abnormalLogInterval {
		e.suppressed++
		e.mu.Unlock()
		return
	}
	suppressed := e.suppressed
	e.last, e.suppressed = now, 0
	e.mu.Unlock()
	e.log.Warn("ext_proc stream ended abnormally", "request", request, "code", code.String(), "error", err,
		"suppressed_since_last", suppressed)
}
