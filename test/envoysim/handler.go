package envoysim

import (
	"errors"
	"io"
	"net"
	"net/http"
)

// Handler returns an http.Handler that makes the Sim a gateway: each incoming
// request goes through the ext_proc server and the chosen upstream, and the
// response is streamed back as it arrives (each upstream chunk is flushed, so
// server-sent events reach the client live). A client that goes away is a
// downstream disconnect. A stream that must be reset after its response
// started aborts the connection.
//
// The request body is read in full first (up to Config.MaxRequestBodyBytes,
// else 413), which is what Envoy holds while the header message is
// outstanding.
func (s *Sim) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

func (s *Sim) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, s.cfg.maxRequestBodyIn)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, "payload too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "cannot read request body", http.StatusBadRequest)
		return
	}
	req := Request{
		Method:     r.Method,
		Path:       r.URL.RequestURI(),
		Host:       r.Host,
		Scheme:     "http",
		Header:     r.Header.Clone(),
		Body:       body,
		Trailer:    r.Trailer.Clone(),
		RemoteAddr: r.RemoteAddr,
	}
	if r.TLS != nil {
		req.Scheme = "https"
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		req.LocalAddr = a.String()
	}
	req.Header.Del("Trailer")
	if err := req.validate(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !s.acquire() {
		http.Error(w, "gateway is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer s.release()
	x := s.newExchange(r.Context(), &req, &writerSink{w: w, rc: http.NewResponseController(w)})
	x.run()
	if x.res.reset {
		panic(http.ErrAbortHandler)
	}
}

// readBody returns nil for a request without a body and the (possibly empty)
// body otherwise.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
		return nil, nil
	}
	return io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
}

// writerSink writes the response to a real client, flushing every part.
type writerSink struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s *writerSink) writeHeader(status int, h http.Header) {
	dst := s.w.Header()
	for k, vs := range h {
		dst[k] = vs
	}
	s.w.WriteHeader(status)
	_ = s.rc.Flush() // a failed flush means the client left; the context says so
}

func (s *writerSink) write(p []byte) {
	if _, err := s.w.Write(p); err == nil {
		_ = s.rc.Flush()
	}
}

func (s *writerSink) finish(trailer http.Header) {
	for k, vs := range trailer {
		for _, v := range vs {
			s.w.Header().Add(http.TrailerPrefix+k, v)
		}
	}
}
