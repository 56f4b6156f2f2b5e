package demo

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestServe_RoutesAndEchoesTheEndpoint(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type addrs struct{ front, metrics string }
	ready := make(chan addrs, 1)
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, Options{
			Stdout: &out, Stderr: t.Output(), Serve: "127.0.0.1:0", Speed: 10,
			serveReady: func(front, metrics string) { ready <- addrs{front, metrics} },
		})
	}()
	var a addrs
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatalf("Serve returned early: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not come up")
	}

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	post := func(key, body string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+a.front+"/v1/completions", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Smg-Priority", "interactive")
		req.Header.Set("X-Dynamo-Meta-Policy-Class", "premium")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}

	resp, body := post("demo-acme-key", `{"model":"demo-model","prompt":"Say hello","max_tokens":3,"stream":true}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "data: [DONE]") {
		t.Fatalf("status %d, body %q; want a complete 200 stream", resp.StatusCode, body)
	}
	ep := resp.Header.Get(HeaderEndpoint)
	if _, _, err := net.SplitHostPort(ep); err != nil || !strings.HasPrefix(ep, "127.0.0.1:") {
		t.Fatalf("%s = %q, want the worker's IP:port", HeaderEndpoint, ep)
	}
	if !strings.Contains(out.String(), ep) {
		t.Errorf("the routed endpoint %s is not one of the workers Serve printed:\n%s", ep, out.String())
	}

	if resp, _ := post("", `{"model":"demo-model","prompt":"Hi"}`); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no key: status %d, want 401", resp.StatusCode)
	}

	mreq, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.metrics+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	mresp, err := client.Do(mreq)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if want := `smg_scheduler_admit_total{class="interactive",outcome="admitted"} 1`; !strings.Contains(string(metrics), want) {
		t.Errorf("/metrics lacks %q", want)
	}

	for _, want := range []string{"curl -sN -D - http://" + a.front + "/v1/completions", "x-smg-priority: interactive",
		"x-dynamo-meta-policy-class: premium", "http://" + a.metrics + "/metrics", "base_url=\"http://" + a.front + "/v1\""} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("Serve's instructions lack %q", want)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not stop")
	}
}
