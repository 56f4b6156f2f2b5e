package envoy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// problems collects the findings of one check, each prefixed with where.
type problems []error

func (p *problems) addf(where, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...)))
}

func (p *problems) add(errs ...error) { *p = append(*p, errs...) }

func (p problems) err() error { return errors.Join(p...) }

// checkTimer requires a timer that counts queue time to be disabled (0) or
// longer than longest. unset is the value Envoy uses when d is nil.
func checkTimer(p *problems, where, field string, d *durationpb.Duration, unset, longest time.Duration) {
	v, how := unset, " (unset, Envoy's default)"
	if d != nil {
		v, how = d.AsDuration(), ""
	}
	if v != 0 && v <= longest {
		p.addf(where, "%s is %v%s; want 0 (disabled) or more than the longest queue wait %v", field, v, how, longest)
	}
}

// CheckBootstrap applies Envoy's load-time rules and the requirements n of
// the tollgate behind it to a decoded standalone bootstrap.
func CheckBootstrap(b *bootstrapv3.Bootstrap, n Needs) error {
	var p problems
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		if _, dup := clusters[c.GetName()]; dup {
			p.addf("cluster "+c.GetName(), "defined twice")
		}
		clusters[c.GetName()] = c
		p.add(CheckCluster(c)...)
	}
	extProcs := 0
	for _, l := range b.GetStaticResources().GetListeners() {
		for i, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm, err := Unpack[*hcmv3.HttpConnectionManager](f.GetTypedConfig())
				if err != nil {
					continue // not an HCM
				}
				where := fmt.Sprintf("listener %s: filter_chains[%d]: %s", l.GetName(), i, f.GetName())
				count := countFilter(hcm.GetHttpFilters(), extProcFilter)
				if count == 0 {
					continue
				}
				extProcs += count
				if l.GetPerConnectionBufferLimitBytes().GetValue() < MinBodyBufferBytes {
					p.addf("listener "+l.GetName(), "per_connection_buffer_limit_bytes is %d; want at least %d so BUFFERED bodies fit",
						l.GetPerConnectionBufferLimitBytes().GetValue(), MinBodyBufferBytes)
				}
				p.add(checkHCM(where, hcm, clusters, n)...)
			}
		}
	}
	if extProcs == 0 {
		p.addf("bootstrap", "no listener has an %s filter", extProcFilter)
	}
	return p.err()
}

func countFilter(fs []*hcmv3.HttpFilter, name string) int {
	n := 0
	for _, f := range fs {
		if f.GetName() == name {
			n++
		}
	}
	return n
}

// checkHCM checks one HTTP connection manager that runs tollgate: filter
// order, the ext_proc filter and its cluster, the timers and the routes.
func checkHCM(where string, hcm *hcmv3.HttpConnectionManager, clusters map[string]*clusterv3.Cluster, n Needs) []error {
	var p problems
	longest := n.LongestQueueWait
	p.add(CheckHCMTimers(where, hcm, longest)...)
	p.add(CheckLocalReplyConfig(where, hcm.GetLocalReplyConfig())...)
	p.add(CheckFilterOrder(where, hcm.GetHttpFilters())...)
	for _, f := range hcm.GetHttpFilters() {
		if f.GetName() != extProcFilter {
			continue
		}
		ep, err := Unpack[*extprocv3.ExternalProcessor](f.GetTypedConfig())
		if err != nil {
			p.addf(where+": "+extProcFilter, "%v", err)
			continue
		}
		p.add(CheckExtProc(where+": "+extProcFilter, ep, n)...)
		if name := ep.GetGrpcService().GetEnvoyGrpc().GetClusterName(); name != "" {
			c, ok := clusters[name]
			if !ok {
				p.addf(where+": "+extProcFilter, "grpc_service cluster %q is not defined", name)
			} else {
				p.add(CheckExtProcCluster(c)...)
			}
		}
	}
	rc := hcm.GetRouteConfig()
	if rc == nil {
		p.addf(where, "route_config must be inline so its routes can be checked")
	}
	for _, vh := range rc.GetVirtualHosts() {
		vwhere := where + ": virtual_host " + vh.GetName()
		p.add(checkRetries(vwhere, vh.GetRetryPolicy())...)
		for i, r := range vh.GetRoutes() {
			rwhere := fmt.Sprintf("%s: routes[%d]", vwhere, i)
			p.add(CheckRoute(rwhere, r, longest)...)
			if name := r.GetRoute().GetCluster(); name != "" {
				c, ok := clusters[name]
				switch {
				case !ok:
					p.addf(rwhere, "cluster %q is not defined", name)
				case c.GetType() != clusterv3.Cluster_ORIGINAL_DST:
					p.addf(rwhere, "cluster %q is %v; want the ORIGINAL_DST cluster that reads %s", name, c.GetType(), DestinationHeader)
				}
			}
		}
	}
	return p
}

