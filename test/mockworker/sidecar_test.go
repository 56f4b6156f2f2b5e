package mockworker_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate/tollgate/test/memnet"
	"github.com/tollgate/tollgate/test/mockworker"
)

// pd is a 1000-token/s configuration: in a bubble, prefilling n tokens
// takes exactly n ms.
var pd = mockworker.Config{Model: "m", PrefillTokensPerSec: 1000, DecodeTokensPerSec: 1000}

// memNet runs workers on an in-memory network; use it in a synctest bubble.
type memNet struct {
	t   *testing.T
	net *memnet.Network
}

func newMemNet(t *testing.T) *memNet { return &memNet{t: t, net: &memnet.Network{}} }

// start serves a worker for cfg on the network; its sidecar dials through it.
func (n *memNet) start(cfg mockworker.Config) *mockworker.Worker {
	n.t.Helper()
	cfg.Dial = n.net.Dial
	w, err := mockworker.New(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() {
		if err := w.Close(); err != nil {
			n.t.Errorf("close: %v", err)
		}
	})
	l, addr := n.net.Listen()
	if err := w.Serve(l, addr); err != nil {
		n.t.Fatal(err)
	}
	return w
}

// client returns a client of w over the network.
func (n *memNet) client(w *mockworker.Worker) *client {
	return newClientVia(n.t, "http://"+w.Addr(), n.net.Dial)
}

// sidecarErrorJSON is a sidecar error answer as a client sees it.
type sidecarErrorJSON struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

// expectSidecarError checks that resp is a 502 with the sidecar error code.
func expectSidecarError(t *testing.T, resp *http.Response, code string) {
	t.Helper()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
	body := decodeBody[sidecarErrorJSON](t, resp)
	if body.Error.Code != code || body.Error.Type != "BadGateway" || body.Error.Message == "" {
		t.Errorf("error %+v, want code %q, type BadGateway and a message", body.Error, code)
	}
}

// lastUsage returns the usage of a streamed answer's usage chunk.
func lastUsage(t *testing.T, resp *http.Response) usageJSON {
	t.Helper()
	events := newSSEReader(resp.Body).all(t)
	if len(events) < 2 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q, want a usage chunk and [DONE] last", events)
	}
	var c completionJSON
	if err := json.Unmarshal([]byte(events[len(events)-2]), &c); err != nil || c.Usage == nil {
		t.Fatalf("usage chunk %q: %v", events[len(events)-2], err)
	}
	return *c.Usage
}

