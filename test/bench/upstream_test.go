package bench

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
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

func TestUpstreamAnswersCompletions(t *testing.T) {
	u := NewUpstream()
	srv := httptest.NewServer(u)
	t.Cleanup(srv.Close)
	resp, body := post(t, srv.URL+"/v1/completions", strings.Repeat("x", 400))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var v struct {
		Choices []struct{ Text string }
		Usage   struct{ PromptTokens, CompletionTokens, TotalTokens int } `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if len(v.Choices) != 1 || !strings.Contains(body, `"prompt_tokens":100,"completion_tokens":1,"total_tokens":101`) {
		t.Errorf("body %q, want one choice and usage of 100 prompt tokens", body)
	}
	if u.Requests() != 1 {
		t.Errorf("Requests() = %d, want 1", u.Requests())
	}
}

func TestUpstreamHoldAndRelease(t *testing.T) {
	u := NewUpstream()
	srv := httptest.NewServer(u)
	t.Cleanup(srv.Close)
	if resp, _ := post(t, srv.URL+"/bench/hold?n=2", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("hold: %d", resp.StatusCode)
	}
	var wg sync.WaitGroup
	done := make(chan int, 3)
	for i := range 3 {
		wg.Go(func() {
			resp, _ := post(t, srv.URL+"/v1/completions", "{}")
			if resp.StatusCode == http.StatusOK {
				done <- i
			}
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for u.Parked() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d parked, want 2", u.Parked())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The third request is past the hold and is answered at once.
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the request after the held ones was not answered")
	}
	_, parked := post(t, srv.URL+"/bench/parked", "")
	if !strings.Contains(parked, `"parked":2`) {
		t.Errorf("/bench/parked = %q, want 2 parked", parked)
	}
	if resp, _ := post(t, srv.URL+"/bench/release", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("release: %d", resp.StatusCode)
	}
	wg.Wait()
	if len(done) != 2 {
		t.Errorf("%d held requests answered after release, want 2", len(done))
	}
	// A new hold parks again after a release.
	u.Hold(1)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/completions", strings.NewReader("{}"))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("a request after a second Hold was answered instead of parked")
	}
	if resp, _ := post(t, srv.URL+"/bench/hold?n=-1", ""); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("hold with n=-1: %d, want 400", resp.StatusCode)
	}
}

func TestUpstreamStreams(t *testing.T) {
	srv := httptest.NewServer(NewUpstream())
	t.Cleanup(srv.Close)
	get := func(h http.Header) (*http.Response, []string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(strings.Repeat("x", 40)))
		req.Header = h
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var reads []string
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				reads = append(reads, string(buf[:n]))
			}
			if err != nil {
				break
			}
		}
		return resp, reads
	}
	for _, oneWrite := range []bool{false, true} {
		h := http.Header{ChunksHeader: {"3"}, ChunkGapHeader: {"20ms"}}
		if oneWrite {
			h.Set(OneWriteHeader, "true")
		}
		resp, reads := get(h)
		body := strings.Join(reads, "")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("one write %v: status %d, type %q", oneWrite, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if strings.Count(body, `"text":" the"`) != 3 || !strings.HasSuffix(body, "data: [DONE]\n\n") ||
			!strings.Contains(body, `"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}`) {
			t.Errorf("one write %v: body %q", oneWrite, body)
		}
		// Paced events arrive one by one (the usage event may join the
		// last); written at once, together.
		if oneWrite && len(reads) != 1 || !oneWrite && len(reads) < 3 {
			t.Errorf("one write %v: %d reads %q", oneWrite, len(reads), reads)
		}
	}
	for _, h := range []http.Header{{ChunksHeader: {"0"}}, {ChunksHeader: {"2"}, ChunkGapHeader: {"soon"}}} {
		if resp, _ := get(h); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%v: status %d, want 400", h, resp.StatusCode)
		}
	}
}
