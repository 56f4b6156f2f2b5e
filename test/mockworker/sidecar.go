package mockworker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// HeaderPrefillerHostPort is llm-d's request header naming, as "IP:port",
// the prefill worker of a disaggregated request routed to a decode worker.
const HeaderPrefillerHostPort = "X-Prefiller-Host-Port"

// The decode sidecar's error codes, in the "code" of its 502 answers.
const (
	// CodeInvalidEPPMetadata: x-prefiller-host-port is not one IP:port.
	CodeInvalidEPPMetadata = "invalid_epp_metadata"
	// CodePrefillFailed: the prefill worker could not be reached, did not
	// answer in time, or answered with an error.
	CodePrefillFailed = "prefill_failed"
)

// prefillKVParams are the kv_transfer_params of a prefill call, as llm-d's
// sidecar sends them to vLLM's NIXL connector.
const prefillKVParams = `{"do_remote_decode":true,"do_remote_prefill":false,` +
	`"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`

// maxPrefillAnswer bounds the prefill answer the sidecar reads.
const maxPrefillAnswer = 1 << 20

// newSidecarClient returns the sidecar's HTTP client, dialing with dial
// (nil: a net.Dialer). Its idle connections are kept for the next calls.
func newSidecarClient(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         dial,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// sidecarError is the body of the sidecar's own error answers: the OpenAI
// error shape with a code that names the fault, where vLLM puts the status.
type sidecarError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// writeSidecarError answers 502 with the sidecar error code and message.
func writeSidecarError(rw http.ResponseWriter, code, message string) {
	writeJSON(rw, http.StatusBadGateway, map[string]sidecarError{
		"error": {Message: message, Type: "BadGateway", Code: code},
	})
}

// writePrefillError answers a failed prefill call: 503 when the worker is
// closing, 502 prefill_failed otherwise.
func (w *Worker) writePrefillError(rw http.ResponseWriter, err error) {
	if w.ctx.Err() != nil {
		writeError(rw, errShuttingDown())
		return
	}
	writeSidecarError(rw, CodePrefillFailed, err.Error())
}

// prefillPeer returns the prefill worker that h's x-prefiller-host-port
// names, or "" when the header is absent or empty (as llm-d's sidecar reads
// it) or the worker runs no sidecar. A value that is not one IP:port literal
// is an error.
func (w *Worker) prefillPeer(h http.Header) (string, error) {
	vals := h.Values(HeaderPrefillerHostPort)
	if !w.cfg.Role.sidecar() || len(vals) == 0 || (len(vals) == 1 && vals[0] == "") {
		return "", nil
	}
	if len(vals) == 1 {
		if ap, err := netip.ParseAddrPort(vals[0]); err == nil && ap.Port() != 0 {
			return vals[0], nil
		}
	}
	return "", fmt.Errorf("mockworker: %s must be one IP:port, got %q",
		strings.ToLower(HeaderPrefillerHostPort), strings.Join(vals, ", "))
}

// prefill has the prefill worker at peer run the prefill half of the
// request info describes, and counts the call. It returns the
// kv_transfer_params for the decode half.
func (w *Worker) prefill(ctx context.Context, h http.Header, peer string, info RequestInfo, body []byte) (kvTransferParams, error) {
	w.engine.count(func(s *Stats) { s.PrefillCalls++ })
	kv, err := w.callPrefill(ctx, h, peer, info, body)
	if err != nil {
		w.engine.count(func(s *Stats) { s.PrefillFailures++ })
		w.cfg.Logger.Warn("prefill failed", slog.String("id", info.ID), slog.String("peer", peer),
			slog.String("error", err.Error()))
	}
	return kv, err
}

// callPrefill makes the prefill call as llm-d's sidecar does for vLLM's
// NIXL connector (see prefillBody and prefillHeader), within
// Config.PrefillTimeout, and returns the answer's kv_transfer_params. An
// answer without them gives zero params, so that the decode half computes
// the prompt itself, as it would behind llm-d's sidecar.
func (w *Worker) callPrefill(ctx context.Context, h http.Header, peer string, info RequestInfo, body []byte) (kvTransferParams, error) {
	var none kvTransferParams
	pbody, err := prefillBody(body)
	if err != nil {
		return none, err
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.PrefillTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+peer+info.Endpoint, bytes.NewReader(pbody))
	if err != nil {
		return none, fmt.Errorf("mockworker: prefill request to %s: %w", peer, err)
	}
	req.Header = prefillHeader(h, info.ID)
	resp, err := w.client.Do(req)
	if err != nil {
		return none, fmt.Errorf("mockworker: prefill worker %s: %w", peer, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxPrefillAnswer))
	if err != nil {
		return none, fmt.Errorf("mockworker: prefill worker %s: reading its answer: %w", peer, err)
	}
	if resp.StatusCode/100 != 2 {
		return none, fmt.Errorf("mockworker: prefill worker %s answered %d: %s", peer, resp.StatusCode, bytes.TrimSpace(data))
	}
	var answer struct {
		KVTransferParams *kvTransferParams `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(data, &answer); err != nil {
		return none, fmt.Errorf("mockworker: prefill worker %s: decoding its answer: %w", peer, err)
	}
	if answer.KVTransferParams == nil {
		w.cfg.Logger.Warn("prefill answer lacks kv_transfer_params", slog.String("id", info.ID), slog.String("peer", peer))
		return none, nil
	}
	return *answer.KVTransferParams, nil
}

// prefillBody is the prefill call's body: the client's request, every field
// kept, with max_tokens 1 (and max_completion_tokens 1 if set), stream
// false, no stream_options, and kv_transfer_params asking for the prefill
// half only.
func prefillBody(body []byte) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, fmt.Errorf("mockworker: prefill body: %w", err)
	}
	one := json.RawMessage("1")
	fields["max_tokens"] = one
	if _, ok := fields["max_completion_tokens"]; ok {
		fields["max_completion_tokens"] = one
	}
	fields["stream"] = json.RawMessage("false")
	delete(fields, "stream_options")
	fields["kv_transfer_params"] = json.RawMessage(prefillKVParams)
	return json.Marshal(fields)
}

// prefillHeader is the prefill call's header: the client's, with the
// request's ID and a JSON content type, less x-prefiller-host-port (so that
// a prefill worker with a sidecar of its own does not call on).
func prefillHeader(h http.Header, id string) http.Header {
	out := h.Clone()
	out.Del(HeaderPrefillerHostPort)
	out.Del("Content-Length")
	out.Set("X-Request-Id", id)
	out.Set("Content-Type", "application/json")
	return out
}

// kvSource is the kv_transfer_params answering the prefill half rec: this
// worker's ID as the engine, its address (or the request's Host, when it is
// served elsewhere) as the side channel, and, having no physical blocks,
// the indexes of the prompt's blocks as block ids.
func (w *Worker) kvSource(r *http.Request, rec Record) *kvTransferParams {
	host, port := splitHostPort(cmp.Or(w.Addr(), r.Host))
	blocks := make([]int, (rec.PromptTokens+w.cfg.BlockSize-1)/w.cfg.BlockSize)
	for i := range blocks {
		blocks[i] = i
	}
	return &kvTransferParams{
		DoRemotePrefill: true,
		RemoteEngineID:  w.cfg.ID,
		RemoteRequestID: rec.ID,
		RemoteBlockIDs:  blocks,
		RemoteHost:      host,
		RemotePort:      port,
		TPSize:          1,
	}
}

// splitHostPort splits "host:port"; an address without a numeric port is
// all host, with port 0.
func splitHostPort(addr string) (string, int) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 0
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return host, 0
	}
	return host, port
}
