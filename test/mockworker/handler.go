package mockworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// HeaderWorkerID is the response header naming the worker that served a
// request, so tests behind a router can see where a request went.
const HeaderWorkerID = "X-Mockworker-Id"

// routes builds the worker's HTTP handler.
func (w *Worker) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathCompletions, func(rw http.ResponseWriter, r *http.Request) {
		w.serveGenerate(rw, r, false)
	})
	mux.HandleFunc("POST "+PathChatCompletions, func(rw http.ResponseWriter, r *http.Request) {
		w.serveGenerate(rw, r, true)
	})
	mux.HandleFunc("GET "+PathModels, w.serveModels)
	mux.HandleFunc("GET "+PathHealth, w.serveHealth)
	mux.Handle("GET "+PathMetrics, w.metrics.handler())
	return mux
}

// serveGenerate answers a completions or chat completions request.
func (w *Worker) serveGenerate(rw http.ResponseWriter, r *http.Request, chat bool) {
	ctx, done, ok := w.begin(r.Context())
	if !ok {
		writeError(rw, errShuttingDown())
		return
	}
	defer done()

	peer, err := w.prefillPeer(r.Header)
	if err != nil {
		writeSidecarError(rw, CodeInvalidEPPMetadata, err.Error())
		return
	}
	body, req, apiErr := w.readGenerate(rw, r, chat)
	if apiErr != nil {
		writeError(rw, apiErr)
		return
	}
	info := w.requestInfo(r.Header, req)
	if peer != "" {
		if req.kv, err = w.prefill(ctx, r.Header, peer, info, body); err != nil {
			if r.Context().Err() == nil {
				w.writePrefillError(rw, err)
			}
			return
		}
		info.PrefillPeer = peer
	}
	info.RemoteDecode, info.RemotePrefill = req.kv.DoRemoteDecode, req.kv.DoRemotePrefill
	if info.RemotePrefill {
		info.RemoteEngineID = req.kv.RemoteEngineID
	}
	rw.Header().Set("X-Request-Id", info.ID)
	rw.Header().Set(HeaderWorkerID, w.cfg.ID)
	base := response{ID: "cmpl-" + info.ID, Object: "text_completion", Created: time.Now().Unix(), Model: req.model}
	if chat {
		base.ID, base.Object = "chatcmpl-"+info.ID, "chat.completion"
	}

	if req.stream {
		w.stream(ctx, rw, r, req, info, base)
		return
	}
	rec, err := w.engine.run(ctx, info, req.tokens, func(int) error { return nil })
	w.logEnd(rec, err)
	if err != nil {
		if r.Context().Err() == nil { // The client is still there to tell.
			writeError(rw, w.runError(err))
		}
		return
	}
	text := FillerText(rec.CompletionTokens)
	c := choice{FinishReason: new(finishLength)}
	if chat {
		c.Message = &chatResponse{Role: "assistant", Content: text}
	} else {
		c.Text = &text
	}
	base.Choices = []choice{c}
	base.Usage = newUsage(rec)
	if info.RemoteDecode {
		base.KVTransferParams = w.kvSource(r, rec)
	}
	writeJSON(rw, http.StatusOK, base)
}

// requestInfo describes req, received with header h.
func (w *Worker) requestInfo(h http.Header, req *generateRequest) RequestInfo {
	info := RequestInfo{
		ID:           w.requestID(h),
		Endpoint:     PathCompletions,
		Model:        req.model,
		Header:       h.Clone(),
		Stream:       req.stream,
		PromptTokens: len(req.tokens),
		MaxTokens:    req.maxTokens,
	}
	if req.chat {
		info.Endpoint = PathChatCompletions
	}
	return info
}

// readGenerate reads and validates a completions (chat false) or chat
// completions request body.
func (w *Worker) readGenerate(rw http.ResponseWriter, r *http.Request, chat bool) ([]byte, *generateRequest, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, int64(w.cfg.MaxBodyBytes)))
	if err != nil {
		if tooBig, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, nil, &apiError{
				Message: fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit),
				Type:    "BadRequestError", Code: http.StatusRequestEntityTooLarge,
			}
		}
		return nil, nil, badRequest("", "reading request body: %v", err)
	}
	req, apiErr := parseGenerate(body, chat, w.cfg)
	return body, req, apiErr
}

