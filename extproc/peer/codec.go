package peer

import (
	"encoding/json"
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// codecName is the codec's name and the gRPC content-subtype of the channel.
const codecName = "tollgate-peer-json"

func init() { encoding.RegisterCodecV2(codec{}) }

// codec encodes the channel's messages as JSON.
type codec struct{}

func (codec) Name() string { return codecName }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("peer: encode %T: %w", v, err)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	if err := json.Unmarshal(buf.ReadOnlyData(), v); err != nil {
		return fmt.Errorf("peer: decode %T: %w", v, err)
	}
	return nil
}
