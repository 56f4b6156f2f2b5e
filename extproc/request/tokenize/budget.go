package tokenize

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/ardanlabs/jinja"
)

// Render budget. A chat template is a program the request's data drives:
// DeepSeek V3's concatenates every system message onto a growing string,
// so its cost is quadratic in their number. Rendering is metered while it
// runs (see meterTemplate) and stops once it has done more work than a
// fixed multiple of its input, the messages and tools JSON:
//
//   - steps: RenderStepsPerByte per input byte plus RenderBaseSteps,
//     counting each loop iteration and each value the template sets or
//     prints;
//   - bytes: RenderBytesPerByte per input byte plus RenderBaseBytes,
//     counting the size of each value the template sets or prints (a
//     string's length, a list's or dict's items; what it prints, in full).
//
// The shipped templates (Llama 2 and 3.1, Qwen 3, Gemma 3, DeepSeek V3)
// use less than an eighth of either on usual conversations, tools and
// floods of one-character turns; what exceeds it is a template whose work
// grows faster than its input, such as DeepSeek V3's with more than a few
// dozen system messages.
const (
	RenderStepsPerByte = 2
	RenderBaseSteps    = 1 << 16
	RenderBytesPerByte = 32
	RenderBaseBytes    = 4 << 20
)

// ErrRenderBudget is the error of a render that exceeded its budget (a
// *BudgetError matches it with errors.Is).
var ErrRenderBudget = errors.New("render budget exceeded")

// BudgetError says which render budget a conversation exceeded.
type BudgetError struct {
	// Limit is "steps" or "bytes".
	Limit string
	// Max is the budget, Input the input bytes it was computed from.
	Max, Input int64
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%v: more than %d template %s for %d bytes of messages and tools", ErrRenderBudget, e.Max, e.Limit, e.Input)
}

// Is matches ErrRenderBudget.
func (e *BudgetError) Is(target error) bool { return target == ErrRenderBudget }

// RenderCost is what one render did, for tests and benchmarks.
type RenderCost struct {
	Steps, Bytes int64
}

// meter counts one render's work against its budget and watches its
// context. It is used by the one goroutine that renders.
type meter struct {
	ctx      context.Context
	input    int64
	maxSteps int64
	maxBytes int64
	cost     RenderCost
	// nextYieldSteps and nextYieldBytes are the costs at which the render
	// next yields its thread.
	nextYieldSteps, nextYieldBytes int64
}

// A render yields its thread after yieldSteps steps or yieldBytes bytes.
const (
	yieldSteps = 4096
	yieldBytes = 1 << 20
)

func newMeter(ctx context.Context, inputBytes int) *meter {
	in := int64(inputBytes)
	return &meter{
		ctx:      ctx,
		input:    in,
		maxSteps: RenderStepsPerByte*in + RenderBaseSteps,
		maxBytes: RenderBytesPerByte*in + RenderBaseBytes,
	}
}

// charge adds work and fails once the budget is spent or the context is
// done.
func (m *meter) charge(steps, bytes int64) error {
	m.cost.Steps += steps
	m.cost.Bytes += bytes
	if m.cost.Steps >= m.nextYieldSteps || m.cost.Bytes >= m.nextYieldBytes {
		m.nextYieldSteps, m.nextYieldBytes = m.cost.Steps+yieldSteps, m.cost.Bytes+yieldBytes
		runtime.Gosched() // let the small requests' goroutines run
	}
	switch {
	case m.cost.Steps > m.maxSteps:
		return &BudgetError{Limit: "steps", Max: m.maxSteps, Input: m.input}
	case m.cost.Bytes > m.maxBytes:
		return &BudgetError{Limit: "bytes", Max: m.maxBytes, Input: m.input}
	}
	return m.ctx.Err()
}

// bytesLeft is what the bytes budget still allows.
func (m *meter) bytesLeft() int64 { return m.maxBytes - m.cost.Bytes }

// Names of the metering functions meterTemplate calls. They cannot clash
// with a template's own names in practice.
const (
	meterSet   = "__tollgate_set"
	meterPrint = "__tollgate_print"
	meterLoop  = "__tollgate_loop"
)

// callables returns the metering functions bound to m, as template
// variables. Each returns its argument unchanged.
func (m *meter) callables() map[string]jinja.Value {
	pass := func(charge func(v jinja.Value) (int64, int64)) func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		return func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			if len(args) != 1 {
				return jinja.Undefined(), errors.New("metering: want one argument")
			}
			steps, bytes := charge(args[0])
			if err := m.charge(steps, bytes); err != nil {
				return jinja.Undefined(), err
			}
			return args[0], nil
		}
	}
	return map[string]jinja.Value{
		// A set stores a value the expression built: charge its size.
		meterSet: jinja.NewCallable(meterSet, pass(func(v jinja.Value) (int64, int64) { return 1, shallowSize(v) })),
		// Printing walks the whole value.
		meterPrint: jinja.NewCallable(meterPrint, pass(func(v jinja.Value) (int64, int64) { return 1, deepSize(v, m.bytesLeft()+1) })),
		// A loop runs once per item.
		meterLoop: jinja.NewCallable(meterLoop, pass(func(v jinja.Value) (int64, int64) { return 1 + shallowSize(v), 0 })),
	}
}

// shallowSize is a string's length or a list's or dict's item count.
func shallowSize(v jinja.Value) int64 {
	switch {
	case v.IsString():
		return int64(len(v.AsString()))
	case v.IsList():
		return int64(v.AsList().Len())
	case v.IsDict():
		return int64(v.AsDict().Len())
	}
	return 1
}

// deepSize is the size of v with everything it holds, counted up to limit.
func deepSize(v jinja.Value, limit int64) int64 {
	switch {
	case v.IsList():
		n := int64(1)
		for _, it := range v.AsList().Items {
			if n += deepSize(it, limit-n); n > limit {
				break
			}
		}
		return n
	case v.IsDict():
		d := v.AsDict()
		n := int64(1)
		for _, k := range d.Keys {
			it, _ := d.Get(k)
			if n += int64(len(k)) + deepSize(it, limit-n); n > limit {
				break
			}
		}
		return n
	}
	return shallowSize(v)
}