func TestSidecar_PrefillThenDecode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet(t)
		pcfg, dcfg := pd, pd
		pcfg.ID, pcfg.Role = "p", mockworker.RolePrefill
		dcfg.ID, dcfg.Role = "d", mockworker.RoleDecode
		p, d := n.start(pcfg), n.start(dcfg)
		c := n.client(d)

		// 40 tokens: 2 full blocks of 16 within the first 39.
		resp := c.post(t.Context(), mockworker.PathCompletions, map[string]any{
			"model": "m", "prompt": ids(0, 40), "max_tokens": 5, "stream": true,
			"stream_options": map[string]bool{"include_usage": true},
		}, "X-Request-Id", "r1", mockworker.HeaderPrefillerHostPort, p.Addr())
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
		want := usageJSON{PromptTokens: 40, CompletionTokens: 5, TotalTokens: 45}
		want.PromptTokensDetails.CachedTokens = 39 // Transferred: all but the last token.
		if diff := cmp.Diff(want, lastUsage(t, resp)); diff != "" {
			t.Errorf("decode usage (-want +got):\n%s", diff)
		}

		ps, ds := p.Stats(), d.Stats()
		if ps.PrefillServed != 1 || ps.Finished != 1 || ps.PromptTokens != 40 || ps.GenerationTokens != 1 || ps.CachedBlocks != 2 {
			t.Errorf("prefill stats %+v, want one prefill of 40 tokens, 1 token out, 2 blocks cached", ps)
		}
		if ds.PrefillCalls != 1 || ds.PrefillFailures != 0 || ds.TransferredTokens != 39 || ds.CachedTokens != 0 || ds.CachedBlocks != 2 {
			t.Errorf("decode stats %+v, want one prefill call, 39 tokens transferred, 2 blocks cached", ds)
		}

		pr, ok := p.Record("r1")
		if !ok {
			t.Fatal("no prefill record r1")
		}
		if !pr.RemoteDecode || pr.RemotePrefill || pr.MaxTokens != 1 || pr.CompletionTokens != 1 || pr.Stream ||
			pr.Header.Get(mockworker.HeaderPrefillerHostPort) != "" {
			t.Errorf("prefill record %+v, want an unstreamed remote-decode request for 1 token without the prefiller header", pr)
		}
		if got := pr.FirstToken.Sub(pr.Admitted); got != 40*time.Millisecond {
			t.Errorf("prefill worker's prefill took %v, want 40ms for 40 tokens", got)
		}
		dr, ok := d.Record("r1")
		if !ok {
			t.Fatal("no decode record r1")
		}
		if dr.PrefillPeer != p.Addr() || !dr.RemotePrefill || dr.RemoteEngineID != "p" || dr.RemoteDecode ||
			dr.TransferredTokens != 39 || dr.CachedTokens != 0 || dr.CompletionTokens != 5 {
			t.Errorf("decode record %+v, want 5 tokens decoded from p's KV (%s), 39 tokens transferred", dr, p.Addr())
		}
		if got := dr.FirstToken.Sub(dr.Admitted); got != time.Millisecond {
			t.Errorf("decode worker's prefill took %v, want 1ms for the last token only", got)
		}

		// The KV ended up on the decode worker: a repeat hits its cache.
		again := decodeBody[completionJSON](t, c.post(t.Context(), mockworker.PathCompletions,
			map[string]any{"prompt": ids(0, 40), "max_tokens": 2}, "X-Request-Id", "r2"))
		if again.Usage == nil || again.Usage.PromptTokensDetails.CachedTokens != 32 {
			t.Errorf("repeat usage %+v, want 32 cached tokens", again.Usage)
		}
		if rec, _ := d.Record("r2"); rec.CachedTokens != 32 || rec.TransferredTokens != 0 || rec.PrefillPeer != "" {
			t.Errorf("repeat record %+v, want 32 cached, none transferred, no prefill peer", rec)
		}
		if got := d.Stats().PrefillCalls; got != 1 {
			t.Errorf("prefill calls %d after a repeat without the header, want 1", got)
		}

		_, metrics := c.get(mockworker.PathMetrics)
		for _, want := range []string{
			`source="external_kv_transfer"} 39`, `source="local_cache_hit"} 32`, `source="local_compute"} 9`,
			`vllm:prompt_tokens_total{engine="0",model_name="m"} 80`,
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("decode metrics lack %q", want)
			}
		}
	})
}

