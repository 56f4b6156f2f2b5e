package envoysim

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
)

// destination is the ORIGINAL_DST host choice: the metadata key (request
// dynamic metadata; a list uses its first element), then the header (first
// value only). A value that is not a literal IP:port counts as
// original_dst_host_invalid and the next source is tried.
func (x *exchange) destination() (string, bool) {
	var candidates []string
	if x.cfg.metadataKey != "" {
		if ns := x.metadata[x.cfg.metadataNS]; ns != nil {
			if v, ok := ns.GetFields()[x.cfg.metadataKey]; ok {
				if l := v.GetListValue(); l != nil && len(l.GetValues()) > 0 {
					v = l.GetValues()[0]
				}
				candidates = append(candidates, v.GetStringValue())
			}
		}
	}
	if x.cfg.useHeader {
		if v, ok := x.dec.headers.get(x.cfg.routeHeader); ok {
			candidates = append(candidates, v)
		}
	}
	for _, c := range candidates {
		if x.cfg.fallbacks {
			var rest []string
			for _, e := range strings.Split(c, ",") {
				if ap, err := netip.ParseAddrPort(strings.TrimSpace(e)); err == nil && ap.Addr().Zone() == "" {
					rest = append(rest, ap.String())
				}
			}
			if len(rest) > 0 {
				x.retryHosts = rest[1:]
				return rest[0], true
			}
		} else if ap, err := netip.ParseAddrPort(c); err == nil && ap.Addr().Zone() == "" {
			return ap.String(), true
		}
		x.sim.stats.inc(statOriginalDstHostInvalid)
	}
	return "", false
}

// retryUpstream retries the next fallback endpoint after a connect
// failure (Route.Fallbacks). It reports whether it did.
func (x *exchange) retryUpstream(ev upstreamEvent) bool {
	var op *net.OpError
	if ev.started || len(x.retryHosts) == 0 || !errors.As(ev.err, &op) || op.Op != "dial" {
		return false
	}
	x.stopUpstream()
	x.sim.stats.inc(statUpstreamResets)
	addr := x.retryHosts[0]
	x.retryHosts = x.retryHosts[1:]
	x.endpoint = addr
	x.sim.stats.inc(statUpstreamRequests)
	x.up = x.sim.startUpstream(x.upstreamRequest(addr))
	return true
}

// route picks the upstream host and starts the upstream request, or answers
// 503 like a cluster without a host.
func (x *exchange) route() {
	if x.finished {
		return
	}
	addr, ok := x.destination()
	if !ok {
		x.sim.stats.inc(statNoHealthyUpstream)
		x.envoyReply(http.StatusServiceUnavailable, []byte("no healthy upstream"), "no_healthy_upstream")
		return
	}
	x.endpoint = addr
	req := x.upstreamRequest(addr)
	if x.hook(StageUpstreamRequest) {
		return
	}
	x.sim.stats.inc(statUpstreamRequests)
	x.sentUpstream = true
	x.up = x.sim.startUpstream(req)
}

// upstreamRequest builds the HTTP/1.1 request the router sends, from the
// mutated headers, body and trailers, and records it for the Response.
func (x *exchange) upstreamRequest(addr string) *http.Request {
	d := &x.dec
	get := func(k string) string { v, _ := d.headers.get(k); return v }
	path := get(":path")
	rawPath, query, _ := strings.Cut(path, "?")
	h := http.Header{}
	for _, e := range d.headers.entries {
		if strings.HasPrefix(e.key, ":") || e.key == "host" || e.key == "content-length" ||
			slices.Contains(hopByHop, e.key) {
			continue
		}
		h.Add(e.key, e.value)
	}
	var trailer http.Header
	if d.trailers != nil {
		trailer = d.trailers.httpHeader()
	}
	x.upstream = &UpstreamRequest{
		Method:    get(":method"),
		Path:      path,
		Authority: get(":authority"),
		Header:    h.Clone(),
		Body:      d.body,
		Trailer:   trailer.Clone(),
	}
	req := &http.Request{
		Method:     get(":method"),
		URL:        &url.URL{Scheme: "http", Host: addr, Opaque: rawPath, RawQuery: query},
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     h,
		Host:       get(":authority"),
		Trailer:    trailer,
	}
	switch {
	case trailer != nil:
		// Trailers need chunked encoding: an unknown length.
		req.Body = io.NopCloser(bytes.NewReader(d.body))
		req.ContentLength = -1
	case d.body != nil:
		req.Body = io.NopCloser(bytes.NewReader(d.body))
		req.ContentLength = int64(len(d.body))
		if req.ContentLength == 0 {
			req.Body = http.NoBody
		}
	default:
		req.Body = http.NoBody
	}
	return req
}

