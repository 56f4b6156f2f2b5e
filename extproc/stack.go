package extproc

// exchangeStackFrame is the frame growStack puts on a goroutine that is
// about to run an exchange. With the few frames already below it, it
// takes more than 4 KiB, so the runtime gives the goroutine an 8 KiB
// stack at once and copies only those few frames.
//
// A BUFFERED or FULL_DUPLEX_STREAMED exchange with the estimating
// tokenizer needs between 4 and 8 KiB of stack (gRPC's Recv, planning, the
// dispatcher, Send; measured with debug.SetMaxStack). A new goroutine
// starts smaller (2 KiB, or the runtime's average of the stacks it last
// scanned), so without growStack every stream's stack grows once or twice
// deep inside the exchange, and each growth walks and copies every frame
// then live: 5 to 8 µs per exchange in BenchmarkExchange_NewGoroutine.
const exchangeStackFrame = 4 << 10

// stackIndex is a variable, so that the compiler keeps growStack's frame.
var stackIndex = 1

// growStack grows the calling goroutine's stack to 8 KiB, if it is
// smaller, while the stack is still shallow.
//
//go:noinline
func growStack() byte {
	var frame [exchangeStackFrame]byte
	frame[stackIndex] = 1
	return frame[stackIndex]
}
