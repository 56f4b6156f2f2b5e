package extproc

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	protov2 "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/extproc/intake"
	"github.com/tollgate/tollgate/sched"
	"github.com/tollgate/tollgate/sched/policy"
)

// bodyMode is Envoy's body send mode.
type bodyMode = extprocfilterv3.ProcessingMode_BodySendMode

// Body modes, short.
const (
	modeNone     bodyMode = extprocfilterv3.ProcessingMode_NONE
	modeStreamed          = extprocfilterv3.ProcessingMode_STREAMED
	modeBuffered          = extprocfilterv3.ProcessingMode_BUFFERED
	modeDuplex            = extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// proto is the protocol a test stream negotiates.
type proto struct {
	req, resp extprocfilterv3.ProcessingMode_BodySendMode
	early     bool
}

func (p proto) config() *extprocv3.ProtocolConfiguration {
	return &extprocv3.ProtocolConfiguration{RequestBodyMode: p.req, ResponseBodyMode: p.resp, SendBodyWithoutWaitingForHeaderResponse: p.early}
}

// reqHeaders builds a first request_headers message; kv alternates header
// names and values.
func reqHeaders(p proto, method, path string, eos bool, kv ...string) *extprocv3.ProcessingRequest {
	hs := []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte(method)},
		{Key: ":path", RawValue: []byte(path)},
		{Key: ":authority", RawValue: []byte("gateway.example")},
	}
	for i := 0; i+1 < len(kv); i += 2 {
		hs = append(hs, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocv3.ProcessingRequest{
		ProtocolConfig: p.config(),
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: hs}, EndOfStream: eos}},
		Attributes: map[string]*structpb.Struct{attributesKey: {Fields: map[string]*structpb.Value{
			"source.address": structpb.NewStringValue("192.0.2.10:51234")}}},
	}
}

func reqBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

func reqTrailers() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
		RequestTrailers: &extprocv3.HttpTrailers{}}}
}

func respHeaders(eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":status", RawValue: []byte("200")}}}, EndOfStream: eos}}}
}

func respBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

func respTrailers() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
		ResponseTrailers: &extprocv3.HttpTrailers{}}}
}

const chatBody = `{"model":"llama","messages":[{"role":"user","content":"hello there, how are you doing today?"}],"stream":true}`

// note is one scheduler notification an exchange made.
type note struct {
	kind eventKind
	id   uint64
}

// fakeEnv records what an exchange asks of the server.
type fakeEnv struct {
	submits   []sched.Request
	subsets   []*subset
	servedAt  []string
	notes     []note
	routes    []string
	routedTo  []string
	dest      fleet.Target
	destOK    bool
	routeErr  error
	submitErr error
}

func (f *fakeEnv) submit(r *sched.Request, sub *subset) error {
	f.subsets = append(f.subsets, sub)
	if f.submitErr != nil {
		return f.submitErr
	}
	f.submits = append(f.submits, *r)
	return nil
}

func (f *fakeEnv) route(model string, sub *subset) (fleet.Target, bool, error) {
	f.subsets = append(f.subsets, sub)
	f.routes = append(f.routes, model)
	return f.dest, f.destOK, f.routeErr
}

func (f *fakeEnv) release(id uint64)        { f.notes = append(f.notes, note{evRelease, id}) }
func (f *fakeEnv) firstToken(id uint64)     { f.notes = append(f.notes, note{evFirstToken, id}) }
func (f *fakeEnv) usage(id, _, _ uint64)    { f.notes = append(f.notes, note{evUsage, id}) }
func (f *fakeEnv) context() context.Context { return context.Background() }

func (f *fakeEnv) routed(_ time.Time, worker string, _ *intake.Plan) {
	f.routedTo = append(f.routedTo, worker)
}

func (f *fakeEnv) served(id uint64, worker string, rank uint32) {
	f.servedAt = append(f.servedAt, fmt.Sprintf("%d %s/%d", id, worker, rank))
}

// testConfig is a Config with defaults for exchange tests.
func testConfig(mod func(*Config)) Config {
	c := Config{EnvoyMessageTimeout: time.Second, EnvoyMaxMessageTimeout: 310 * time.Second}
	if mod != nil {
		mod(&c)
	}
	return c.withDefaults()
}

// newTestExchange builds an exchange over a fake environment.
func newTestExchange(t *testing.T, cfg Config) (*exchange, *fakeEnv, *exchangeDeps) {
	t.Helper()
	d := newTestDeps(t, cfg)
	env := &fakeEnv{dest: fleet.Target{Worker: "w0", Address: "10.0.0.7:8000"}, destOK: true}
	return newExchange(d, env, d.cfg.Logger, 7), env, d
}

