package rlswire

import (
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// BenchmarkDecodeRequest: the shared benchmark's request (benchRequest)
// of 1 and 8 descriptors into a new message, as gRPC decodes each.
func BenchmarkDecodeRequest(b *testing.B) {
	for _, n := range []int{1, 8} {
		data := benchRequest(n)
		b.Run(fmt.Sprintf("codec=proto/descriptors=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := proto.Unmarshal(data, new(rlsv3.RateLimitRequest)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("codec=rlswire/descriptors=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !DecodeRequest(data, new(rlsv3.RateLimitRequest)) {
					b.Fatal("gave up")
				}
			}
		})
	}
}

// benchResponse is an answer to benchRequest(8) as pkg/service writes it:
// 8 statuses (the rule's shared limit, remaining, a reset), and when
// limited the first one over the limit, a retry-after and the metadata
// of all 8 (MaxMetaDescriptors).
func benchResponse(limited bool) *rlsv3.RateLimitResponse {
	limit := &rlsv3.RateLimitResponse_RateLimit{Name: "per-user", RequestsPerUnit: 1000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}
	r := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range 8 {
		r.Statuses = append(r.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{
			Code: rlsv3.RateLimitResponse_OK, CurrentLimit: limit, LimitRemaining: 999, DurationUntilReset: durationpb.New(1e9),
		})
	}
	if !limited {
		return r
	}
	r.OverallCode, r.Statuses[0].Code, r.Statuses[0].LimitRemaining = rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT, 0
	r.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: "retry-after", Value: "1"}}
	fields := func(i int) map[string]*structpb.Value {
		return map[string]*structpb.Value{
			"rule": structpb.NewStringValue("per-user"), "result": structpb.NewStringValue("over_limit"),
			"degraded": structpb.NewBoolValue(false), "cost": structpb.NewNumberValue(1),
			"remaining": structpb.NewNumberValue(0), "retry_after": structpb.NewNumberValue(1),
			"key": structpb.NewStringValue("0123456789abcdef0123456789abcdef"), "index": structpb.NewNumberValue(float64(i)),
		}
	}
	top := fields(0)
	delete(top, "index")
	top["domain"] = structpb.NewStringValue("bench")
	list := new(structpb.ListValue)
	for i := range 8 {
		list.Values = append(list.Values, structpb.NewStructValue(&structpb.Struct{Fields: fields(i)}))
	}
	top["descriptors"], top["count"] = structpb.NewListValue(list), structpb.NewNumberValue(8)
	r.DynamicMetadata = &structpb.Struct{Fields: top}
	return r
}

// vtMarshaler is go-control-plane's vtprotobuf marshalling, there only
// with the vtprotobuf build tag.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict(dAtA []byte) (int, error)
}

// BenchmarkMarshalResponse: benchResponse sized and written into a
// buffer kept from op to op, as the codec writes into gRPC's pooled ones:
// by proto (as gRPC's codec does: proto.Size, then MarshalAppend), by
// vtprotobuf (with -tags vtprotobuf only) and by MarshalResponse.
func BenchmarkMarshalResponse(b *testing.B) {
	for _, limited := range []bool{false, true} {
		r := benchResponse(limited)
		buf := make([]byte, 0, 4096)
		name := fmt.Sprintf("limited=%t", limited)
		b.Run("codec=proto/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = proto.Size(r)
				var err error
				if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], r); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("codec=vtprotobuf/"+name, func(b *testing.B) {
			vt, ok := any(r).(vtMarshaler)
			if !ok {
				b.Skip("built without -tags vtprotobuf")
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := vt.MarshalToSizedBufferVTStrict(buf[:vt.SizeVT()]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("codec=rlswire/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				MarshalResponse(buf[:ResponseSize(r)], r)
			}
		})
	}
}
