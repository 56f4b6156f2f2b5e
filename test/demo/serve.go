package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

// Serve keeps a demo deployment up until ctx ends: two mock workers, the
// tollgate server configured with examples/premium_4x.yaml,
// examples/priority.yaml, examples/tenant-rate-limits.yaml and four tenant
// keys (trial's budget is two requests a minute), and the simulated Envoy
// serving HTTP on o.Serve. It prints the addresses and ready-to-paste curl
// and OpenAI SDK examples. Each worker echoes the routing header that
// reached it in X-Tollgate-Endpoint.
func Serve(ctx context.Context, o Options) error {
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	if o.Serve == "" {
		return errors.New("demo: serve needs an address")
	}
	shown, cleanup, err := o.useExamples()
	if err != nil {
		return err
	}
	defer cleanup()
	st, err := startStack(ctx, serverSpec{
		routerPolicy:     filepath.Join(o.Examples, filePremium4x),
		priority:         true,
		priorityConfig:   filepath.Join(o.Examples, filePriority),
		tenantKeys:       append(demoTenantKeys, demoTrialKey),
		tenantRateLimits: filepath.Join(o.Examples, fileTenantRate),
		seed:             o.Seed,
	}, workerSpec{
		count:            priorityWorkers,
		maxNumSeqs:       prioritySeqs,
		maxBatchedTokens: premiumBatchedTokens,
		prefillRate:      priorityPrefillRate,
		decodeRate:       priorityDecodeRate,
	}, o.Speed, logger(o.Stderr))
	if err != nil {
		return err
	}
	defer st.close()

	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", o.Serve)
	if err != nil {
		return fmt.Errorf("demo: listen on %s: %w", o.Serve, err)
	}
	front := &http.Server{Handler: st.sim.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- front.Serve(l) }()

	addr := dialable(l.Addr())
	printServe(o.Stdout, addr, st, filepath.Join(shown, filePremium4x), filepath.Join(shown, filePriority), filepath.Join(shown, fileTenantRate))
	if o.serveReady != nil {
		o.serveReady(addr, st.metricsAddr)
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	fmt.Fprintln(o.Stdout, "\nstopping the demo stack")
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := front.Shutdown(shutCtx); err != nil {
		_ = front.Close() // streams still open after the grace period
	}
	if serveErr == nil {
		serveErr = <-served
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

// dialable turns a listener address into one a local client can use: an
// unspecified host becomes 127.0.0.1.
func dialable(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// printServe prints the addresses and the examples.
func printServe(w io.Writer, addr string, st *stack, policyFile, priorityFile, rateFile string) {
	var workers []string
	for _, sw := range st.workers {
		workers = append(workers, fmt.Sprintf("%s %s", sw.id, sw.addr))
	}
	var keys []string
	for _, k := range append(demoTenantKeys, demoTrialKey) {
		keys = append(keys, "--tenant-api-key "+k)
	}
	fmt.Fprintf(w, `tollgate demo stack is up; press Ctrl-C to stop it.

  gateway (simulated Envoy)  http://%[1]s
  tollgate ext_proc (gRPC)   %[2]s
  tollgate metrics           http://%[3]s/metrics
  workers                    %[4]s (model %[5]s, %[6]d sequences each)
  tollgate flags             --router-policy-config %[7]s
                             --priority-scheduler-enabled --priority-scheduler-config %[8]s
                             --tenant-rate-limit-enabled --tenant-rate-limit-config %[11]s
                             %[9]s

Tenants: demo-acme-key is auth:acme (max class interactive), demo-cron-key is
auth:internal-cron (system), demo-free-key is auth:free (no tenant policy:
capped at default), demo-trial-key is auth:trial (two requests a minute: the
third gets 429 tenant_rate_limit_exceeded). A request without one of these
keys gets 401.
Each worker echoes the x-gateway-destination-endpoint it received as %[10]s.

  # a premium, interactive request, streamed
  curl -sN -D - http://%[1]s/v1/completions \
    -H 'authorization: Bearer demo-acme-key' \
    -H 'x-smg-priority: interactive' \
    -H 'x-dynamo-meta-policy-class: premium' \
    -H 'content-type: application/json' \
    -d '{"model":"%[5]s","prompt":"Say hello","max_tokens":8,"stream":true}'

  # auth:free asks for system and is clamped to default (smg_scheduler_clamp_total)
  curl -s -D - http://%[1]s/v1/chat/completions \
    -H 'authorization: Bearer demo-free-key' \
    -H 'x-smg-priority: system' \
    -H 'x-dynamo-meta-policy-class: regular' \
    -H 'content-type: application/json' \
    -d '{"model":"%[5]s","messages":[{"role":"user","content":"Hi"}],"max_tokens":4}'

  # no key: tollgate answers 401 itself
  curl -s -D - http://%[1]s/v1/completions -H 'content-type: application/json' \
    -d '{"model":"%[5]s","prompt":"Hi"}'

  # what the scheduler saw
  curl -s http://%[3]s/metrics | grep -E '^(smg_scheduler_admit|smg_scheduler_clamp|dynamo_frontend_router_queue_pending|tollgate_worker_active_requests)'

  # OpenAI SDK (Python)
  from openai import OpenAI
  client = OpenAI(base_url="http://%[1]s/v1", api_key="demo-acme-key",
                  default_headers={"x-smg-priority": "interactive", "x-dynamo-meta-policy-class": "premium"})
  print(client.completions.create(model="%[5]s", prompt="Say hello", max_tokens=8).choices[0].text)
`, addr, st.grpcAddr, st.metricsAddr, strings.Join(workers, ", "), demoModel, prioritySeqs,
		policyFile, priorityFile, strings.Join(keys, " "), HeaderEndpoint, rateFile)
}
