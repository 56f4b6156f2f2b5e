package peer

import "testing"

// BenchmarkRoundTrip sends a submit with a realistic request (8 cached
// entries, 16 allowed workers) and receives a dispatch back, over
// loopback without TLS.
func BenchmarkRoundTrip(b *testing.B) {
	decided := &Down{Kind: DownDecided, ID: 1, Decision: &Decision{Action: sampleAction(), Target: sampleTarget()}}
	addr := startServer(b, nil, func(s ServerStream) error {
		for {
			if _, err := s.Recv(); err != nil {
				return err
			}
			if err := s.Send(decided); err != nil {
				return err
			}
		}
	})
	c := dial(b, addr, nil)
	submit := &Up{Kind: UpSubmit, ID: 1, Request: sampleRequest(8, 16)}
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Send(submit); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Recv(); err != nil {
			b.Fatal(err)
		}
	}
}
