package extproc

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/sched"
)

// TestHealth_PeerServiceNames mirrors the endpoint picker's health vectors
// of the Gateway API Inference Extension (cmd/epp/runner/health_test.go:
// 91-150 at 1748e829, leader election on; health.go:52-103) and the
// lightweight picker's "inference-extension" name
// (pkg/lwepp/server/runserver.go:137-148): liveness is always SERVING;
// readiness, "", the ext_proc service and inference-extension are SERVING
// only while the replica is ready (workers known, leading, not draining).
func TestHealth_PeerServiceNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			serving    = healthgrpc.HealthCheckResponse_SERVING
			notServing = healthgrpc.HealthCheckResponse_NOT_SERVING
		)
		ts := startServer(t, Config{DrainDelay: -1, ShutdownTimeout: 1}, nil)
		check := func(step string, ready healthgrpc.HealthCheckResponse_ServingStatus) {
			t.Helper()
			for svc, want := range map[string]healthgrpc.HealthCheckResponse_ServingStatus{
				HealthLiveness: serving, HealthReadiness: ready, "": ready, ServiceName: ready, HealthInferenceExtension: ready,
			} {
				hc, err := ts.health.Check(context.Background(), &healthgrpc.HealthCheckRequest{Service: svc})
				if err != nil || hc.GetStatus() != want {
					t.Fatalf("%s: health %q = %v %v, want %v", step, svc, hc.GetStatus(), err, want)
				}
			}
		}
		check("no workers (the peer's pool not synced)", notServing)
		if err := ts.srv.SetWorkers(oneWorker); err != nil {
			t.Fatal(err)
		}
		check("ready leader", serving)
		if err := ts.srv.SetActive(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		check("not the leader", notServing)
		if err := ts.srv.SetActive(context.Background(), true); err != nil {
			t.Fatal(err)
		}
		check("leader again", serving)
		if err := ts.srv.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
		check("draining", notServing)

		// An unknown name: the peer answers SERVICE_UNKNOWN, grpc-go's health
		// server the NOT_FOUND error; both tell the prober the name is wrong.
		_, err := ts.health.Check(context.Background(), &healthgrpc.HealthCheckRequest{Service: "no-such-service"})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("unknown service: %v, want NotFound", err)
		}
	})
}

// TestExchange_ClassLimitStatusIsTheOperatorsChoice: Dynamo answers a
// per-worker queue limit 529 Overloaded; the endpoint picker protocol
// (docs/proposals/004-endpoint-picker-protocol/README.md:71-74 at
// 1748e829) suggests 429 for a request that should be dropped. The body
// keeps Dynamo's shape and carries the chosen code.
func TestExchange_ClassLimitStatusIsTheOperatorsChoice(t *testing.T) {
	limit := sched.Action{Outcome: sched.OutcomeClassLimit, PolicyClass: "premium", LimitKind: sched.LimitRequests, LimitCurrent: 4, LimitValue: 4}
	for _, status := range []int{0, 529, 429} {
		x, _, _ := newTestExchange(t, testConfig(func(c *Config) { c.ClassLimitStatus = status }))
		feed(t, x, reqHeaders(proto{req: modeBuffered}, "POST", "/v1/chat/completions", false))
		feed(t, x, reqBody(chatBody, true))
		ir := immediateOf(t, tell(x, t0, rejected(limit)))
		want := status
		if want == 0 {
			want = 529
		}
		if int(ir.GetStatus().GetCode()) != want || !strings.Contains(string(ir.GetBody()), `"code":`+strconv.Itoa(want)) {
			t.Errorf("ClassLimitStatus %d: answered %d %s", status, ir.GetStatus().GetCode(), ir.GetBody())
		}
	}
	if err := (Config{ClassLimitStatus: 503}).Validate(); err == nil || !strings.Contains(err.Error(), "neither 529 nor 429") {
		t.Fatalf("503 accepted: %v", err)
	}
}
