package main

import (
	"context"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// TestCheckConfig_MisleadingValuesAreRejected: each of these used to be
// accepted and quietly replaced by something else (or accepted by
// check-config and then rejected by serve).
func TestCheckConfig_MisleadingValuesAreRejected(t *testing.T) {
	workers := writeFile(t, "workers.yaml", "workers:\n  - id: w1\n    address: 127.0.0.1:18001\n")
	empty := writeFile(t, "empty.pem", "")
	zeroSlots := writeFile(t, "zero.yaml", "workers:\n  - id: w1\n    address: 127.0.0.1:18001\n    max_running_requests: 0\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"negative rate", []string{"--max-concurrent-requests", "4", "--rate-limit-tokens-per-second", "-1"}, "--rate-limit-tokens-per-second must be >= 0, got -1"},
		{"queue without timeout", []string{"--max-concurrent-requests", "4", "--queue-timeout-secs", "0"}, "--queue-timeout-secs must be > 0 when --queue-size is > 0, got 0"},
		{"tenant limits without a file", []string{"--tenant-rate-limit-enabled"}, "--tenant-rate-limit-enabled needs --tenant-rate-limit-config"},
		{"tenant file without the switch", []string{"--tenant-rate-limit-config", "../../examples/tenant-rate-limits.yaml"}, "--tenant-rate-limit-config needs --tenant-rate-limit-enabled"},
		{"huge max-concurrent-requests", []string{"--max-concurrent-requests", "100000"}, "got 100000"},
		{"negative drain delay", []string{"--drain-delay", "-5s"}, "--drain-delay must not be negative, got -5s"},
		{"negative shutdown timeout", []string{"--shutdown-timeout", "-5s"}, "shutdown timeout -5s is negative"},
		{"zero envoy message timeout", []string{"--envoy-message-timeout", "0s"}, "--envoy-message-timeout must be positive, got 0s"},
		{"bad grpc address", []string{"--grpc-addr", "9002"}, `--grpc-addr "9002"`},
		{"bad grpc port", []string{"--grpc-addr", ":http-alt"}, `port "http-alt" is not a number`},
		{"bad metrics address", []string{"--metrics-addr", "localhost:99999"}, `--metrics-addr "localhost:99999"`},
		{"empty tls files", []string{"--grpc-tls-cert", empty, "--grpc-tls-key", empty}, "grpc tls"},
		{"explicit zero slots", []string{"--workers", zeroSlots}, "max_running_requests: 0 is not a valid value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"check-config"}, tt.args...)
			if !strings.Contains(strings.Join(tt.args, " "), "--workers") {
				args = append(args, "--workers", workers)
			}
			code, out, _ := runArgs(t, args...)
			if code != 1 || !strings.Contains(out, tt.want) {
				t.Fatalf("code %d, want 1 and a problem naming %q; output:\n%s", code, tt.want, out)
			}
		})
	}
}

func TestCheckConfig_WarnsOnZeroWorkers(t *testing.T) {
	none := writeFile(t, "none.yaml", "workers: []\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--discovery=static without --workers serves no worker"},
		{[]string{"--workers", none}, "lists none"},
	} {
		code, out, _ := runArgs(t, append([]string{"check-config"}, tc.args...)...)
		if code != 0 || !strings.Contains(out, "warning: no workers: ") || !strings.Contains(out, tc.want) || !strings.Contains(out, "configuration ok") {
			t.Errorf("%v: code %d, output %q", tc.args, code, out)
		}
	}
}

// TestServe_ShutdownIsBoundedByTheFlags: exit used to take --drain-delay +
// --shutdown-timeout + a hard-coded 5 s (more than the chart's grace period
// allows) when a stream stayed open. It now fits in the two flags. serve
// runs on in-memory listeners in a testing/synctest bubble, so the bound is
// checked exactly on fake time, with no slack for a loaded machine.
func TestServe_ShutdownIsBoundedByTheFlags(t *testing.T) {
	workers := writeFile(t, "workers.yaml", twoWorkers)
	o := options{}
	fs := newFlagSet("serve", &o)
	fs.SetOutput(io.Discard)
	if err := fs.Parse([]string{"--grpc-addr", "127.0.0.1:9002", "--metrics-addr", "127.0.0.1:9090", "--workers", workers,
		"--drain-delay", "0", "--shutdown-timeout", "1s"}); err != nil {
		t.Fatal(err)
	}
	const bound = 0 + time.Second // --drain-delay + --shutdown-timeout
	log := discardLogger()
	st, err := o.build(log)
	if err != nil {
		t.Fatal(err)
	}
	// serve watches SIGHUP with --workers; the runtime's signal loop must
	// start outside the bubble, where it is not tied to the bubble's life.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	signal.Stop(hup)
	synctest.Test(t, func(t *testing.T) {
		listeners := map[string]*bufconn.Listener{}
		listen := func(_ context.Context, _, addr string) (net.Listener, error) {
			l := bufconn.Listen(1 << 20)
			listeners[addr] = l
			return l, nil
		}
		ctx, cancel := context.WithCancel(t.Context())
		up := make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- serve(ctx, &o, st, log, func(string, string) { close(up) }, listen) }()
		select {
		case <-up:
		case err := <-done:
			t.Fatalf("serve returned early: %v", err)
		}
		grpcLis := listeners[o.grpcAddr]
		conn, err := grpc.NewClient("passthrough:///tollgate", grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return grpcLis.DialContext(ctx) }))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		stream, err := extprocv3.NewExternalProcessorClient(conn).Process(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		// A routed request whose response never comes keeps its stream open.
		hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":method", RawValue: []byte("GET")}, {Key: ":path", RawValue: []byte("/v1/models")}}}
		if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: hm, EndOfStream: true}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("serve: %v", err)
		}
		if took := time.Since(start); took > bound {
			t.Fatalf("shutdown took %v with --drain-delay 0 --shutdown-timeout 1s, want at most %v", took, bound)
		}
	})
}