// upstreamEventKind tells what an upstreamEvent carries.
type upstreamEventKind int

const (
	upHeaders upstreamEventKind = iota + 1
	upData
	upEnd
	upFailed
)

// upstreamEvent is one step of the upstream response, delivered to the
// exchange's loop.
type upstreamEvent struct {
	kind    upstreamEventKind
	headers *headerMap // upHeaders
	noBody  bool       // upHeaders: the headers end the response
	data    []byte     // upData
	eos     bool       // upData: the chunk completes a content-length body
	trailer http.Header
	err     error
	started bool // upFailed: the response headers had arrived
}

// upstreamCall is an upstream request in flight, run by one goroutine.
type upstreamCall struct {
	cancel context.CancelFunc
	events chan upstreamEvent // unbuffered: the exchange paces the reads
	done   chan struct{}      // closed when the exchange stops listening
	exited chan struct{}
}

// startUpstream sends req and streams the response back as events.
func (s *Sim) startUpstream(req *http.Request) *upstreamCall {
	ctx, cancel := context.WithCancel(s.life)
	c := &upstreamCall{
		cancel: cancel,
		events: make(chan upstreamEvent),
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	go c.run(s.transport, req.WithContext(ctx))
	return c
}

func (c *upstreamCall) emit(ev upstreamEvent) bool {
	select {
	case c.events <- ev:
		return true
	case <-c.done:
		return false
	}
}

func (c *upstreamCall) run(rt http.RoundTripper, req *http.Request) {
	defer close(c.exited)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		c.emit(upstreamEvent{kind: upFailed, err: err})
		return
	}
	defer func() { _ = resp.Body.Close() }() // a close error changes nothing once read
	noBody := resp.ContentLength == 0 || req.Method == http.MethodHead ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	if !c.emit(upstreamEvent{kind: upHeaders, headers: responseHeaderMap(resp), noBody: noBody}) || noBody {
		return
	}
	// The HTTP/1 codec always ends a response with an empty
	// decodeData(end_stream=true), content-length or not
	// (http1/codec_impl.cc:1611-1636): no data chunk carries the end.
	buf := make([]byte, upstreamReadSize)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if !c.emit(upstreamEvent{kind: upData, data: bytes.Clone(buf[:n])}) {
				return
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			c.emit(upstreamEvent{kind: upEnd, trailer: resp.Trailer})
			return
		case err != nil:
			c.emit(upstreamEvent{kind: upFailed, err: err, started: true})
			return
		}
	}
}

// stopUpstream cancels the upstream call, if any, and waits for it.
func (x *exchange) stopUpstream() {
	if x.up == nil {
		return
	}
	x.up.cancel()
	close(x.up.done)
	<-x.up.exited
	x.up = nil
}

func (x *exchange) onUpstreamEvent(ev upstreamEvent) {
	switch ev.kind {
	case upHeaders:
		x.encodeHeaders(ev.headers, ev.noBody)
	case upData:
		x.encodeData(ev.data, ev.eos)
	case upEnd:
		x.encodeEnd(headerMapFromHTTP(ev.trailer))
	case upFailed:
		if x.retryUpstream(ev) {
			return
		}
		x.upstreamFailed(ev)
	}
	if ev.kind != upData || ev.eos {
		// After the headers of a body-less response, the end, a completing
		// chunk or a failure, the call has nothing more to say.
		if ev.kind != upHeaders || ev.noBody {
			x.stopUpstream()
		}
	}
}

// upstreamFailed: before response headers, Envoy's router answers 503; after
// them it resets the downstream stream.
func (x *exchange) upstreamFailed(ev upstreamEvent) {
	x.sim.stats.inc(statUpstreamResets)
	if !ev.started {
		reason := "remote_reset"
		var op *net.OpError
		if errors.As(ev.err, &op) && op.Op == "dial" {
			reason = "connection_failure"
		}
		x.envoyReply(http.StatusServiceUnavailable,
			[]byte("upstream connect error or disconnect/reset before headers. reset reason: "+strings.ReplaceAll(reason, "_", " ")),
			"upstream_reset_before_response_started{"+reason+"}")
		return
	}
	x.complete = true
	x.finishCall()
	x.closeStream()
	x.res.reset = true
	x.finished = true
}
