package extproc

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/extproc/request/openai"
	"github.com/tollgate/tollgate/sched"
)

func testPlanner(t *testing.T) *planner {
	t.Helper()
	cfg := testConfig(nil)
	tok, err := defaultTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPlanner(&cfg, tok, newMetrics(cfg.TenantMetricTopN, nil))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// planRequest runs the planning path over a header list and a body.
func planRequest(t *testing.T, p *planner, body string, kv ...string) (*plan, *rejection) {
	t.Helper()
	h, rej := parseHeaders(headerMapOf(append([]string{":method", "POST", ":path", "/v1/completions"}, kv...)...), p.keep, 1<<16, DefaultMaxHeaderCount)
	if rej != nil {
		return nil, rej
	}
	kind, admission := openai.RouteKind(h.method, h.path)
	who, rej := p.identify(h, "", admission)
	if rej != nil {
		return nil, rej
	}
	return p.build(t.Context(), t0, 1, kind, h, who, []byte(body), false, nil)
}

// The pin headers, read once with the identity, join the body's hints
// field by field; a malformed one is a 400 naming it before the body is
// read.
func TestPlan_PinHeadersJoinBodyHints(t *testing.T) {
	p := testPlanner(t)
	for _, c := range []struct {
		name string
		body string
		kv   []string
		want *sched.Pin
	}{
		{"header worker, body rank", `{"model":"m","prompt":"x","nvext":{"dp_rank":2}}`, []string{"x-worker-instance-id", "w3"}, &sched.Pin{Worker: "w3", Rank: 2, HasRank: true}},
		{"header rank over body rank", `{"model":"m","prompt":"x","nvext":{"backend_instance_id":7,"dp_rank":2}}`, []string{"x-dp-rank", "5"}, &sched.Pin{Worker: "7", Rank: 5, HasRank: true}},
		{"header worker over body worker", `{"model":"m","prompt":"x","nvext":{"backend_instance_id":"w9"}}`, []string{"x-dynamo-worker-instance-id", "w1"}, &sched.Pin{Worker: "w1"}},
		{"no pin", `{"model":"m","prompt":"x"}`, []string{"x-dp-rank", "1"}, nil},
	} {
		pl, rej := planRequest(t, p, c.body, c.kv...)
		if rej != nil {
			t.Fatalf("%s: %v", c.name, rej)
		}
		if diff := cmp.Diff(c.want, pl.req.Pin); diff != "" {
			t.Errorf("%s: pin (-want +got):\n%s", c.name, diff)
		}
	}
	_, rej := planRequest(t, p, `not even JSON`, "x-dp-rank", "one")
	if rej == nil || rej.param != "x-dp-rank" || rej.httpStatus() != 400 || !strings.Contains(rej.text(), `invalid x-dp-rank header "one"`) {
		t.Errorf("malformed rank header: %v", rej)
	}
}

// A body that is not JSON is answered 400 invalid_json, naming the byte.
func TestPlan_InvalidJSONAnswer(t *testing.T) {
	_, rej := planRequest(t, testPlanner(t), `{"model":"m","prompt":[1 2]}`)
	want := `{"error":{"message":"the request body is not valid JSON: invalid character '2' at byte 25, looking for ',' or ']' after an array element","type":"invalid_request_error","param":null,"code":"invalid_json"}}`
	if rej == nil || rej.httpStatus() != 400 || string(rej.body()) != want {
		t.Fatalf("got %v\n%s\nwant 400\n%s", rej, rej.body(), want)
	}
}