func TestSidecar_PrefillCallShape(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet(t)
		var (
			mu     sync.Mutex
			path   string
			header http.Header
			body   map[string]any
		)
		fake := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			path, header = r.URL.Path, r.Header.Clone()
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				t.Errorf("prefill body: %v", err)
			}
			_, _ = io.WriteString(rw, `{"choices":[],"kv_transfer_params":{"do_remote_prefill":true,`+
				`"remote_engine_id":"fake-engine","remote_block_ids":[[7,8]],"remote_host":"192.0.2.9","remote_port":5600}}`)
		})}
		l, fakeAddr := n.net.Listen()
		served := make(chan struct{})
		go func() {
			defer close(served)
			_ = fake.Serve(l)
		}()
		t.Cleanup(func() {
			_ = fake.Close()
			<-served
		})
		dcfg := pd
		dcfg.Role = mockworker.RoleDecode
		d := n.start(dcfg)

		messages := []map[string]string{{"role": "user", "content": "hello"}}
		resp := n.client(d).post(t.Context(), mockworker.PathChatCompletions, map[string]any{
			"model": "m", "messages": messages, "max_tokens": 7, "max_completion_tokens": 7, "temperature": 0.5,
			"stream": true, "stream_options": map[string]bool{"include_usage": true},
		}, "X-Request-Id", "r1", "X-Custom", "v", mockworker.HeaderPrefillerHostPort, fakeAddr)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
		if u := lastUsage(t, resp); u.CompletionTokens != 7 {
			t.Errorf("decode usage %+v, want 7 completion tokens", u)
		}

		mu.Lock()
		defer mu.Unlock()
		if path != mockworker.PathChatCompletions {
			t.Errorf("prefill call to %q, want %q", path, mockworker.PathChatCompletions)
		}
		wantBody := map[string]any{
			"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hello"}},
			"max_tokens": 1.0, "max_completion_tokens": 1.0, "temperature": 0.5, "stream": false,
			"kv_transfer_params": map[string]any{
				"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
				"remote_block_ids": nil, "remote_host": nil, "remote_port": nil,
			},
		}
		if diff := cmp.Diff(wantBody, body); diff != "" {
			t.Errorf("prefill body (-want +got):\n%s", diff)
		}
		if header.Get("X-Request-Id") != "r1" || header.Get("X-Custom") != "v" ||
			header.Get("Content-Type") != "application/json" || header.Get(mockworker.HeaderPrefillerHostPort) != "" {
			t.Errorf("prefill header %v, want the client's with its request id, without the prefiller header", header)
		}
		if rec, _ := d.Record("r1"); rec.PrefillPeer != fakeAddr || rec.RemoteEngineID != "fake-engine" || !rec.RemotePrefill {
			t.Errorf("decode record %+v, want the KV of fake-engine at %s", rec, fakeAddr)
		}
	})
}

func TestSidecar_MalformedHeaderIsInvalidEPPMetadata(t *testing.T) {
	d := mockworker.Start(t, mockworker.Config{Model: "m", Role: mockworker.RoleDecode})
	c := newClient(t, d.URL())
	for _, tt := range []struct {
		name   string
		values []string
	}{
		{name: "no port", values: []string{"10.0.0.1"}},
		{name: "host name", values: []string{"pod-a:8000"}},
		{name: "port 0", values: []string{"10.0.0.1:0"}},
		{name: "port out of range", values: []string{"10.0.0.1:70000"}},
		{name: "list", values: []string{"10.0.0.1:8000,10.0.0.2:8000"}},
		{name: "URL", values: []string{"http://10.0.0.1:8000"}},
		{name: "two values", values: []string{"10.0.0.1:8000", "10.0.0.2:8000"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var headers []string
			for _, v := range tt.values {
				headers = append(headers, mockworker.HeaderPrefillerHostPort, v)
			}
			resp := c.post(t.Context(), mockworker.PathCompletions, map[string]any{"prompt": "hello"}, headers...)
			expectSidecarError(t, resp, mockworker.CodeInvalidEPPMetadata)
		})
	}
	if st := d.Stats(); st.Received != 0 || st.PrefillCalls != 0 {
		t.Errorf("stats %+v, want no request served and no prefill call", st)
	}
}