// newTestDeps builds what exchanges read, over a fresh cache view.
func newTestDeps(t testing.TB, cfg Config) *exchangeDeps {
	t.Helper()
	c := cfg
	d, err := newExchangeDeps(&c, intake.NewCacheView(intake.CacheConfig{}), newMetrics(cfg.TenantMetricTopN, nil))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// queued is the scheduler's queued notice.
var queued = notice{kind: noticeQueued}

// preempted is the scheduler's preemption notice.
var preempted = notice{kind: noticePreempted}

// dispatched is the notice of a dispatch to 10.0.0.7:8000.
func dispatched(wasQueued bool) notice {
	return notice{kind: noticeDecided, decision: &decision{
		action: sched.Action{Kind: sched.ActionDispatch, ID: 7, Worker: "w0", Outcome: sched.OutcomeAdmitted, Queued: wasQueued},
		target: fleet.Target{Worker: "w0", Address: "10.0.0.7:8000"}}}
}

func rejected(a sched.Action) notice {
	a.Kind, a.ID = sched.ActionReject, 7
	return notice{kind: noticeDecided, decision: &decision{action: a}}
}

// tell gives the exchange a notice with no other one waiting.
func tell(x *exchange, now time.Time, n notice) step { return x.onNotice(now, n, false) }

// decoded returns r as Envoy reads it: a shared route's reply is sent
// pre-encoded, its fields in its unknown bytes (routeCache).
func decoded(r *extprocv3.ProcessingResponse) *extprocv3.ProcessingResponse {
	raw := r.ProtoReflect().GetUnknown()
	if len(raw) == 0 {
		return r
	}
	d := &extprocv3.ProcessingResponse{}
	if err := protov2.Unmarshal(raw, d); err != nil {
		panic(fmt.Sprintf("a pre-encoded reply does not decode: %v", err))
	}
	return d
}

// kinds names the oneof of each response (decoded), for compact
// assertions.
func kinds(rs []*extprocv3.ProcessingResponse) []string {
	var out []string
	for _, r := range rs {
		r = decoded(r)
		switch v := r.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_RequestHeaders:
			out = append(out, "req_headers"+mutMark(v.RequestHeaders.GetResponse()))
		case *extprocv3.ProcessingResponse_RequestBody:
			out = append(out, "req_body"+mutMark(v.RequestBody.GetResponse()))
		case *extprocv3.ProcessingResponse_RequestTrailers:
			out = append(out, "req_trailers")
		case *extprocv3.ProcessingResponse_ResponseHeaders:
			out = append(out, "resp_headers")
		case *extprocv3.ProcessingResponse_ResponseBody:
			out = append(out, "resp_body"+mutMark(v.ResponseBody.GetResponse()))
		case *extprocv3.ProcessingResponse_ResponseTrailers:
			out = append(out, "resp_trailers")
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			out = append(out, "immediate")
		case nil:
			if r.GetOverrideMessageTimeout() != nil {
				out = append(out, "override "+r.GetOverrideMessageTimeout().AsDuration().String())
			} else {
				out = append(out, "empty")
			}
		}
	}
	return out
}

// mutMark marks a reply carrying the route (+route) or a streamed body
// (+stream:<len>[:eos]).
func mutMark(c *extprocv3.CommonResponse) string {
	s := ""
	if c.GetHeaderMutation() != nil {
		for _, h := range c.GetHeaderMutation().GetSetHeaders() {
			if h.GetHeader().GetKey() == headerDestination {
				s += "+route"
			}
		}
	}
	if sr := c.GetBodyMutation().GetStreamedResponse(); sr != nil {
		s += "+stream:" + itoa(len(sr.GetBody()))
		if sr.GetEndOfStream() {
			s += ":eos"
		}
	}
	return s
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// immediateOf returns the ImmediateResponse of the last message.
func immediateOf(t *testing.T, s step) *extprocv3.ImmediateResponse {
	t.Helper()
	if len(s.send) == 0 {
		t.Fatalf("no message sent; want an immediate response")
	}
	ir := s.send[len(s.send)-1].GetImmediateResponse()
	if ir == nil {
		t.Fatalf("last message is %v, not an immediate response", kinds(s.send))
	}
	return ir
}

// headerMap flattens a header mutation.
func headerMap(m *extprocv3.HeaderMutation) map[string]string {
	out := map[string]string{}
	for _, h := range m.GetSetHeaders() {
		out[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	return out
}

// tenancyWithKey configures one tenant key: acme:s3cret.
func tenancyWithKey(t *testing.T) *intake.Tenancy {
	t.Helper()
	ts, err := policy.NewTenants(policy.TenantOptions{TenantAPIKeys: []string{"acme:s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	return &intake.Tenancy{Tenants: ts}
}

// histogramSum returns the sum of an unlabelled histogram.
func histogramSum(t *testing.T, m *metrics, name string) float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	t.Fatalf("metric %s not gathered", name)
	return 0
}

// appendFalse reports whether a mutation sets the deprecated append flag,
// the one Envoy's ext_proc filter reads, explicitly to false.
func appendFalse(h *corev3.HeaderValueOption) bool {
	a := h.GetAppend() //nolint:staticcheck // SA1019: ext_proc reads only this flag.
	return a != nil && !a.GetValue()
}

// runServer runs s until the test ends, so that what goes through its
// dispatcher, such as a metrics scrape's scheduler snapshot, is answered
// at once instead of waiting for Run.
func runServer(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		s.Wait()
	})
}
