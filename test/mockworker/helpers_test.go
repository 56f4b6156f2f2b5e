package mockworker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/test/mockworker"
)

// client is an HTTP client for one worker, with its own transport so no
// connection outlives the test.
type client struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newClient(t *testing.T, base string) *client {
	t.Helper()
	return newClientVia(t, base, nil)
}

// newClientVia is newClient dialing with dial (nil: a net.Dialer).
func newClientVia(t *testing.T, base string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *client {
	t.Helper()
	tr := &http.Transport{DialContext: dial}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{t: t, base: base, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// post sends body as JSON with the given headers (name, value pairs; a
// name given twice is sent with both values).
func (c *client) post(ctx context.Context, path string, body any, headers ...string) *http.Response {
	c.t.Helper()
	var data []byte
	switch b := body.(type) {
	case string:
		data = []byte(b)
	default:
		var err error
		if data, err = json.Marshal(b); err != nil {
			c.t.Fatal(err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(data))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("POST %s: %v", path, err)
	}
	c.t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// get fetches path and returns the status and body.
func (c *client) get(path string) (int, string) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), http.MethodGet, c.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// decodeBody decodes a JSON response body into a T.
func decodeBody[T any](t *testing.T, resp *http.Response) T {
	t.Helper()
	var v T
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("decoding response: %v (status %d, header %v)", err, resp.StatusCode, resp.Header)
	}
	return v
}

// usageJSON is the usage object as a client sees it.
type usageJSON struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type messageJSON struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// completionJSON is a completion, chat completion or chunk of either.
type completionJSON struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int          `json:"index"`
		Text         string       `json:"text"`
		Message      *messageJSON `json:"message"`
		Delta        *messageJSON `json:"delta"`
		FinishReason *string      `json:"finish_reason"`
	} `json:"choices"`
	Usage *usageJSON `json:"usage"`
}

type errorJSON struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	} `json:"error"`
}

// sseReader reads server-sent events of the form "data: <payload>\n\n".
type sseReader struct{ r *bufio.Reader }

func newSSEReader(r io.Reader) *sseReader { return &sseReader{r: bufio.NewReader(r)} }

// next returns the next event's payload, io.EOF at a clean end, or an error
// naming a malformed event.
func (s *sseReader) next() (string, error) {
	line, err := s.r.ReadString('\n')
	if err != nil {
		if errors.Is(err, io.EOF) && line == "" {
			return "", io.EOF
		}
		return "", fmt.Errorf("reading event: %w (partial %q)", err, line)
	}
	payload, ok := strings.CutPrefix(line, "data: ")
	if !ok {
		return "", fmt.Errorf("event line %q does not start with \"data: \"", line)
	}
	blank, err := s.r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("event %q: reading the blank line after it: %w", line, err)
	}
	if blank != "\n" {
		return "", fmt.Errorf("event %q is followed by %q, want a blank line", line, blank)
	}
	return strings.TrimSuffix(payload, "\n"), nil
}

// all returns every remaining payload up to a clean end.
func (s *sseReader) all(t *testing.T) []string {
	t.Helper()
	var out []string
	for {
		p, err := s.next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
}

// await waits up to 5 s for cond on w's counters.
func await(t *testing.T, w *mockworker.Worker, what string, cond func(mockworker.Stats) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := w.Await(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v (stats %+v)", what, err, w.Stats())
	}
}

// ids returns n token ids starting at first, a prompt of exactly n tokens.
func ids(first, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = first + i
	}
	return out
}