// stream answers a streamed request with server-sent events: one chunk per
// token (a chat stream first sends the assistant role), then a usage chunk
// if asked for, then "data: [DONE]". Headers go out at once, as vLLM sends
// them; the first body byte marks the first token.
func (w *Worker) stream(ctx context.Context, rw http.ResponseWriter, r *http.Request, req *generateRequest, info RequestInfo, base response) {
	rw.Header().Set("Content-Type", "text/event-stream")
	rw.Header().Set("Cache-Control", "no-cache")
	rw.WriteHeader(http.StatusOK)
	sse := sseWriter{w: rw, rc: http.NewResponseController(rw)}
	_ = sse.rc.Flush() // A client gone already is noticed through ctx.

	if req.chat {
		base.Object = "chat.completion.chunk" // Completion chunks keep "text_completion".
	}
	if req.includeUsage {
		base.Usage = jsonNull
	}
	chunk := func(c choice) response {
		out := base
		out.Choices = []choice{c}
		return out
	}
	emit := func(i int) error {
		tok := FillerToken(i)
		c := choice{}
		if req.chat {
			if i == 0 {
				if err := sse.send(chunk(choice{Delta: &chatResponse{Role: "assistant"}})); err != nil {
					return err
				}
			}
			c.Delta = &chatResponse{Content: tok}
		} else {
			c.Text = &tok
		}
		if i == req.maxTokens-1 {
			c.FinishReason = new(finishLength)
		}
		return sse.send(chunk(c))
	}

	rec, err := w.engine.run(ctx, info, req.tokens, emit)
	w.logEnd(rec, err)
	if err != nil {
		if r.Context().Err() == nil {
			// The status is already sent: report in-band, as vLLM does,
			// and leave out [DONE] so the client sees an incomplete stream.
			_ = sse.send(map[string]any{"error": w.runError(err)})
		}
		return
	}
	if req.includeUsage {
		final := base
		final.Choices = []choice{}
		final.Usage = newUsage(rec)
		if sse.send(final) != nil {
			return
		}
	}
	_ = sse.done()
}

// sseWriter writes server-sent events, flushing after each.
type sseWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

// send writes v as one "data: <json>" event.
func (s sseWriter) send(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("mockworker: encoding event: %w", err)
	}
	return s.write(append(append([]byte("data: "), data...), "\n\n"...))
}

// done writes the terminating "data: [DONE]" event.
func (s sseWriter) done() error { return s.write([]byte("data: [DONE]\n\n")) }

func (s sseWriter) write(b []byte) error {
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}

// runError is the answer to a sequence that ended early while its client
// was still connected.
func (w *Worker) runError(err error) *apiError {
	if w.ctx.Err() != nil {
		return errShuttingDown()
	}
	return &apiError{Message: err.Error(), Type: "ServiceUnavailableError", Code: http.StatusServiceUnavailable}
}

func errShuttingDown() *apiError {
	return &apiError{Message: "mockworker: worker is shutting down", Type: "ServiceUnavailableError", Code: http.StatusServiceUnavailable}
}

// serveModels lists the one served model.
func (w *Worker) serveModels(rw http.ResponseWriter, _ *http.Request) {
	writeJSON(rw, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id":            w.cfg.Model,
			"object":        "model",
			"created":       w.created,
			"owned_by":      "vllm",
			"root":          w.cfg.Model,
			"parent":        nil,
			"max_model_len": w.cfg.MaxModelLen,
		}},
	})
}

// serveHealth answers 200 with an empty body while the worker is open and
// 503 once it is closing.
func (w *Worker) serveHealth(rw http.ResponseWriter, _ *http.Request) {
	if w.ctx.Err() != nil {
		rw.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	rw.WriteHeader(http.StatusOK)
}

// writeError writes e as an OpenAI error body with e.Code as the status.
func writeError(rw http.ResponseWriter, e *apiError) {
	writeJSON(rw, e.Code, map[string]*apiError{"error": e})
}

func writeJSON(rw http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil { // Only the worker's own types get here; they always encode.
		http.Error(rw, "mockworker: encoding response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	_, _ = rw.Write(data) // A failed write means the client is gone.
}

// logEnd logs a request's end at debug level.
func (w *Worker) logEnd(rec Record, err error) {
	attrs := []slog.Attr{
		slog.String("id", rec.ID),
		slog.String("endpoint", rec.Endpoint),
		slog.String("outcome", rec.Outcome.String()),
		slog.Int("prompt_tokens", rec.PromptTokens),
		slog.Int("cached_tokens", rec.CachedTokens),
		slog.Int("completion_tokens", rec.CompletionTokens),
		slog.Duration("latency", rec.Finish.Sub(rec.Arrival)),
	}
	if rec.TransferredTokens > 0 {
		attrs = append(attrs, slog.Int("transferred_tokens", rec.TransferredTokens))
	}
	if rec.PrefillPeer != "" {
		attrs = append(attrs, slog.String("prefill_peer", rec.PrefillPeer))
	}
	if !rec.FirstToken.IsZero() {
		attrs = append(attrs, slog.Duration("ttft", rec.FirstToken.Sub(rec.Arrival)))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	w.cfg.Logger.LogAttrs(context.Background(), slog.LevelDebug, "request ended", attrs...)
}
