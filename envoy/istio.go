package envoy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	istionet "istio.io/api/networking/v1alpha3"
	istioclient "istio.io/client-go/pkg/apis/networking/v1alpha3"
	"sigs.k8s.io/yaml"
)

// typeMeta is the part of a Kubernetes object that says what it is.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// PeekKind returns the apiVersion and kind of one YAML document.
func PeekKind(doc []byte) (apiVersion, kind string, err error) {
	var tm typeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return "", "", fmt.Errorf("yaml: %w", err)
	}
	return tm.APIVersion, tm.Kind, nil
}

// DecodeEnvoyFilter decodes an Istio EnvoyFilter strictly. The object is
// decoded with unknown fields rejected; its spec is decoded again with
// protojson, because Istio's own JSON decoder ignores unknown spec fields.
// Patch values are free-form there; CheckEnvoyFilter decodes them.
func DecodeEnvoyFilter(doc []byte) (*istioclient.EnvoyFilter, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	var head struct {
		typeMeta
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(js, &head); err != nil {
		return nil, fmt.Errorf("decode EnvoyFilter: %w", err)
	}
	if head.APIVersion != "networking.istio.io/v1alpha3" || head.Kind != "EnvoyFilter" {
		return nil, fmt.Errorf("decode EnvoyFilter: got %s %s, want networking.istio.io/v1alpha3 EnvoyFilter", head.APIVersion, head.Kind)
	}
	ef := new(istioclient.EnvoyFilter)
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(ef); err != nil {
		return nil, fmt.Errorf("decode EnvoyFilter: %w", err)
	}
	spec := new(istionet.EnvoyFilter)
	if err := strictJSON.Unmarshal(head.Spec, spec); err != nil {
		return nil, fmt.Errorf("decode EnvoyFilter spec: %w", err)
	}
	proto.Reset(&ef.Spec)
	proto.Merge(&ef.Spec, spec)
	return ef, nil
}

// patchValue returns the Envoy message a patch of kind applyTo carries.
func patchValue(applyTo istionet.EnvoyFilter_ApplyTo) (proto.Message, error) {
	switch applyTo {
	case istionet.EnvoyFilter_HTTP_FILTER:
		return new(hcmv3.HttpFilter), nil
	case istionet.EnvoyFilter_NETWORK_FILTER:
		return new(listenerv3.Filter), nil
	case istionet.EnvoyFilter_LISTENER:
		return new(listenerv3.Listener), nil
	case istionet.EnvoyFilter_CLUSTER:
		return new(clusterv3.Cluster), nil
	case istionet.EnvoyFilter_HTTP_ROUTE:
		return new(routev3.Route), nil
	case istionet.EnvoyFilter_VIRTUAL_HOST:
		return new(routev3.VirtualHost), nil
	case istionet.EnvoyFilter_ROUTE_CONFIGURATION:
		return new(routev3.RouteConfiguration), nil
	default:
		return nil, fmt.Errorf("applyTo %v is not supported by this check", applyTo)
	}
}

// decodedPatch is one config patch with its value decoded.
type decodedPatch struct {
	where string
	patch *istionet.EnvoyFilter_EnvoyConfigObjectPatch
	value proto.Message
}

// CheckEnvoyFilter decodes every patch value of ef strictly into its Envoy
// type, validates it (fully for ADD and INSERT_* patches; MERGE values are
// partial, so only decoded), and checks that together the patches wire
// tollgate into an ingress gateway as the standalone bootstrap does.
func CheckEnvoyFilter(ef *istioclient.EnvoyFilter, n Needs) error {
	var p problems
	name := "EnvoyFilter " + ef.Namespace + "/" + ef.Name
	spec := &ef.Spec
	if len(spec.GetWorkloadSelector().GetLabels()) == 0 && len(spec.GetTargetRefs()) == 0 {
		p.addf(name, "has neither workloadSelector labels nor targetRefs, so it patches every proxy in its namespace")
	}
	var patches []decodedPatch
	for i, cp := range spec.GetConfigPatches() {
		where := fmt.Sprintf("%s: configPatches[%d] (%v %v)", name, i, cp.GetApplyTo(), cp.GetPatch().GetOperation())
		if ctx := cp.GetMatch().GetContext(); ctx != istionet.EnvoyFilter_GATEWAY {
			p.addf(where, "match.context is %v; want GATEWAY", ctx)
		}
		m, err := patchValue(cp.GetApplyTo())
		if err != nil {
			p.addf(where, "%v", err)
			continue
		}
		js, err := protojson.Marshal(cp.GetPatch().GetValue())
		if err != nil {
			p.addf(where, "patch.value: %v", err)
			continue
		}
		if err := strictJSON.Unmarshal(js, m); err != nil {
			p.addf(where, "patch.value: %v", err)
			continue
		}
		if cp.GetPatch().GetOperation() != istionet.EnvoyFilter_Patch_MERGE {
			if err := ValidateDeep(m); err != nil {
				p.addf(where, "patch.value: %v", err)
			}
		}
		patches = append(patches, decodedPatch{where, cp, m})
	}
	p.add(checkIstioFilters(name, patches, n)...)
	p.add(checkIstioRouting(name, patches, n.LongestQueueWait)...)
	return p.err()
}

// checkIstioFilters checks the HTTP filter inserts, the HCM merge and the
// listener merge.
func checkIstioFilters(name string, patches []decodedPatch, n Needs) []error {
	var p problems
	var chain []*hcmv3.HttpFilter
	hcms, listeners := 0, 0
	for _, dp := range patches {
		switch v := dp.value.(type) {
		case *hcmv3.HttpFilter:
			m := dp.patch.GetMatch().GetListener().GetFilterChain().GetFilter()
			if dp.patch.GetPatch().GetOperation() != istionet.EnvoyFilter_Patch_INSERT_BEFORE ||
				m.GetName() != "envoy.filters.network.http_connection_manager" || m.GetSubFilter().GetName() != routerFilter {
				p.addf(dp.where, "HTTP filters must be INSERT_BEFORE %s in envoy.filters.network.http_connection_manager", routerFilter)
			}
			chain = append(chain, v)
			if v.GetName() == extProcFilter {
				p.add(checkIstioExtProc(dp.where, v, n)...)
			}
		case *listenerv3.Filter:
			hcm, err := Unpack[*hcmv3.HttpConnectionManager](v.GetTypedConfig())
			if err != nil || dp.patch.GetPatch().GetOperation() != istionet.EnvoyFilter_Patch_MERGE {
				p.addf(dp.where, "want a MERGE of HttpConnectionManager settings (%v)", err)
				continue
			}
			hcms++
			p.add(CheckHCMTimers(dp.where, hcm, n.LongestQueueWait)...)
			p.add(CheckLocalReplyConfig(dp.where, hcm.GetLocalReplyConfig())...)
		case *listenerv3.Listener:
			listeners++
			if got := v.GetPerConnectionBufferLimitBytes().GetValue(); got < MinBodyBufferBytes {
				p.addf(dp.where, "per_connection_buffer_limit_bytes is %d; want at least %d so BUFFERED bodies fit", got, MinBodyBufferBytes)
			}
		}
	}
	// The inserts land before the router in patch order.
	chain = append(chain, &hcmv3.HttpFilter{Name: routerFilter})
	p.add(CheckFilterOrder(name+": HTTP_FILTER patches", chain)...)
	if hcms != 1 {
		p.addf(name, "has %d NETWORK_FILTER MERGE patches of the HCM; want 1 (its timers)", hcms)
	}
	if listeners != 1 {
		p.addf(name, "has %d LISTENER patches; want 1 raising per_connection_buffer_limit_bytes", listeners)
	}
	return p
}

// checkIstioExtProc checks the inserted ext_proc filter and the Istio
// cluster name it points at.
func checkIstioExtProc(where string, f *hcmv3.HttpFilter, n Needs) []error {
	ep, err := Unpack[*extprocv3.ExternalProcessor](f.GetTypedConfig())
	if err != nil {
		return []error{fmt.Errorf("%s: %w", where, err)}
	}
	errs := CheckExtProc(where, ep, n)
	// Istio names a Service's cluster outbound|PORT||HOST.
	cn := ep.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	parts := strings.Split(cn, "|")
	if len(parts) != 4 || parts[0] != "outbound" || parts[2] != "" || parts[3] == "" {
		errs = append(errs, fmt.Errorf("%s: grpc_service cluster %q is not an Istio outbound cluster name (outbound|PORT||HOST)", where, cn))
	} else if _, err := strconv.ParseUint(parts[1], 10, 16); err != nil {
		errs = append(errs, fmt.Errorf("%s: grpc_service cluster %q has a bad port", where, cn))
	}
	return errs
}

// checkIstioRouting checks the added ORIGINAL_DST cluster and the route
// merge that points at it.
func checkIstioRouting(name string, patches []decodedPatch, longest time.Duration) []error {
	var p problems
	var cluster string
	routes := 0
	for _, dp := range patches {
		if c, ok := dp.value.(*clusterv3.Cluster); ok {
			if dp.patch.GetPatch().GetOperation() != istionet.EnvoyFilter_Patch_ADD || c.GetType() != clusterv3.Cluster_ORIGINAL_DST {
				p.addf(dp.where, "want an ADD of an ORIGINAL_DST cluster")
				continue
			}
			if cluster != "" {
				p.addf(dp.where, "a second ORIGINAL_DST cluster")
			}
			cluster = c.GetName()
			p.add(CheckCluster(c)...)
		}
	}
	if cluster == "" {
		p.addf(name, "adds no ORIGINAL_DST cluster for the workers")
	}
	for _, dp := range patches {
		r, ok := dp.value.(*routev3.Route)
		if !ok {
			continue
		}
		routes++
		if dp.patch.GetPatch().GetOperation() != istionet.EnvoyFilter_Patch_MERGE {
			p.addf(dp.where, "want a MERGE into the gateway's inference route")
		}
		if dp.patch.GetMatch().GetRouteConfiguration().GetVhost().GetRoute().GetName() == "" {
			p.addf(dp.where, "match.routeConfiguration.vhost.route.name must name the inference route, or every route is redirected")
		}
		if got := r.GetRoute().GetCluster(); got != cluster {
			p.addf(dp.where, "route.cluster is %q; want the added ORIGINAL_DST cluster %q", got, cluster)
		}
		p.add(CheckRoute(dp.where, r, longest)...)
	}
	if routes == 0 {
		p.addf(name, "has no HTTP_ROUTE patch pointing a route at the ORIGINAL_DST cluster")
	}
	return p
}

// ExtProcOf returns the ext_proc filter configuration that ef inserts.
func ExtProcOf(ef *istioclient.EnvoyFilter) (*extprocv3.ExternalProcessor, error) {
	for _, cp := range ef.Spec.GetConfigPatches() {
		if cp.GetApplyTo() != istionet.EnvoyFilter_HTTP_FILTER {
			continue
		}
		js, err := protojson.Marshal(cp.GetPatch().GetValue())
		if err != nil {
			return nil, err
		}
		f := new(hcmv3.HttpFilter)
		if err := strictJSON.Unmarshal(js, f); err != nil {
			return nil, err
		}
		if f.GetName() == extProcFilter {
			return Unpack[*extprocv3.ExternalProcessor](f.GetTypedConfig())
		}
	}
	return nil, fmt.Errorf("EnvoyFilter %s/%s inserts no %s filter", ef.Namespace, ef.Name, extProcFilter)
}
