package main

import (
	"context"
	"errors"
	"io"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Header and metadata names of the routing answer, as tollgate sends them.
const (
	destinationHeader = "x-gateway-destination-endpoint"
	lbNamespace       = "envoy.lb"
)

// server is the null ext_proc service. Its replies are built once and
// shared read-only by every stream.
type server struct {
	extprocv3.UnimplementedExternalProcessorServer

	routedHeaders, plainHeaders *extprocv3.ProcessingResponse
	routedBody, plainBody       *extprocv3.ProcessingResponse
	requestTrailers             *extprocv3.ProcessingResponse
	responseHeaders             *extprocv3.ProcessingResponse
	responseBody                *extprocv3.ProcessingResponse
	responseTrailers            *extprocv3.ProcessingResponse
}

func newServer(endpoint string) *server {
	route := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
		Header: &corev3.HeaderValue{Key: destinationHeader, RawValue: []byte(endpoint)},
		Append: wrapperspb.Bool(false),
	}}}
	md := &structpb.Struct{Fields: map[string]*structpb.Value{
		lbNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			destinationHeader: structpb.NewStringValue(endpoint),
		}}),
	}}
	headers := func(m *extprocv3.HeaderMutation) *extprocv3.ProcessingResponse {
		r := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
			RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: m}}}}
		if m != nil {
			r.DynamicMetadata = md
		}
		return r
	}
	body := func(m *extprocv3.HeaderMutation) *extprocv3.ProcessingResponse {
		r := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{HeaderMutation: m}}}}
		if m != nil {
			r.DynamicMetadata = md
		}
		return r
	}
	return &server{
		routedHeaders: headers(route),
		plainHeaders:  headers(nil),
		routedBody:    body(route),
		plainBody:     body(nil),
		requestTrailers: &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}},
		responseHeaders: &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}}}},
		responseBody: &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}},
		responseTrailers: &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}},
	}
}

// Process answers each message of one stream as it arrives.
func (s *server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	var st streamState
	for {
		m, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		r := s.reply(&st, m)
		if r == nil {
			return status.Error(codes.InvalidArgument, "processing request with no message")
		}
		if err := stream.Send(r); err != nil {
			return err
		}
	}
}

// streamState is the negotiated processing mode of one stream.
type streamState struct {
	reqMode, respMode extprocfilterv3.ProcessingMode_BodySendMode
}

// reply returns the answer to m, or nil when m carries no message.
func (s *server) reply(st *streamState, m *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	if pc := m.GetProtocolConfig(); pc != nil {
		st.reqMode, st.respMode = pc.GetRequestBodyMode(), pc.GetResponseBodyMode()
	}
	switch r := m.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		if !r.RequestHeaders.GetEndOfStream() && (st.reqMode == extprocfilterv3.ProcessingMode_BUFFERED ||
			st.reqMode == extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL) {
			return s.plainHeaders
		}
		return s.routedHeaders
	case *extprocv3.ProcessingRequest_RequestBody:
		switch st.reqMode {
		case extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
			return echo(r.RequestBody, true)
		case extprocfilterv3.ProcessingMode_BUFFERED, extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL:
			return s.routedBody
		}
		return s.plainBody
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return s.requestTrailers
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return s.responseHeaders
	case *extprocv3.ProcessingRequest_ResponseBody:
		if st.respMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
			return echo(r.ResponseBody, false)
		}
		return s.responseBody
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return s.responseTrailers
	}
	return nil
}

// echo streams a FULL_DUPLEX_STREAMED body chunk back unchanged.
func echo(b *extprocv3.HttpBody, request bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
		BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b.GetBody(), EndOfStream: b.GetEndOfStream()}}}}}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}
