package extproc

import (
	"fmt"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	protov2 "google.golang.org/protobuf/proto"
)

// DefaultMaxHeaderCount bounds the number of request header entries, as
// Envoy's own max_headers_count does by default.
const DefaultMaxHeaderCount = 100

// headerCountHardFactor sets the header entry count above which a message is
// refused before it is decoded (the stream ends with a gRPC error): a
// message a little over the limit is decoded and answered 431, one far over
// it never allocates its entries.
const headerCountHardFactor = 4

// ProcessingRequest field numbers (envoy.service.ext_proc.v3).
const (
	fieldRequestHeaders   = 2
	fieldResponseHeaders  = 3
	fieldRequestBody      = 4
	fieldResponseBody     = 5
	fieldRequestTrailers  = 6
	fieldResponseTrailers = 7
)

// recvLimits is what a ProcessingRequest may hold, by message kind. gRPC's
// own receive limit is one number for every message, which must fit a body;
// these bound the other kinds far lower, before the message is decoded.
type recvLimits struct {
	// headerMsgBytes bounds a message that carries no body.
	headerMsgBytes int
	// headerEntries bounds the header entries of a headers or trailers
	// message.
	headerEntries int
}

// limitedCodec is the proto codec with recvLimits checked on every
// ProcessingRequest before it is decoded. Other messages (health checks)
// pass through.
type limitedCodec struct {
	base   encoding.CodecV2
	limits recvLimits
}

func newLimitedCodec(l recvLimits) *limitedCodec {
	return &limitedCodec{base: encoding.GetCodecV2("proto"), limits: l}
}

func (c *limitedCodec) Name() string { return c.base.Name() }

func (c *limitedCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c *limitedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*extprocv3.ProcessingRequest)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if err := c.limits.check(b); err != nil {
		return err
	}
	return protov2.Unmarshal(b, m)
}

// check scans the top-level fields of an encoded ProcessingRequest: a
// message without a body must fit headerMsgBytes, and a headers or trailers
// message may hold at most headerEntries entries. Malformed wire data is
// left to the decoder.
func (l recvLimits) check(b []byte) error {
	body := false
	entries := 0
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return nil
		}
		rest = rest[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, rest); n < 0 {
				return nil
			}
			rest = rest[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(rest)
		if n < 0 {
			return nil
		}
		rest = rest[n:]
		switch num {
		case fieldRequestBody, fieldResponseBody:
			body = true
		case fieldRequestHeaders, fieldResponseHeaders, fieldRequestTrailers, fieldResponseTrailers:
			// HttpHeaders.headers and HttpTrailers.trailers are both field
			// 1, a HeaderMap whose field 1 repeats HeaderValue.
			entries += countNested(v, 1, 1)
		}
	}
	if !body && len(b) > l.headerMsgBytes {
		return fmt.Errorf("extproc: a %d-byte message without a body exceeds the limit of %d bytes for header messages", len(b), l.headerMsgBytes)
	}
	if entries > l.headerEntries {
		return fmt.Errorf("extproc: %d header entries exceed the limit of %d", entries, l.headerEntries)
	}
	return nil
}

// countNested counts the occurrences of field inner inside every field
// outer of the encoded message b.
func countNested(b []byte, outer, inner protowire.Number) int {
	count := 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return count
		}
		b = b[n:]
		if num == outer && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return count
			}
			b = b[n:]
			count += countField(v, inner)
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return count
		}
		b = b[n:]
	}
	return count
}

// countField counts the occurrences of field num in the encoded message b.
func countField(b []byte, num protowire.Number) int {
	count := 0
	for len(b) > 0 {
		n2, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return count
		}
		b = b[n:]
		if n = protowire.ConsumeFieldValue(n2, typ, b); n < 0 {
			return count
		}
		b = b[n:]
		if n2 == num {
			count++
		}
	}
	return count
}
