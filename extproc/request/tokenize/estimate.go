package tokenize

import (
	"math"
	"sync"
	"sync/atomic"
)

// Estimator calibration.
const (
	// DefaultBytesPerToken is the starting ratio: English text in the
	// common BPE vocabularies runs at about four bytes per token.
	DefaultBytesPerToken = 4.0
	// MinBytesPerToken and MaxBytesPerToken bound the ratio (CJK text
	// runs near 1.5, whitespace-heavy code above 5).
	MinBytesPerToken = 1.0
	MaxBytesPerToken = 12.0
	// minObserveTokens and minObserveBytes drop samples too small to say
	// anything about the ratio (the chat template's fixed tokens dominate).
	minObserveTokens = 16
	minObserveBytes  = 64
	// ewmaWeight is the weight of each new sample.
	ewmaWeight = 0.1
	// maxModels bounds the per-model table; further models share one
	// entry.
	maxModels = 1024
)

// Estimator estimates token counts from text length, with a bytes-per-token
// ratio per model calibrated online from the counts workers report. It is
// safe for concurrent use.
type Estimator struct {
	mu     sync.RWMutex
	models map[string]*ratio
	shared ratio // for models beyond maxModels
}

// ratio is a bytes-per-token EWMA stored as float64 bits.
type ratio struct{ bits atomic.Uint64 }

func (r *ratio) load() float64 { return math.Float64frombits(r.bits.Load()) }

func (r *ratio) observe(sample float64) {
	for {
		old := r.bits.Load()
		next := math.Float64frombits(old)*(1-ewmaWeight) + sample*ewmaWeight
		if r.bits.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}

func newRatio() *ratio {
	r := &ratio{}
	r.bits.Store(math.Float64bits(DefaultBytesPerToken))
	return r
}

// NewEstimator returns an estimator with every model at
// DefaultBytesPerToken.
func NewEstimator() *Estimator {
	e := &Estimator{models: make(map[string]*ratio)}
	e.shared.bits.Store(math.Float64bits(DefaultBytesPerToken))
	return e
}

// Encode returns nil ids and the estimated token count of text:
// ceil(len(text) / bytes-per-token of model).
func (e *Estimator) Encode(model, text string, _ []uint32) ([]uint32, int) {
	return nil, e.Estimate(model, len(text))
}

// Estimate returns the estimated token count of textBytes bytes of text.
func (e *Estimator) Estimate(model string, textBytes int) int {
	if textBytes <= 0 {
		return 0
	}
	return int(math.Ceil(float64(textBytes) / e.BytesPerToken(model)))
}

// BytesPerToken returns the current ratio for model.
func (e *Estimator) BytesPerToken(model string) float64 {
	e.mu.RLock()
	r, ok := e.models[model]
	if !ok && len(e.models) >= maxModels {
		r, ok = &e.shared, true
	}
	e.mu.RUnlock()
	if !ok {
		return DefaultBytesPerToken
	}
	return r.load()
}

// Observe folds one reported prompt length into model's ratio. Samples
// smaller than 16 tokens or 64 bytes are ignored, and each sample is clamped
// to [MinBytesPerToken, MaxBytesPerToken] before it is averaged in with
// weight 0.1.
func (e *Estimator) Observe(model string, textBytes, promptTokens int) {
	if promptTokens < minObserveTokens || textBytes < minObserveBytes {
		return
	}
	sample := min(max(float64(textBytes)/float64(promptTokens), MinBytesPerToken), MaxBytesPerToken)
	e.ratioFor(model).observe(sample)
}

func (e *Estimator) ratioFor(model string) *ratio {
	e.mu.RLock()
	r, ok := e.models[model]
	e.mu.RUnlock()
	if ok {
		return r
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.models[model]; ok {
		return r
	}
	if len(e.models) >= maxModels {
		return &e.shared
	}
	r = newRatio()
	e.models[model] = r
	return r
}

// Exact reports false: the estimator produces no ids.
func (e *Estimator) Exact() bool { return false }

// Name returns "estimate".
func (e *Estimator) Name() string { return "estimate" }
