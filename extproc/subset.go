package extproc

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate/tollgate/extproc/answer"
)

// The endpoint picker protocol lets the data plane name the endpoints a
// request may go to: filter metadata namespace envoy.lb.subset_hint, key
// x-gateway-destination-endpoint-subset, in the request's metadata_context.
// When present, the picker MUST choose among them, and answer 503 when the
// list is empty or none of them is eligible.
const (
	subsetNamespace = "envoy.lb.subset_hint"
	subsetKey       = "x-gateway-destination-endpoint-subset"
	// MaxSubsetEntries bounds the entries of one subset hint.
	MaxSubsetEntries = 4096
	// maxSubsetEntryBytes bounds one entry (an IPv6 address with a port
	// fits in 47 bytes).
	maxSubsetEntryBytes = 256
)

// subset is a parsed endpoint subset hint. An entry with a port admits
// exactly that address and port; an entry without one admits every port of
// its address. Entries that are not IP addresses admit nothing (Envoy's
// ORIGINAL_DST cluster connects to IP:port only).
type subset struct {
	ports   map[netip.AddrPort]struct{}
	addrs   map[netip.Addr]struct{}
	entries int
	// and, when set, must admit a worker too (the test endpoint selection
	// narrows the data plane's subset).
	and *subset
}

func newSubset() *subset {
	return &subset{ports: map[netip.AddrPort]struct{}{}, addrs: map[netip.Addr]struct{}{}}
}

// admits reports whether the subset admits the worker at ap.
func (s *subset) admits(ap netip.AddrPort) bool {
	if s.and != nil && !s.and.admits(ap) {
		return false
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if _, ok := s.addrs[ap.Addr()]; ok {
		return true
	}
	_, ok := s.ports[ap]
	return ok
}

// String lists the subset's entries, for logs and answers.
func (s *subset) String() string {
	parts := make([]string, 0, len(s.ports)+len(s.addrs))
	for ap := range s.ports {
		parts = append(parts, ap.String())
	}
	for a := range s.addrs {
		parts = append(parts, a.String())
	}
	return strings.Join(parts, ",")
}

// subsetOf reads the subset hint of a request from its metadata_context. It
// returns nil when there is none (every worker is allowed), and a rejection
// (503) when the hint is empty, malformed or too large. The value is a list
// of strings or one comma-separated string; list entries may themselves be
// comma-separated. Entries are trimmed; empty ones are skipped.
func subsetOf(md *corev3.Metadata) (*subset, *answer.Rejection) {
	ns, ok := md.GetFilterMetadata()[subsetNamespace]
	if !ok {
		return nil, nil
	}
	v, ok := ns.GetFields()[subsetKey]
	if !ok {
		return nil, nil
	}
	s := newSubset()
	var err error
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		err = s.add(k.StringValue)
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			str, isString := e.GetKind().(*structpb.Value_StringValue)
			if !isString {
				err = fmt.Errorf("an entry of %s/%s is not a string", subsetNamespace, subsetKey)
				break
			}
			if err = s.add(str.StringValue); err != nil {
				break
			}
		}
	default:
		err = fmt.Errorf("%s/%s must be a list of strings or a comma-separated string", subsetNamespace, subsetKey)
	}
	switch {
	case err != nil:
		return nil, &answer.Rejection{Reason: answer.ReasonNoEndpoints, Message: "invalid endpoint subset hint: " + err.Error()}
	case s.entries == 0:
		return nil, &answer.Rejection{Reason: answer.ReasonNoEndpoints, Message: "the endpoint subset hint (" + subsetNamespace + "/" + subsetKey + ") is empty: no endpoint may serve the request"}
	}
	return s, nil
}

// add adds the comma-separated entries of list.
func (s *subset) add(list string) error {
	for e := range strings.SplitSeq(list, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if s.entries++; s.entries > MaxSubsetEntries {
			return fmt.Errorf("more than %d entries", MaxSubsetEntries)
		}
		if len(e) > maxSubsetEntryBytes {
			return fmt.Errorf("an entry is longer than %d bytes", maxSubsetEntryBytes)
		}
		if ap, err := netip.ParseAddrPort(e); err == nil {
			s.ports[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = struct{}{}
			continue
		}
		if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(e, "["), "]")); err == nil {
			s.addrs[a.Unmap()] = struct{}{}
		}
	}
	return nil
}

// servedKey is where the data plane reports, in the metadata_context of
// the response messages under envoy.lb, the endpoint that served the
// request: one of the picker's list when it retried.
const servedKey = "x-gateway-destination-endpoint-served"

// followServed moves an admitted request's booking to the fallback that
// served it, when the data plane reports one. A report naming the target,
// or an endpoint tollgate did not offer, changes nothing.
func (x *exchange) followServed(now time.Time, md *corev3.Metadata) {
	v, ok := md.GetFilterMetadata()[lbNamespace].GetFields()[servedKey]
	if !ok || !x.adm.inFlight() {
		return
	}
	t := &x.adm.decision.target
	served := strings.TrimSpace(v.GetStringValue())
	if served == t.Address {
		return
	}
	for _, f := range t.Fallbacks {
		if f.Address == served {
			x.log.Debug("request served by a fallback", "request", x.id, "target", t.Worker, "served", f.Worker)
			x.env.served(x.id, f.Worker, f.Rank)
			x.env.routed(now, f.Worker, x.plan)
			*t = f
			return
		}
	}
	x.log.Debug("served endpoint outside the offered list ignored", "request", x.id, "served", served)
}

// headerTestEndpointSelection is the conformance suite's test-only header
// naming the endpoints a request must go to, "IP" or "IP:port" entries,
// comma-separated (the Gateway API Inference Extension's
// HeaderBasedTestingFilter). tollgate reads it only with
// Config.TestEndpointSelection.
const headerTestEndpointSelection = "test-epp-endpoint-selection"

// withTestSelection narrows sub (nil: none) by the test endpoint
// selection header when it is enabled and present. A header that names no
// endpoint is answered 503, as the peer's filter leaves no candidate.
func (x *exchange) withTestSelection(sub *subset) (*subset, *answer.Rejection) {
	v, ok := x.hdr.lookup(headerTestEndpointSelection)
	if !x.cfg.TestEndpointSelection || !ok {
		return sub, nil
	}
	t := newSubset()
	if err := t.add(v); err != nil {
		return nil, &answer.Rejection{Reason: answer.ReasonNoEndpoints, Message: "invalid " + headerTestEndpointSelection + " header: " + err.Error()}
	}
	if t.entries == 0 {
		return nil, &answer.Rejection{Reason: answer.ReasonNoEndpoints, Message: "the " + headerTestEndpointSelection + " header names no endpoint"}
	}
	t.and = sub
	return t, nil
}