func TestSidecar_FailedPrefillIsPrefillFailed(t *testing.T) {
	tests := []struct {
		name string
		// peer returns the prefill worker's address.
		peer func(n *memNet) string
		// timesOut: the answer comes at the prefill timeout.
		timesOut bool
	}{
		{name: "unreachable", peer: func(n *memNet) string { return n.net.Reserve() }},
		{name: "error answer", peer: func(n *memNet) string {
			return n.start(mockworker.Config{Model: "other"}).Addr() // Answers 404 for model m.
		}},
		{name: "timeout", peer: func(n *memNet) string {
			cfg := pd
			cfg.Hold = func(ctx context.Context, _ mockworker.RequestInfo) error {
				<-ctx.Done()
				return ctx.Err()
			}
			return n.start(cfg).Addr()
		}, timesOut: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := newMemNet(t)
				dcfg := pd
				dcfg.PrefillTimeout = 2 * time.Second
				d := n.start(dcfg)
				start := time.Now()
				resp := n.client(d).post(t.Context(), mockworker.PathCompletions, map[string]any{"model": "m", "prompt": "hello"},
					mockworker.HeaderPrefillerHostPort, tt.peer(n))
				expectSidecarError(t, resp, mockworker.CodePrefillFailed)
				if elapsed := time.Since(start); (elapsed == dcfg.PrefillTimeout) != tt.timesOut {
					t.Errorf("answered after %v; prefill timeout %v, want timeout %v", elapsed, dcfg.PrefillTimeout, tt.timesOut)
				}
				if st := d.Stats(); st.PrefillCalls != 1 || st.PrefillFailures != 1 || st.Received != 0 {
					t.Errorf("stats %+v, want one failed prefill call and nothing decoded", st)
				}
			})
		})
	}
}

func TestSidecar_NoHeaderServesLocally(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet(t)
		dcfg := pd
		dcfg.Role = mockworker.RoleDecode
		d := n.start(dcfg)
		body := decodeBody[completionJSON](t, n.client(d).post(t.Context(), mockworker.PathCompletions,
			map[string]any{"prompt": ids(0, 40), "max_tokens": 2}, "X-Request-Id", "r1"))
		if body.Usage == nil || body.Usage.PromptTokens != 40 || body.Usage.PromptTokensDetails.CachedTokens != 0 {
			t.Errorf("usage %+v, want 40 prompt tokens, none cached", body.Usage)
		}
		rec, _ := d.Record("r1")
		if rec.PrefillPeer != "" || rec.RemotePrefill || rec.TransferredTokens != 0 || rec.FirstToken.Sub(rec.Admitted) != 40*time.Millisecond {
			t.Errorf("record %+v, want a local prefill of 40ms", rec)
		}
		if st := d.Stats(); st.PrefillCalls != 0 {
			t.Errorf("prefill calls %d, want 0", st.PrefillCalls)
		}
	})
}

func TestSidecar_PrefillRoleIgnoresHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet(t)
		pcfg := pd
		pcfg.Role = mockworker.RolePrefill
		p := n.start(pcfg)
		resp := n.client(p).post(t.Context(), mockworker.PathCompletions, map[string]any{"prompt": "hello"},
			"X-Request-Id", "r1", mockworker.HeaderPrefillerHostPort, n.net.Reserve())
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want 200: a prefill worker has no sidecar", resp.StatusCode)
		}
		if rec, _ := p.Record("r1"); rec.PrefillPeer != "" || p.Stats().PrefillCalls != 0 {
			t.Errorf("record %+v, stats %+v, want no prefill call", rec, p.Stats())
		}
	})
}

func TestSidecar_BothRolesDoNotLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet(t)
		a, b := n.start(pd), n.start(pd)
		c := n.client(a)
		for _, peer := range []*mockworker.Worker{b, a} { // Another worker, then itself.
			resp := c.post(t.Context(), mockworker.PathCompletions, map[string]any{"prompt": "hello"},
				mockworker.HeaderPrefillerHostPort, peer.Addr())
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("prefill on %s: status %d, want 200", peer.Addr(), resp.StatusCode)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
		}
		as, bs := a.Stats(), b.Stats()
		if as.PrefillCalls != 2 || as.PrefillServed != 1 || bs.PrefillCalls != 0 || bs.PrefillServed != 1 {
			t.Errorf("stats a %+v, b %+v, want a's 2 calls served once by each, no call from b", as, bs)
		}
	})
}

