package server

import (
	"bytes"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestCodecMatchesProto: the vtprotobuf marshalling of a full response
// gives the same bytes as the proto library's deterministic marshalling,
// and unmarshals back to an equal message.
func TestCodecMatchesProto(t *testing.T) {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "per-user", RequestsPerUnit: 10, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
				LimitRemaining: 7, DurationUntilReset: durationpb.New(1500e6)},
			{Code: rlsv3.RateLimitResponse_OVER_LIMIT, LimitRemaining: 0, DurationUntilReset: durationpb.New(3e9)},
			{Code: rlsv3.RateLimitResponse_OK},
		},
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "retry-after", Value: "3"}},
	}
	c := newCodec()
	got, err := c.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Free()
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Materialize(), want) {
		t.Fatalf("vtprotobuf bytes differ from proto's:\n%x\n%x", got.Materialize(), want)
	}
	back := new(rlsv3.RateLimitResponse)
	if err := c.Unmarshal(got, back); err != nil || !proto.Equal(back, resp) {
		t.Fatalf("round trip: %v %v", back, err)
	}
}
