package mockworker

import "testing"

// Start is New plus Listen("127.0.0.1:0") for tests: it fails tb on any
// error and closes the worker when the test ends.
func Start(tb testing.TB, cfg Config) *Worker {
	tb.Helper()
	w, err := New(cfg)
	if err != nil {
		tb.Fatalf("mockworker: %v", err)
	}
	tb.Cleanup(func() {
		if err := w.Close(); err != nil {
			tb.Errorf("mockworker: close: %v", err)
		}
	})
	if _, err := w.Listen("127.0.0.1:0"); err != nil {
		tb.Fatalf("mockworker: %v", err)
	}
	return w
}
