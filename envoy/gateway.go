package envoy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	"k8s.io/apimachinery/pkg/api/resource"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

// GatewayPolicies are the Envoy Gateway objects that put tollgate in front
// of an HTTPRoute.
type GatewayPolicies struct {
	Extension []*egv1a1.EnvoyExtensionPolicy
	Backend   []*egv1a1.BackendTrafficPolicy
	Client    []*egv1a1.ClientTrafficPolicy
}

// Decode decodes one YAML document strictly (unknown fields and duplicate
// keys are errors) and adds it to g by kind.
func (g *GatewayPolicies) Decode(doc []byte) error {
	apiVersion, kind, err := PeekKind(doc)
	if err != nil {
		return err
	}
	if want := egv1a1.GroupVersion.String(); apiVersion != want {
		return fmt.Errorf("%s has apiVersion %q; want %s", kind, apiVersion, want)
	}
	switch kind {
	case egv1a1.KindEnvoyExtensionPolicy:
		return decodeInto(doc, &g.Extension)
	case egv1a1.KindBackendTrafficPolicy:
		return decodeInto(doc, &g.Backend)
	case egv1a1.KindClientTrafficPolicy:
		return decodeInto(doc, &g.Client)
	default:
		return fmt.Errorf("kind %q is not one of tollgate's Envoy Gateway policies", kind)
	}
}

func decodeInto[T any](doc []byte, list *[]*T) error {
	v := new(T)
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		return fmt.Errorf("decode %T: %w", v, err)
	}
	*list = append(*list, v)
	return nil
}

// gatewayDuration matches the Gateway API duration format (GEP-2257).
var gatewayDuration = regexp.MustCompile(`^([0-9]{1,5}(h|m|s|ms)){1,4}$`)

// parseDuration parses a Gateway API duration; nil means unset.
func parseDuration(d *gwapiv1.Duration) (time.Duration, bool, error) {
	if d == nil {
		return 0, false, nil
	}
	if !gatewayDuration.MatchString(string(*d)) {
		return 0, true, fmt.Errorf("%q is not a Gateway API duration", *d)
	}
	v, err := time.ParseDuration(string(*d))
	return v, true, err
}

// checkGatewayTimer is checkTimer for a Gateway API duration.
func checkGatewayTimer(p *problems, where, field string, d *gwapiv1.Duration, unset, longest time.Duration) {
	v, set, err := parseDuration(d)
	if err != nil {
		p.addf(where, "%s: %v", field, err)
		return
	}
	how := ""
	if !set {
		v, how = unset, " (unset, the default)"
	}
	if v != 0 && v <= longest {
		p.addf(where, "%s is %v%s; want 0 (disabled) or more than the longest queue wait %v", field, v, how, longest)
	}
}

// CheckGateway checks that the policies together wire tollgate in: the
// extension policy runs tollgate fail-closed with the modes it needs and a
// message timeout above the longest queue wait, the backend policy routes
// by DestinationHeader to the same routes, and the client policy gives the
// listener room for BUFFERED bodies and timers that outlast queueing.
func (g *GatewayPolicies) CheckGateway(n Needs) error {
	var p problems
	longest := n.LongestQueueWait
	if len(g.Extension) == 0 || len(g.Backend) == 0 || len(g.Client) == 0 {
		p.addf("envoy gateway", "want at least one each of EnvoyExtensionPolicy, BackendTrafficPolicy and ClientTrafficPolicy; got %d, %d, %d",
			len(g.Extension), len(g.Backend), len(g.Client))
	}
	routes := map[string]bool{}
	for _, e := range g.Extension {
		where := "EnvoyExtensionPolicy " + e.Namespace + "/" + e.Name
		p.add(checkTargets(where, e.Spec.TargetRefs)...)
		for _, t := range e.Spec.TargetRefs {
			routes[e.Namespace+"/"+string(t.Kind)+"/"+string(t.Name)] = true
		}
		if len(e.Spec.ExtProc) != 1 {
			p.addf(where, "has %d extProc entries; want 1", len(e.Spec.ExtProc))
		}
		for i := range e.Spec.ExtProc {
			p.add(checkGatewayExtProc(fmt.Sprintf("%s: extProc[%d]", where, i), &e.Spec.ExtProc[i], n)...)
		}
	}
	for _, b := range g.Backend {
		where := "BackendTrafficPolicy " + b.Namespace + "/" + b.Name
		p.add(checkTargets(where, b.Spec.TargetRefs)...)
		for _, t := range b.Spec.TargetRefs {
			if !routes[b.Namespace+"/"+string(t.Kind)+"/"+string(t.Name)] {
				p.addf(where, "targets %s %s, which no EnvoyExtensionPolicy sends through tollgate", t.Kind, t.Name)
			}
		}
		p.add(checkGatewayBackend(where, &b.Spec.ClusterSettings, longest)...)
	}
	for _, c := range g.Client {
		where := "ClientTrafficPolicy " + c.Namespace + "/" + c.Name
		p.add(checkTargets(where, c.Spec.TargetRefs)...)
		if got := c.Spec.Connection.BufferLimit; got == nil || got.Cmp(*resource.NewQuantity(MinBodyBufferBytes, resource.BinarySI)) < 0 {
			p.addf(where, "connection.bufferLimit is %v (32Ki when unset); want at least %d bytes so BUFFERED bodies fit", got, MinBodyBufferBytes)
		}
		var http *egv1a1.HTTPClientTimeout
		if c.Spec.Timeout != nil {
			http = c.Spec.Timeout.HTTP
		}
		if http == nil {
			http = new(egv1a1.HTTPClientTimeout)
		}
		checkGatewayTimer(&p, where, "timeout.http.streamIdleTimeout", http.StreamIdleTimeout, 5*time.Minute, longest)
		checkGatewayTimer(&p, where, "timeout.http.requestReceivedTimeout", http.RequestReceivedTimeout, 0, longest)
	}
	return p.err()
}

