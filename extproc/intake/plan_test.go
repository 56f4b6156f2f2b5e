package intake

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/sched"
)

// The pin headers, read once with the identity, join the body's hints
// field by field; a malformed one is a 400 naming it before the body is
// read.
func TestPlan_PinHeadersJoinBodyHints(t *testing.T) {
	p := newTestPlanner(t, Config{})
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
		if diff := cmp.Diff(c.want, pl.Req.Pin); diff != "" {
			t.Errorf("%s: pin (-want +got):\n%s", c.name, diff)
		}
	}
	_, rej := planRequest(t, p, `not even JSON`, "x-dp-rank", "one")
	if rej == nil || rej.Param != "x-dp-rank" || rej.Reason != ReasonBadRequest || !strings.Contains(rej.Message, `invalid x-dp-rank header "one"`) {
		t.Errorf("malformed rank header: %v", rej)
	}
}

// A body that is not JSON is refused as a bad request, invalid_json,
// naming the byte.
func TestPlan_InvalidJSONAnswer(t *testing.T) {
	_, rej := planRequest(t, newTestPlanner(t, Config{}), `{"model":"m","prompt":[1 2]}`)
	want := Rejection{Reason: ReasonBadRequest, Message: "the request body is not valid JSON: invalid character '2' at byte 25, looking for ',' or ']' after an array element", Code: "invalid_json"}
	if rej == nil || *rej != want {
		t.Fatalf("got %+v, want %+v", rej, &want)
	}
}
