package rlswire

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/internal/protorand"
)

// marshal is resp as MarshalResponse writes it.
func marshal(resp *rlsv3.RateLimitResponse) []byte {
	b := make([]byte, ResponseSize(resp))
	MarshalResponse(b, resp)
	return b
}

// roundTrips fails t unless resp's encoding is proto.Size(resp) bytes that
// proto.Unmarshal reads back as resp and, when no Struct (whose fields
// are written in the map's order) is in it, proto's deterministic bytes.
func roundTrips(t tb, resp *rlsv3.RateLimitResponse) {
	t.Helper()
	b := marshal(resp)
	if n := proto.Size(resp); len(b) != n {
		t.Fatalf("%d bytes, proto.Size %d\n%v", len(b), n, resp)
	}
	back := new(rlsv3.RateLimitResponse)
	if err := proto.Unmarshal(b, back); err != nil {
		t.Fatalf("proto.Unmarshal: %v\n%x\n%v", err, b, resp)
	}
	det := proto.MarshalOptions{Deterministic: true}
	want, err := det.Marshal(resp)
	if err != nil {
		t.Fatalf("proto.Marshal: %v", err)
	}
	if resp.DynamicMetadata == nil && !bytes.Equal(b, want) {
		t.Fatalf("bytes differ from proto's:\n%x\n%x\n%v", b, want, resp)
	}
	if again, err := det.Marshal(back); err != nil || !bytes.Equal(again, want) { // proto.Equal, NaNs included
		t.Fatalf("decoded back as\n%v\nwant\n%v", back, resp)
	}
}

// randomStruct is dynamic_metadata as tokengate writes it, and more: up to
// 8 fields of every kind of value, lists and structs nested depth deep.
func randomStruct(t *rapid.T, depth int) *structpb.Struct {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for range rapid.IntRange(0, 8).Draw(t, "fields") {
		s.Fields[randomString.Draw(t, "field")] = randomValue(t, depth)
	}
	return s
}

func randomValue(t *rapid.T, depth int) *structpb.Value {
	kinds := 4
	if depth > 0 {
		kinds = 6
	}
	switch rapid.IntRange(0, kinds-1).Draw(t, "kind") {
	case 0:
		return structpb.NewNullValue()
	case 1:
		n := float64(rapid.Int64().Draw(t, "int"))
		if rapid.Bool().Draw(t, "float") {
			n = math.Float64frombits(rapid.Uint64().Draw(t, "bits")) // NaNs too
		}
		return structpb.NewNumberValue(n)
	case 2:
		return structpb.NewStringValue(randomString.Draw(t, "string"))
	case 3:
		return structpb.NewBoolValue(rapid.Bool().Draw(t, "bool"))
	case 4:
		return structpb.NewStructValue(randomStruct(t, depth-1))
	}
	l := new(structpb.ListValue)
	for range rapid.IntRange(0, 4).Draw(t, "elements") {
		l.Values = append(l.Values, randomValue(t, depth-1))
	}
	return structpb.NewListValue(l)
}

var codes = rapid.SampledFrom([]rlsv3.RateLimitResponse_Code{
	rlsv3.RateLimitResponse_UNKNOWN, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT,
})

// randomResponse is a response as pkg/service's respond writes one: a
// status per descriptor with a current_limit its rule's statuses share,
// remaining and a reset; headers and metadata when limited.
func randomResponse(t *rapid.T) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: codes.Draw(t, "overall")}
	var limits []*rlsv3.RateLimitResponse_RateLimit
	for range rapid.IntRange(0, 3).Draw(t, "rules") {
		l := &rlsv3.RateLimitResponse_RateLimit{
			Name:            randomString.Draw(t, "name"),
			RequestsPerUnit: rapid.Uint32().Draw(t, "requests_per_unit"),
			Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(rapid.IntRange(0, 6).Draw(t, "unit")),
		}
		if rapid.Bool().Draw(t, "multiplier") {
			l.UnitMultiplier = wrapperspb.UInt32(rapid.Uint32().Draw(t, "unit_multiplier"))
		}
		limits = append(limits, l)
	}
	for range rapid.IntRange(0, 16).Draw(t, "statuses") {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:           codes.Draw(t, "code"),
			LimitRemaining: rapid.Uint32().Draw(t, "remaining"),
		}
		if i := rapid.IntRange(-1, len(limits)-1).Draw(t, "limit"); i >= 0 {
			st.CurrentLimit = limits[i]
		}
		if rapid.Bool().Draw(t, "reset") {
			st.DurationUntilReset = &durationpb.Duration{
				Seconds: rapid.Int64().Draw(t, "seconds"), Nanos: rapid.Int32Range(-999_999_999, 999_999_999).Draw(t, "nanos"),
			}
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	for range rapid.IntRange(0, 3).Draw(t, "headers") {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&corev3.HeaderValue{Key: randomString.Draw(t, "header"), Value: randomString.Draw(t, "header value")})
	}
	if rapid.Bool().Draw(t, "metadata") {
		resp.DynamicMetadata = randomStruct(t, 3)
	}
	return resp
}

// TestMarshalMatchesProtoRapid: responses as tokengate writes them, and
// with every field set at random (protorand: quotas, request headers,
// raw bodies), read back by proto.Unmarshal as they were.
func TestMarshalMatchesProtoRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		if rapid.Bool().Draw(t, "protorand") {
			resp := new(rlsv3.RateLimitResponse)
			protorand.Fill(t, resp.ProtoReflect(), 5)
			roundTrips(t, resp)
			return
		}
		roundTrips(t, randomResponse(t))
	})
}

// TestMarshalCases: responses of every shape of field, and nil parts,
// which proto writes as empty messages.
func TestMarshalCases(t *testing.T) {
	meta, err := structpb.NewStruct(map[string]any{
		"rule": "per-user", "cost": 1.0, "degraded": false, "none": nil,
		"descriptors": []any{map[string]any{"index": 3.0, "key": ""}, []any{}, -0.5},
	})
	if err != nil {
		t.Fatal(err)
	}
	quota := &rlsv3.RateLimitResponse_Quota{Requests: 5, Id: "q",
		ExpirationSpecifier: &rlsv3.RateLimitResponse_Quota_ValidUntil{ValidUntil: timestamppb.New(timestamppb.Now().AsTime())}}
	tests := []struct {
		name string
		resp *rlsv3.RateLimitResponse
	}{
		{"empty", &rlsv3.RateLimitResponse{}},
		{"negative codes", &rlsv3.RateLimitResponse{OverallCode: -1, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: -2}}}},
		{"empty status and reset", &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{}, {DurationUntilReset: &durationpb.Duration{}}}}},
		{"metadata", &rlsv3.RateLimitResponse{DynamicMetadata: meta}},
		{"empty metadata", &rlsv3.RateLimitResponse{DynamicMetadata: &structpb.Struct{}}},
		{"quotas", &rlsv3.RateLimitResponse{Quota: quota, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Quota: quota}}}},
		{"quota without its time", &rlsv3.RateLimitResponse{Quota: &rlsv3.RateLimitResponse_Quota{ExpirationSpecifier: &rlsv3.RateLimitResponse_Quota_ValidUntil{}}}},
		{"headers and body", &rlsv3.RateLimitResponse{
			ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "retry-after", Value: "3"}, {}},
			RequestHeadersToAdd:  []*corev3.HeaderValue{{Key: "x", RawValue: []byte{0xff}}},
			RawBody:              []byte("over the limit"),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { roundTrips(t, tc.resp) })
	}
	if got := marshal(nil); len(got) != 0 {
		t.Fatalf("nil response: %x", got)
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