func checkTargets(where string, refs []gwapiv1.LocalPolicyTargetReferenceWithSectionName) []error {
	if len(refs) == 0 {
		return []error{fmt.Errorf("%s: targetRefs is empty", where)}
	}
	return nil
}

func checkGatewayExtProc(where string, x *egv1a1.ExtProc, n Needs) []error {
	var p problems
	longest := n.LongestQueueWait
	if len(x.BackendRefs) == 0 {
		p.addf(where, "backendRefs is empty")
	}
	for i, r := range x.BackendRefs {
		if r.Port == nil {
			p.addf(where, "backendRefs[%d] has no port (tollgate's gRPC port is 9002)", i)
		}
	}
	if x.FailOpen != nil && *x.FailOpen {
		p.addf(where, "failOpen must be false: failing open bypasses admission")
	}
	if x.ShadowMode != nil && *x.ShadowMode {
		p.addf(where, "shadowMode must be false: tollgate must hold and route requests")
	}
	if x.StatusOnError == nil || *x.StatusOnError != 503 {
		p.addf(where, "statusOnError must be 503 (500 when unset)")
	}
	// Envoy Gateway has no max_message_timeout, so messageTimeout alone
	// must outlast the queue.
	mt, set, err := parseDuration(x.MessageTimeout)
	switch {
	case err != nil:
		p.addf(where, "messageTimeout: %v", err)
	case !set:
		p.addf(where, "messageTimeout is unset (200ms); want more than the longest queue wait %v", longest)
	case mt <= longest:
		p.addf(where, "messageTimeout is %v; want more than the longest queue wait %v", mt, longest)
	}
	pm := x.ProcessingMode
	if pm == nil || pm.Request == nil || pm.Request.Body == nil ||
		(*pm.Request.Body != egv1a1.BufferedExtProcBodyProcessingMode && *pm.Request.Body != egv1a1.FullDuplexStreamedExtBodyProcessingMode) {
		p.addf(where, "processingMode.request.body must be Buffered or FullDuplexStreamed (tollgate reads the JSON body)")
	}
	if pm == nil || pm.Response == nil || pm.Response.Body == nil || *pm.Response.Body != egv1a1.StreamedExtProcBodyProcessingMode {
		p.addf(where, "processingMode.response.body must be Streamed (tollgate watches for the first token and the end of stream)")
	}
	if n.SourceAddress && (pm == nil || pm.Request == nil || !slices.Contains(pm.Request.Attributes, SourceAddressAttribute)) {
		p.addf(where, "processingMode.request.attributes must list %s: tollgate reads the client address of ip: tenants from it (--client-ip-source source-address, the default); list it, or run tollgate with --client-ip-source x-forwarded-for",
			SourceAddressAttribute)
	}
	if pm != nil && pm.AllowModeOverride {
		p.addf(where, "processingMode.allowModeOverride must be false")
	}
	var writable []string
	if x.Metadata != nil {
		writable = x.Metadata.WritableNamespaces
	}
	if !slices.Contains(writable, LBNamespace) {
		p.addf(where, "metadata.writableNamespaces must list %s", LBNamespace)
	}
	for _, ns := range writable {
		if strings.HasPrefix(ns, "envoy.filters.http") {
			p.addf(where, "metadata.writableNamespaces may not list %s", ns)
		}
	}
	if x.BackendSettings == nil {
		p.addf(where, "backendSettings.circuitBreaker is unset (1024 concurrent streams); want at least %d", MinCircuitBreaker)
	} else {
		p.add(checkGatewayCircuitBreaker(where+": backendSettings", x.BackendSettings.CircuitBreaker)...)
	}
	return p
}

func checkGatewayBackend(where string, cs *egv1a1.ClusterSettings, longest time.Duration) []error {
	var p problems
	lb := cs.LoadBalancer
	found := false
	if lb != nil && lb.EndpointOverride != nil {
		for _, f := range lb.EndpointOverride.ExtractFrom {
			found = found || (f.Header != nil && strings.EqualFold(*f.Header, DestinationHeader))
		}
	}
	if !found {
		p.addf(where, "loadBalancer.endpointOverride.extractFrom must read header %s", DestinationHeader)
	}
	if cs.Retry != nil && (cs.Retry.NumRetries == nil || *cs.Retry.NumRetries > 0) {
		p.addf(where, "retry allows retries; want none (a retry resends an admitted request)")
	}
	var rt *gwapiv1.Duration
	if cs.Timeout != nil && cs.Timeout.HTTP != nil {
		rt = cs.Timeout.HTTP.RequestTimeout
	}
	checkGatewayTimer(&p, where, "timeout.http.requestTimeout", rt, 15*time.Second, longest)
	p.add(checkGatewayCircuitBreaker(where, cs.CircuitBreaker)...)
	return p
}

func checkGatewayCircuitBreaker(where string, cb *egv1a1.CircuitBreaker) []error {
	var p problems
	if cb == nil {
		cb = new(egv1a1.CircuitBreaker)
	}
	for _, v := range []struct {
		name string
		val  *int64
	}{
		{"maxConnections", cb.MaxConnections},
		{"maxPendingRequests", cb.MaxPendingRequests},
		{"maxParallelRequests", cb.MaxParallelRequests},
	} {
		if v.val == nil || *v.val < MinCircuitBreaker {
			p.addf(where, "circuitBreaker.%s is below %d (1024 when unset)", v.name, MinCircuitBreaker)
		}
	}
	return p
}
