package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	protov2 "google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/extproc/fleet"
	"github.com/tollgate/tollgate/test/bench"
)

// BenchmarkExchange_BufferedRequest measures the shell's per-request work
// in a stream goroutine: headers, a chat body (JSON, tokenizing, hashing,
// prefix lookup), the route, and the response path.
func BenchmarkExchange_BufferedRequest(b *testing.B) {
	exchange := bufferedExchange(b)
	b.ReportAllocs()
	for b.Loop() {
		exchange()
	}
}

// BenchmarkExchange_NewGoroutine measures the stack growth of a stream's
// new goroutine: the exchange of BenchmarkExchange_BufferedRequest on a new
// goroutine (new), and on a new one that calls growStack first, as Process
// does (grown).
func BenchmarkExchange_NewGoroutine(b *testing.B) {
	exchange := bufferedExchange(b)
	done := make(chan struct{})
	for _, c := range []struct {
		name string
		run  func()
	}{
		{"new", func() {
			go func() { exchange(); done <- struct{}{} }()
			<-done
		}},
		{"grown", func() {
			go func() { growStack(); exchange(); done <- struct{}{} }()
			<-done
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.run()
			}
		})
	}
}

// bufferedExchange returns one whole BUFFERED exchange with a response
// phase, against a fake dispatcher that dispatches at once.
func bufferedExchange(b *testing.B) func() {
	cfg := testConfig(nil)
	p := newTestDeps(b, cfg)
	env := &fakeEnv{dest: fleet.Target{Worker: "w0", Address: "10.0.0.7:8000"}, destOK: true}
	p0 := proto{req: modeBuffered, resp: modeStreamed}
	hdr := reqHeaders(p0, "POST", "/v1/chat/completions", false, "x-smg-priority", "interactive")
	body := reqBody(chatBody, true)
	rh, rb := respHeaders(false), respBody(`data: {"usage":{"prompt_tokens":12}}`+"\n\ndata: [DONE]\n\n", true)
	return func() {
		env.submits, env.notes = env.submits[:0], env.notes[:0]
		x := newExchange(p, env, cfg.Logger, 1)
		x.message(t0, hdr)
		x.message(t0, body)
		tell(x, t0, dispatched(false))
		x.message(t0, rh)
		x.message(t0, rb)
		x.close(t0, errClientGone)
	}
}

// BenchmarkServer_Buffered drives whole BUFFERED exchanges with response
// phases through a Server over loopback TCP, 64 streams at a time: the
// stream goroutines, the dispatcher and the notices, as Envoy meets them.
// cpu-µs/op is the process's CPU time per request, the client's included;
// a CPU profile tells the server's share (test/bench measures the server
// alone, against a null server).
func BenchmarkServer_Buffered(b *testing.B) {
	cfg := Config{Logger: testConfig(nil).Logger}
	s, err := New(cfg, []fleet.Worker{{ID: "w0", Address: "10.0.0.7:8000", MaxRunningRequests: 1024}})
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	client := extprocv3.NewExternalProcessorClient(serve(b, s, cfg, lis, lis.Addr().String()))
	p0 := proto{req: modeBuffered, resp: modeStreamed}
	msgs := []*extprocv3.ProcessingRequest{
		reqHeaders(p0, "POST", "/v1/chat/completions", false),
		reqBody(chatBody, true),
		respHeaders(false),
		respBody(`data: {"usage":{"prompt_tokens":12}}`+"\n\ndata: [DONE]\n\n", true),
	}
	exchange := func() error {
		st, err := client.Process(context.Background())
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if err := st.Send(m); err != nil {
				return err
			}
			if _, err := st.Recv(); err != nil {
				return err
			}
		}
		if err := st.CloseSend(); err != nil {
			return err
		}
		if _, err := st.Recv(); !errors.Is(err, io.EOF) {
			return fmt.Errorf("the stream did not end: %w", err)
		}
		return nil
	}
	if err := exchange(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(64 / max(1, runtime.GOMAXPROCS(0)))
	before := bench.SelfCPU()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := exchange(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((bench.SelfCPU()-before).Microseconds())/float64(b.N), "cpu-µs/op")
}

// BenchmarkRouteReply measures a route's BUFFERED body reply per request,
// built and marshalled: built for the request (a target with fallbacks
// gets its own), or taken from the routeCache, marshalled once already.
func BenchmarkRouteReply(b *testing.B) {
	t := fleet.Target{Worker: "w0", Address: "10.0.0.7:8000"}
	var cache routeCache
	for _, c := range []struct {
		name  string
		route func() *route
	}{
		{"built", func() *route { return newRoute(&t) }},
		{"cached", func() *route { return cache.get(&t) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := protov2.Marshal(c.route().body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