// CheckHCMTimers requires every HCM timer that counts queue time to
// outlast it: stream_idle_timeout (default 5 min), request_timeout and
// max_stream_duration (both off by default).
func CheckHCMTimers(where string, hcm *hcmv3.HttpConnectionManager, longest time.Duration) []error {
	var p problems
	checkTimer(&p, where, "stream_idle_timeout", hcm.GetStreamIdleTimeout(), 5*time.Minute, longest)
	checkTimer(&p, where, "request_timeout", hcm.GetRequestTimeout(), 0, longest)
	checkTimer(&p, where, "common_http_protocol_options.max_stream_duration",
		hcm.GetCommonHttpProtocolOptions().GetMaxStreamDuration(), 0, longest)
	return p
}

// CheckFilterOrder requires header_mutation (stripping a client-sent
// DestinationHeader), then exactly one ext_proc, then the router, last.
func CheckFilterOrder(where string, fs []*hcmv3.HttpFilter) []error {
	var p problems
	idx := func(name string) int {
		return slices.IndexFunc(fs, func(f *hcmv3.HttpFilter) bool { return f.GetName() == name })
	}
	hm, ep, rt := idx(headerMutationFilter), idx(extProcFilter), idx(routerFilter)
	if n := countFilter(fs, extProcFilter); n != 1 {
		p.addf(where, "has %d %s filters; want exactly 1", n, extProcFilter)
	}
	switch {
	case rt < 0:
		p.addf(where, "has no %s filter", routerFilter)
	case rt != len(fs)-1:
		p.addf(where, "%s must be the last HTTP filter", routerFilter)
	case ep > rt:
		p.addf(where, "%s must come before %s", extProcFilter, routerFilter)
	}
	if hm < 0 || hm > ep {
		p.addf(where, "needs a %s filter before %s that removes a client-sent %s", headerMutationFilter, extProcFilter, DestinationHeader)
	} else {
		p.add(CheckHeaderStrip(where+": "+headerMutationFilter, fs[hm])...)
	}
	return p
}

// CheckHeaderStrip requires a header_mutation filter that removes
// DestinationHeader from every request.
func CheckHeaderStrip(where string, f *hcmv3.HttpFilter) []error {
	hm, err := Unpack[*headermutationv3.HeaderMutation](f.GetTypedConfig())
	if err != nil {
		return []error{fmt.Errorf("%s: %w", where, err)}
	}
	for _, m := range hm.GetMutations().GetRequestMutations() {
		if strings.EqualFold(m.GetRemove(), DestinationHeader) {
			return nil
		}
	}
	return []error{fmt.Errorf("%s: request_mutations do not remove %s", where, DestinationHeader)}
}

// CheckExtProc applies Envoy's load-time rules for an ext_proc filter and
// tollgate's requirements: gRPC, fail closed with 503, BUFFERED or
// FULL_DUPLEX_STREAMED request bodies, response headers sent and body
// streamed with send_body_without_waiting_for_header_response, the
// envoy.lb namespace, the source.address attribute when tollgate reads it,
// and a message timer that can outlast the longest queue wait.
func CheckExtProc(where string, ep *extprocv3.ExternalProcessor, n Needs) []error {
	var p problems
	grpc, http := ep.GetGrpcService() != nil, ep.GetHttpService() != nil
	if grpc == http {
		p.addf(where, "exactly one of grpc_service and http_service must be set")
	}
	if !grpc {
		p.addf(where, "tollgate is a gRPC ext_proc server; set grpc_service")
	}
	if ep.GetDisableClearRouteCache() && ep.GetRouteCacheAction() != extprocv3.ExternalProcessor_DEFAULT {
		p.addf(where, "disable_clear_route_cache and route_cache_action are mutually exclusive")
	}
	if ep.GetFailureModeAllow() {
		p.addf(where, "failure_mode_allow must be false: failing open bypasses admission and may route to a client-chosen address")
	}
	if ep.GetObservabilityMode() {
		p.addf(where, "observability_mode must be false: tollgate must hold and route requests")
	}
	if code := ep.GetStatusOnError().GetCode(); code != 503 {
		p.addf(where, "status_on_error is %d; want 503 (ServiceUnavailable), the status a preempted or unscheduled request gets", code)
	}
	if !slices.Contains(ep.GetMetadataOptions().GetReceivingNamespaces().GetUntyped(), LBNamespace) {
		p.addf(where, "metadata_options.receiving_namespaces.untyped must list %s, or Envoy drops tollgate's routing metadata", LBNamespace)
	}
	if n.SourceAddress && !slices.Contains(ep.GetRequestAttributes(), SourceAddressAttribute) {
		p.addf(where, "request_attributes must list %s: tollgate reads the client address of ip: tenants from it (--client-ip-source source-address, the default), and Envoy sends only listed attributes, so every unauthenticated client would be one tenant; list it, or run tollgate with --client-ip-source x-forwarded-for",
			SourceAddressAttribute)
	}
	if !ep.GetSendBodyWithoutWaitingForHeaderResponse() {
		p.addf(where, "send_body_without_waiting_for_header_response must be true: without it tollgate cannot hold a streamed response's headers, and a victim preempted before its first token gets a reset instead of the 503")
	}
	p.add(checkProcessingMode(where, ep, n.LongestQueueWait)...)
	return p
}

