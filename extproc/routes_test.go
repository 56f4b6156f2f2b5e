package extproc

import (
	"fmt"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	protov2 "google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/extproc/fleet"
)

func TestRouteCache_SharesEncodedRoutesPerTarget(t *testing.T) {
	var c routeCache
	a := fleet.Target{Worker: "w0", Address: "10.0.0.7:8000"}
	r := c.get(&a)
	if c.get(&fleet.Target{Worker: "w0", Address: "10.0.0.7:8000"}) != r {
		t.Fatal("the same target got a second route")
	}
	plain := newRoute(&a)
	for name, pair := range map[string][2]*extprocv3.ProcessingResponse{"headers": {r.headers, plain.headers}, "body": {r.body, plain.body}} {
		if got := decoded(pair[0]); !protov2.Equal(got, pair[1]) {
			t.Errorf("%s: the encoded reply reads %v, want %v", name, got, pair[1])
		}
	}
	ranked := a
	ranked.Rank, ranked.MultiRank = 1, true
	if c.get(&ranked) == r {
		t.Fatal("another rank got the same route")
	}
	withFallbacks := a
	withFallbacks.Fallbacks = []fleet.Target{{Worker: "w1", Address: "10.0.0.8:8000"}}
	f1, f2 := c.get(&withFallbacks), c.get(&withFallbacks)
	if f1 == f2 || len(f1.headers.ProtoReflect().GetUnknown()) != 0 {
		t.Fatal("a target with fallbacks was cached")
	}
	if got := headerMap(f1.mut)[headerDestination]; got != "10.0.0.7:8000,10.0.0.8:8000" {
		t.Fatalf("fallbacks route to %q", got)
	}
}

func TestRouteCache_StartsOverWhenFull(t *testing.T) {
	var c routeCache
	for i := range maxRoutes + 10 {
		c.get(&fleet.Target{Address: fmt.Sprintf("10.0.%d.%d:8000", i/256, i%256)})
		if n := c.n.Load(); n > maxRoutes {
			t.Fatalf("%d routes kept after %d targets", n, i+1)
		}
	}
	size := 0
	c.m.Range(func(any, any) bool { size++; return true })
	if size != 10 {
		t.Fatalf("%d routes kept after starting over, want 10", size)
	}
}
