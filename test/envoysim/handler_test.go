package envoysim

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// gateway serves sim.Handler on 127.0.0.1:0 and returns its base URL and a
// client that does not share connections with other tests.
func gateway(t *testing.T, sim *Sim) (string, *http.Client) {
	t.Helper()
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return srv.URL, &http.Client{Transport: tr}
}

// Server-sent events reach the client as the worker emits them.
func TestHandler_StreamsServerSentEvents(t *testing.T) {
	next := make(chan struct{})
	addr := backend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i, ev := range []string{"data: one\n\n", "data: two\n\n"} {
			if i > 0 {
				select {
				case <-next:
				case <-r.Context().Done():
					return
				}
			}
			_, _ = io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	})
	rec := &recorder{}
	sim := newSim(t, Config{Mode: mode(bodyBuffered, true, bodyStreamed), RequestAttributes: []string{"source.address"}},
		serveAll(rec, addr))
	url, client := gateway(t, sim)
	resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer closeBody(resp)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "data: one\n" {
		t.Fatalf("first line %q, %v: the first event must arrive before the second is sent", line, err)
	}
	close(next)
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != "\ndata: two\n\n" {
		t.Errorf("rest %q, %v", rest, err)
	}
	msgs := rec.all()
	hh := msgs[0].GetRequestHeaders().GetHeaders().GetHeaders()
	var authority string
	for _, h := range hh {
		if h.GetKey() == ":authority" {
			authority = string(h.GetRawValue())
		}
	}
	if !strings.HasPrefix(url, "http://"+authority) {
		t.Errorf(":authority %q, want the gateway's host", authority)
	}
	if got := shape(msgs[1]); got != `request_body("{\"stream\":true}")+eos` {
		t.Errorf("second message %s", got)
	}
	if src := msgs[0].GetAttributes()[attributesKey].GetFields()["source.address"].GetStringValue(); !strings.HasPrefix(src, "127.0.0.1:") {
		t.Errorf("source.address %q", src)
	}
}

// A local reply reaches the client with its status, headers and body.
func TestHandler_LocalReply(t *testing.T) {
	sim := newSim(t, headersOnly(), replyOnce(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("retry-after", "2")}},
			Body:    []byte(`{"error":{"code":"scheduler_queue_full"}}`),
		}}}))
	url, client := gateway(t, sim)
	resp, err := client.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer closeBody(resp)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "2" ||
		string(body) != `{"error":{"code":"scheduler_queue_full"}}` {
		t.Errorf("status %d headers %v body %q", resp.StatusCode, resp.Header, body)
	}
}

// A body over the limit gets 413 without reaching the ext_proc server.
func TestHandler_BodyTooLarge(t *testing.T) {
	rec := &recorder{}
	cfg := headersOnly()
	cfg.MaxRequestBodyBytes = 8
	sim := newSim(t, cfg, serveAll(rec, ""))
	url, client := gateway(t, sim)
	resp, err := client.Post(url, "text/plain", strings.NewReader("0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	closeBody(resp)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || len(rec.all()) != 0 {
		t.Errorf("status %d, server saw %d messages", resp.StatusCode, len(rec.all()))
	}
}

// A client that hangs up while its request is held resets the side stream.
func TestHandler_ClientDisconnect(t *testing.T) {
	held, ended := make(chan struct{}, 1), make(chan string, 1)
	sim := newSim(t, headersOnly(), holdForever(held, ended, false))
	url, client := gateway(t, sim)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		waitFor(t, held, "request held")
		cancel()
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if resp, err := client.Do(req); err == nil {
		closeBody(resp)
		t.Fatal("request succeeded, want it cancelled")
	}
	if got := waitFor(t, ended, "server stream end"); got != "cancelled" {
		t.Errorf("server saw %s", got)
	}
}

// A reset after the response started aborts the client's connection.
func TestHandler_ResetAbortsConnection(t *testing.T) {
	addr := backend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	sim := newSim(t, headersOnly(), replyOnce(headersReply(setHeader(DefaultDestinationHeader, addr))))
	url, client := gateway(t, sim)
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBody(resp)
	if body, err := io.ReadAll(resp.Body); err == nil {
		t.Errorf("read %q without error, want a truncated response", body)
	}
}

// closeBody closes a client response body; the error is irrelevant to tests.
func closeBody(resp *http.Response) { _ = resp.Body.Close() }