func checkProcessingMode(where string, ep *extprocv3.ExternalProcessor, longest time.Duration) []error {
	var p problems
	pm := ep.GetProcessingMode()
	if pm == nil {
		p.addf(where, "processing_mode is unset; tollgate needs request bodies and response bodies")
		return p
	}
	send := func(m extprocv3.ProcessingMode_HeaderSendMode) bool {
		return m == extprocv3.ProcessingMode_SEND || m == extprocv3.ProcessingMode_DEFAULT
	}
	skip := func(m extprocv3.ProcessingMode_HeaderSendMode) bool {
		return m == extprocv3.ProcessingMode_SKIP || m == extprocv3.ProcessingMode_DEFAULT
	}
	if !send(pm.GetRequestHeaderMode()) {
		p.addf(where, "processing_mode.request_header_mode is %v; want SEND", pm.GetRequestHeaderMode())
	}
	if !send(pm.GetResponseHeaderMode()) {
		p.addf(where, "processing_mode.response_header_mode is %v; want SEND (tollgate records the response status)", pm.GetResponseHeaderMode())
	}
	fullDuplex := pm.GetRequestBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
	switch pm.GetRequestBodyMode() {
	case extprocv3.ProcessingMode_BUFFERED, extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED:
	default:
		p.addf(where, "processing_mode.request_body_mode is %v; want BUFFERED or FULL_DUPLEX_STREAMED (tollgate reads the JSON body)", pm.GetRequestBodyMode())
	}
	if pm.GetResponseBodyMode() != extprocv3.ProcessingMode_STREAMED {
		p.addf(where, "processing_mode.response_body_mode is %v; want STREAMED (tollgate watches for the first token and the end of stream)", pm.GetResponseBodyMode())
	}
	// Envoy refuses FULL_DUPLEX_STREAMED without trailers sent. Only 1.35
	// refuses it with fail-open; tollgate needs fail-closed anyway.
	for _, d := range []struct {
		dir     string
		body    extprocv3.ProcessingMode_BodySendMode
		trailer extprocv3.ProcessingMode_HeaderSendMode
	}{
		{"request", pm.GetRequestBodyMode(), pm.GetRequestTrailerMode()},
		{"response", pm.GetResponseBodyMode(), pm.GetResponseTrailerMode()},
	} {
		if d.body == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED {
			if d.trailer != extprocv3.ProcessingMode_SEND {
				p.addf(where, "processing_mode.%s_trailer_mode is %v; FULL_DUPLEX_STREAMED requires SEND", d.dir, d.trailer)
			}
			if ep.GetFailureModeAllow() {
				p.addf(where, "FULL_DUPLEX_STREAMED with failure_mode_allow true: Envoy 1.35 rejects it, later releases fail open (bypassing tollgate) until the first body chunk; want false")
			}
		} else if !skip(d.trailer) {
			p.addf(where, "processing_mode.%s_trailer_mode is %v; want SKIP (tollgate does not process trailers outside FULL_DUPLEX_STREAMED)", d.dir, d.trailer)
		}
	}
	if fullDuplex {
		return p // Envoy runs no message timer on a FULL_DUPLEX_STREAMED direction.
	}
	timer := 200 * time.Millisecond
	if ep.GetMessageTimeout() != nil {
		timer = ep.GetMessageTimeout().AsDuration()
	}
	if ext := ep.GetMaxMessageTimeout().AsDuration(); ext > timer {
		timer = ext
	}
	if timer <= longest {
		p.addf(where, "neither message_timeout nor max_message_timeout exceeds the longest queue wait %v (longest is %v); Envoy would answer 504 to a request still queued",
			longest, timer)
	}
	return p
}

// CheckLocalReplyConfig requires a local_reply_config that leaves
// tollgate's answers alone: no body_format, which would rewrite the JSON
// body of every ImmediateResponse tollgate sends (SMG's preemption answer
// included).
func CheckLocalReplyConfig(where string, lrc *hcmv3.LocalReplyConfig) []error {
	if lrc.GetBodyFormat() != nil {
		return []error{fmt.Errorf("%s: local_reply_config: body_format must be unset, or it rewrites tollgate's own JSON answers", where)}
	}
	return nil
}