func TestWorker_KVTransferParams(t *testing.T) {
	prefillOnly := map[string]any{"prompt": ids(0, 40), "max_tokens": 1,
		"kv_transfer_params": map[string]any{"do_remote_decode": true}}
	wantParams := func(host string, port int) map[string]any {
		return map[string]any{
			"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id": "p", "remote_request_id": "r1",
			"remote_block_ids": []any{0.0, 1.0, 2.0}, "remote_host": host, "remote_port": float64(port), "tp_size": 1.0,
		}
	}
	answer := func(t *testing.T, c *client, body map[string]any) map[string]any {
		t.Helper()
		resp := c.post(t.Context(), mockworker.PathCompletions, body, "X-Request-Id", "r1")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
		return decodeBody[map[string]any](t, resp)
	}

	t.Run("prefill answer names the worker", func(t *testing.T) {
		p := mockworker.Start(t, mockworker.Config{ID: "p", Model: "m", Speed: 1000})
		got := answer(t, newClient(t, p.URL()), prefillOnly)["kv_transfer_params"]
		host, portStr, _ := net.SplitHostPort(p.Addr())
		port, _ := strconv.Atoi(portStr)
		if diff := cmp.Diff(wantParams(host, port), got); diff != "" {
			t.Errorf("kv_transfer_params (-want +got):\n%s", diff)
		}
		if st := p.Stats(); st.PrefillServed != 1 || st.CachedBlocks != 2 {
			t.Errorf("stats %+v, want one prefill served and its 2 blocks cached", st)
		}
	})
	t.Run("mounted elsewhere, the Host names it", func(t *testing.T) {
		p, err := mockworker.New(mockworker.Config{ID: "p", Model: "m", Speed: 1000})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(p.Handler())
		t.Cleanup(func() {
			_ = p.Close()
			srv.Close()
		})
		got := answer(t, newClient(t, srv.URL), prefillOnly)["kv_transfer_params"]
		host, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
		port, _ := strconv.Atoi(portStr)
		if diff := cmp.Diff(wantParams(host, port), got); diff != "" {
			t.Errorf("kv_transfer_params (-want +got):\n%s", diff)
		}
	})
	t.Run("a plain answer has none", func(t *testing.T) {
		w := mockworker.Start(t, fast)
		if got, ok := answer(t, newClient(t, w.URL()), map[string]any{"prompt": "hello"})["kv_transfer_params"]; ok {
			t.Errorf("kv_transfer_params %v in a plain answer", got)
		}
	})
	t.Run("a remote-prefill request sent directly", func(t *testing.T) {
		w := mockworker.Start(t, fast)
		body := answer(t, newClient(t, w.URL()), map[string]any{"prompt": ids(0, 40), "max_tokens": 2,
			"kv_transfer_params": map[string]any{"do_remote_prefill": true, "remote_engine_id": "e1"}})
		if got := body["usage"].(map[string]any)["prompt_tokens_details"]; !cmp.Equal(got, map[string]any{"cached_tokens": 39.0}) {
			t.Errorf("prompt_tokens_details %v, want 39 cached tokens", got)
		}
		if rec, _ := w.Record("r1"); !rec.RemotePrefill || rec.RemoteEngineID != "e1" || rec.TransferredTokens != 39 || rec.PrefillPeer != "" {
			t.Errorf("record %+v, want 39 tokens transferred from e1 without a sidecar call", rec)
		}
	})
	t.Run("both directions at once", func(t *testing.T) {
		w := mockworker.Start(t, fast)
		resp := newClient(t, w.URL()).post(t.Context(), mockworker.PathCompletions, map[string]any{"prompt": "hello",
			"kv_transfer_params": map[string]any{"do_remote_prefill": true, "do_remote_decode": true}})
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("status %d, want 400", resp.StatusCode)
		}
	})
}
