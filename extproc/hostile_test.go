package extproc

import (
	"net/http"
	"strings"
	"testing"
)

// TestServer_BufferedTrailersWithoutBodyOutsideAdmission: the probe's
// stream over real gRPC. In BUFFERED mode the headers of a request outside
// admission are answered at once; when trailers follow with no body, only
// the trailers reply is left and it cannot set the route, so a CONTINUE let
// a client-sent x-gateway-destination-endpoint through where no filter
// strips it. tollgate answers with an immediate 400 instead.
func TestServer_BufferedTrailersWithoutBodyOutsideAdmission(t *testing.T) {
	ts := startServer(t, Config{}, oneWorker)
	p := proto{req: modeBuffered, resp: modeStreamed}
	cs := ts.open()
	cs.send(reqHeaders(p, "GET", "/v1/models", false, headerDestination, "127.0.0.1:1"))
	if k := cs.recvKinds(1); k[0] != "req_headers" {
		t.Fatalf("headers reply %v", k)
	}
	cs.send(reqTrailers())
	r := cs.recv().GetImmediateResponse()
	if r.GetStatus().GetCode() != http.StatusBadRequest || !strings.Contains(string(r.GetBody()), "trailers and no body") {
		t.Fatalf("trailers without a body: %v", r)
	}
}
