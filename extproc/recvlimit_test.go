package extproc

import (
	"strings"
	"testing"
	"testing/synctest"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	protov2 "google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/extproc/answer"
	"github.com/tollgate/tollgate/sched/policy"
)

// headersMessage is a request headers message of n entries, each with a
// key of keyLen bytes and a value of valLen bytes (empty entries when both
// are 0).
func headersMessage(n, keyLen, valLen int) *extprocv3.ProcessingRequest {
	hm := &corev3.HeaderMap{Headers: make([]*corev3.HeaderValue, n)}
	k, v := strings.Repeat("k", keyLen), []byte(strings.Repeat("v", valLen))
	for i := range hm.Headers {
		hm.Headers[i] = &corev3.HeaderValue{Key: k, RawValue: v}
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hm}}}
}

func decodeLimited(t testing.TB, c *limitedCodec, m *extprocv3.ProcessingRequest) (*extprocv3.ProcessingRequest, error) {
	t.Helper()
	b, err := protov2.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var got extprocv3.ProcessingRequest
	return &got, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got)
}

// TestLimitedCodec_EmptyEntriesAreRefusedBeforeDecoding: empty HeaderValue
// entries are 2 bytes each on the wire; millions fit the body-sized gRPC
// receive limit and used to be decoded into as many structs.
func TestLimitedCodec_EmptyEntriesAreRefusedBeforeDecoding(t *testing.T) {
	c := newLimitedCodec(recvLimits{headerMsgBytes: DefaultMaxHeaderBytes + recvHeadroom, headerEntries: 4 * DefaultMaxHeaderCount})
	if _, err := decodeLimited(t, c, headersMessage(200_000, 0, 0)); err == nil || !strings.Contains(err.Error(), "limit of 327680 bytes") {
		t.Fatalf("200,000 empty entries: %v", err)
	}
	if _, err := decodeLimited(t, c, headersMessage(401, 0, 0)); err == nil || !strings.Contains(err.Error(), "401 header entries exceed the limit of 400") {
		t.Fatalf("401 empty entries: %v", err)
	}
	got, err := decodeLimited(t, c, headersMessage(400, 3, 3))
	if err != nil || len(got.GetRequestHeaders().GetHeaders().GetHeaders()) != 400 {
		t.Fatalf("400 entries: %v", err)
	}
	// A body message may be as large as the gRPC limit allows.
	body := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: make([]byte, 1<<20)}}}
	if _, err := decodeLimited(t, c, body); err != nil {
		t.Fatalf("1 MiB body: %v", err)
	}
}

// FuzzHeaderMapLimits builds header maps of arbitrary entry counts and sizes
// and checks the wire scan against the decoded message: a message the
// codec lets through holds at most the hard entry bound and, without a
// body, at most the header message size; parseHeaders then accepts only
// maps within the entry and byte limits.
func FuzzHeaderMapLimits(f *testing.F) {
	f.Add(uint32(0), uint16(0), uint16(0), uint16(100), uint16(4096), false, []byte(nil))
	f.Add(uint32(101), uint16(0), uint16(0), uint16(100), uint16(4096), false, []byte("x"))
	f.Add(uint32(401), uint16(0), uint16(0), uint16(100), uint16(4096), true, []byte(nil))
	f.Add(uint32(50), uint16(20), uint16(60), uint16(100), uint16(4096), false, []byte("authorization"))
	f.Add(uint32(20000), uint16(0), uint16(0), uint16(100), uint16(65535), false, []byte(nil))
	f.Fuzz(func(t *testing.T, n uint32, keyLen, valLen, maxCount, maxBytes uint16, trailers bool, extraKey []byte) {
		n %= 1 << 20
		if int(n)*(int(keyLen)+int(valLen)) > 8<<20 {
			t.Skip("larger than any message the gRPC limit lets through")
		}
		count, limit := max(int(maxCount), 1), int(maxBytes)
		c := newLimitedCodec(recvLimits{headerMsgBytes: limit + recvHeadroom, headerEntries: headerCountHardFactor * count})
		m := headersMessage(int(n), int(keyLen), int(valLen))
		if len(extraKey) > 0 {
			// Envoy sends keys as proto strings, which must be UTF-8;
			// raw_value carries any bytes.
			k := strings.ToValidUTF8(string(extraKey), "?")
			hs := m.GetRequestHeaders().GetHeaders()
			hs.Headers = append(hs.Headers, &corev3.HeaderValue{Key: k, RawValue: extraKey})
		}
		if trailers {
			m = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
				RequestTrailers: &extprocv3.HttpTrailers{Trailers: m.GetRequestHeaders().GetHeaders()}}}
		}
		entries := int(n)
		if len(extraKey) > 0 {
			entries++
		}
		wire := protov2.Size(m)
		got, err := decodeLimited(t, c, m)
		tooMany, tooBig := entries > headerCountHardFactor*count, wire > limit+recvHeadroom
		if (err != nil) != (tooMany || tooBig) {
			t.Fatalf("%d entries, %d bytes (limits %d, %d): err %v", entries, wire, headerCountHardFactor*count, limit+recvHeadroom, err)
		}
		if err != nil || trailers {
			return
		}
		hm := got.GetRequestHeaders().GetHeaders()
		if len(hm.GetHeaders()) != entries {
			t.Fatalf("decoded %d entries, built %d", len(hm.GetHeaders()), entries)
		}
		h, rej := parseHeaders(hm, readHeaders(policy.DefaultTenantHeader), limit, count)
		if rej != nil {
			if rej.Reason != answer.ReasonHeadersTooLarge {
				t.Fatalf("rejection %v", rej)
			}
			return
		}
		if entries > count || h.bytes > limit {
			t.Fatalf("accepted %d entries and %d bytes over limits %d and %d", entries, h.bytes, count, limit)
		}
	})
}

// TestServer_HeaderFloodEndsTheStream: the attack over real gRPC (smaller:
// four streams of 6 MB of empty header entries took the heap to 1.47 GB).
// A flood now ends the stream with a gRPC error before decoding, and a
// request a little over the entry limit is answered 431.
func TestServer_HeaderFloodEndsTheStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startServer(t, Config{}, oneWorker)
		for range 2 {
			cs := ts.open()
			cs.send(headersMessage(200_000, 0, 0))
			if err := cs.end(); status.Code(err) == codes.OK || !strings.Contains(err.Error(), "without a body exceeds the limit") {
				t.Fatalf("flood: %v", err)
			}
		}
		cs := ts.open()
		m := headersMessage(DefaultMaxHeaderCount+1, 0, 0)
		m.GetRequestHeaders().GetHeaders().Headers = append(m.GetRequestHeaders().GetHeaders().Headers[:0],
			&corev3.HeaderValue{Key: ":method", RawValue: []byte("POST")}, &corev3.HeaderValue{Key: ":path", RawValue: []byte("/v1/completions")})
		for range DefaultMaxHeaderCount {
			m.GetRequestHeaders().GetHeaders().Headers = append(m.GetRequestHeaders().GetHeaders().Headers, &corev3.HeaderValue{})
		}
		cs.send(m)
		r := cs.recv().GetImmediateResponse()
		if r.GetStatus().GetCode() != 431 || !strings.Contains(string(r.GetBody()), "102 header entries, more than the limit of 100") {
			t.Fatalf("101 entries: %v", r)
		}
	})
}