// CheckRoute requires a route's own timers to outlast the longest queue
// wait and forbids retries, which would resend an admitted request to the
// same worker without a new admission.
func CheckRoute(where string, r *routev3.Route, longest time.Duration) []error {
	var p problems
	ra := r.GetRoute()
	if ra == nil {
		return nil // redirects and direct responses never reach a worker
	}
	checkTimer(&p, where, "route.timeout", ra.GetTimeout(), 15*time.Second, longest)
	if ra.GetIdleTimeout() != nil {
		checkTimer(&p, where, "route.idle_timeout", ra.GetIdleTimeout(), 0, longest)
	}
	p.add(checkRetries(where, ra.GetRetryPolicy())...)
	return p
}

func checkRetries(where string, rp *routev3.RetryPolicy) []error {
	if rp == nil {
		return nil
	}
	if n := rp.GetNumRetries(); n == nil || n.GetValue() > 0 {
		return []error{fmt.Errorf("%s: retry_policy allows retries (num_retries %d, default 1 when unset); want none", where, n.GetValue())}
	}
	return nil
}

// CheckCluster applies Envoy's load-time ORIGINAL_DST rules to any
// cluster, and tollgate's requirements to an ORIGINAL_DST one: the host
// comes from DestinationHeader (or the same key of envoy.lb metadata) and
// the circuit breakers are raised.
func CheckCluster(c *clusterv3.Cluster) []error {
	if c.GetType() != clusterv3.Cluster_ORIGINAL_DST {
		return nil
	}
	var p problems
	where := "cluster " + c.GetName()
	if c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED {
		p.addf(where, "ORIGINAL_DST requires lb_policy CLUSTER_PROVIDED, not %v", c.GetLbPolicy())
	}
	if c.GetLoadAssignment() != nil {
		p.addf(where, "ORIGINAL_DST must not have a load_assignment")
	}
	od := c.GetOriginalDstLbConfig()
	if od.GetHttpHeaderName() != "" && !od.GetUseHttpHeader() {
		p.addf(where, "original_dst_lb_config.http_header_name requires use_http_header true")
	}
	byHeader := od.GetUseHttpHeader() && strings.EqualFold(od.GetHttpHeaderName(), DestinationHeader)
	mk := od.GetMetadataKey()
	byMetadata := mk.GetKey() == LBNamespace && len(mk.GetPath()) == 1 && mk.GetPath()[0].GetKey() == DestinationHeader
	if !byHeader && !byMetadata {
		p.addf(where, "original_dst_lb_config must take the host from header %s (use_http_header true) or metadata %s/%s",
			DestinationHeader, LBNamespace, DestinationHeader)
	}
	p.add(checkCircuitBreakers(where, c)...)
	return p
}

// CheckExtProcCluster requires the cluster tollgate's ext_proc gRPC
// streams use to speak HTTP/2 and to allow many concurrent streams.
func CheckExtProcCluster(c *clusterv3.Cluster) []error {
	var p problems
	where := "cluster " + c.GetName()
	h2 := c.GetHttp2ProtocolOptions() != nil //nolint:staticcheck // the deprecated field still selects HTTP/2
	if a, ok := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; ok {
		opts, err := Unpack[*httpv3.HttpProtocolOptions](a)
		if err != nil {
			p.addf(where, "typed_extension_protocol_options: %v", err)
		} else if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil {
			h2 = true
		}
	}
	if !h2 {
		p.addf(where, "the ext_proc cluster must use HTTP/2 (typed_extension_protocol_options explicit_http_config.http2_protocol_options)")
	}
	p.add(checkCircuitBreakers(where, c)...)
	return p
}

func checkCircuitBreakers(where string, c *clusterv3.Cluster) []error {
	var p problems
	for _, t := range c.GetCircuitBreakers().GetThresholds() {
		if t.GetPriority() != corev3.RoutingPriority_DEFAULT {
			continue
		}
		for _, v := range []struct {
			name string
			val  uint32
			set  bool
		}{
			{"max_connections", t.GetMaxConnections().GetValue(), t.GetMaxConnections() != nil},
			{"max_pending_requests", t.GetMaxPendingRequests().GetValue(), t.GetMaxPendingRequests() != nil},
			{"max_requests", t.GetMaxRequests().GetValue(), t.GetMaxRequests() != nil},
		} {
			if !v.set || v.val < MinCircuitBreaker {
				p.addf(where, "circuit_breakers %s is %d (default 1024 when unset); want at least %d", v.name, v.val, MinCircuitBreaker)
			}
		}
		return p
	}
	p.addf(where, "has no DEFAULT-priority circuit_breakers threshold; Envoy's default of 1024 caps concurrent requests (want at least %d)", MinCircuitBreaker)
	return p
}
