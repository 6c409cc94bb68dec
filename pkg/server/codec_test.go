package server

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tokengate/tokengate/internal/wiretest"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/metrics"
	"github.com/tokengate/tokengate/pkg/service"
)

// wire is protobuf wire data built by hand (internal/wiretest).
type wire = wiretest.Wire

// TestCodecMatchesProto: the codec's marshalling of a full response
// (rlswire's) gives the same bytes as the proto library's deterministic
// marshalling, and unmarshals back to an equal message.
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
	c := newCodec(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "invalid"}, []string{"method"}), slog.Default(), clock.NewMonotonic(), newDecodeGate())
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
		t.Fatalf("the codec's bytes differ from proto's:\n%x\n%x", got.Materialize(), want)
	}
	back := new(rlsv3.RateLimitResponse)
	if err := c.Unmarshal(got, back); err != nil || !proto.Equal(back, resp) {
		t.Fatalf("round trip: %v %v", back, err)
	}
}

// TestCodecUnmarshal: the codec decodes a request proto.Unmarshal refuses
// for invalid UTF-8 only for the two limiting RPCs, counting it by method;
// for malformed wire data, or any other message, it returns the proto
// codec's own error.
func TestCodecUnmarshal(t *testing.T) {
	// healthpb.HealthCheckRequest: service = 1.
	health := wire{}.Str(1, "\xff")
	valid := wiretest.RateLimitRequest("edge", 0, wiretest.Descriptor("user_id", "alice"))
	invalid := wiretest.RateLimitRequest("edge", 0, wiretest.Descriptor("user_id", "\xff"))
	tests := []struct {
		name    string
		b       wire
		msg     proto.Message
		wantErr bool
		counted map[string]float64
	}{
		{"valid RateLimitRequest: the fast path", valid, &rlsv3.RateLimitRequest{}, false, map[string]float64{}},
		{"invalid UTF-8 in a RateLimitRequest", invalid, &rlsv3.RateLimitRequest{}, false, map[string]float64{metrics.FrontDoorRateLimit: 1}},
		{"invalid UTF-8 in a CheckRequest", wiretest.CheckRequest("10.0.0.1", "", "/", "x-user-id", "\xff"), &authv3.CheckRequest{}, false,
			map[string]float64{metrics.FrontDoorExtAuthz: 1}},
		{"invalid UTF-8, then truncated", invalid[:len(invalid)-1], &rlsv3.RateLimitRequest{}, true, map[string]float64{}},
		{"invalid UTF-8 in a health check", health, &healthpb.HealthCheckRequest{}, true, map[string]float64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			counter := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "invalid"}, []string{"method"})
			c := newCodec(counter, slog.New(slog.DiscardHandler), clock.NewMonotonic(), newDecodeGate())
			err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(tc.b)}, tc.msg)
			if tc.wantErr {
				want := encoding.GetCodecV2(protoenc.Name).Unmarshal(mem.BufferSlice{mem.SliceBuffer(tc.b)}, proto.Clone(tc.msg))
				if err == nil || want == nil || err.Error() != want.Error() {
					t.Fatalf("error %v, want the proto codec's: %v", err, want)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			for _, method := range []string{metrics.FrontDoorRateLimit, metrics.FrontDoorExtAuthz} {
				if got := testutil.ToFloat64(counter.WithLabelValues(method)); got != tc.counted[method] {
					t.Errorf("counted %v %s requests, want %v", got, method, tc.counted[method])
				}
			}
		})
	}
}

// TestCodecDecodesAsProto: whether rlswire takes a RateLimitRequest or
// gives up (an unknown field, kept by proto), and in one buffer or
// several, the codec decodes what proto.Unmarshal decodes; one above
// gateFrom too, which goes through the decode gate and checkShape first.
func TestCodecDecodesAsProto(t *testing.T) {
	full, err := proto.Marshal(wiretest.FullRateLimitRequest())
	if err != nil {
		t.Fatal(err)
	}
	var large []wire
	for range service.MaxDescriptors {
		large = append(large, wiretest.Descriptor("user_id", strings.Repeat("v", 300)))
	}
	tests := []struct {
		name string
		b    wire
	}{
		{"every field", full},
		{"an unknown field", wiretest.RateLimitRequest("edge", 0, wiretest.Descriptor("user_id", "alice")).Varint(9, 1)},
		{"above gateFrom", wiretest.RateLimitRequest("edge", 0, large...)},
	}
	c := newCodec(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "invalid"}, []string{"method"}), slog.New(slog.DiscardHandler), clock.NewMonotonic(), newDecodeGate())
	for _, tc := range tests {
		for _, pieces := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s in %d", tc.name, pieces), func(t *testing.T) {
				var data mem.BufferSlice
				for i := range pieces {
					data = append(data, mem.SliceBuffer(tc.b[i*len(tc.b)/pieces:(i+1)*len(tc.b)/pieces]))
				}
				got, want := new(rlsv3.RateLimitRequest), new(rlsv3.RateLimitRequest)
				if err := c.Unmarshal(data, got); err != nil {
					t.Fatal(err)
				}
				if err := proto.Unmarshal(tc.b, want); err != nil || !proto.Equal(got, want) {
					t.Fatalf("decoded %v, proto.Unmarshal %v (%v)", got, want, err)
				}
			})
		}
	}
	if n := len(wiretest.RateLimitRequest("edge", 0, large...)); n <= gateFrom {
		t.Fatalf("the large request is %d bytes, not above gateFrom", n)
	}
}

// TestCodecDecodesByHand: a request of 8 descriptors costs the codec
// rlswire's few allocations, not proto.Unmarshal's (45).
func TestCodecDecodesByHand(t *testing.T) {
	var ds []wire
	for i := range 8 {
		ds = append(ds, wiretest.Descriptor(fmt.Sprintf("user%d", i), "v"))
	}
	data := mem.BufferSlice{mem.SliceBuffer(wiretest.RateLimitRequest("edge", 0, ds...))}
	c := newCodec(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "invalid"}, []string{"method"}), slog.New(slog.DiscardHandler), clock.NewMonotonic(), newDecodeGate())
	req := new(rlsv3.RateLimitRequest)
	if n := testing.AllocsPerRun(100, func() {
		if err := c.Unmarshal(data, req); err != nil {
			t.Fatal(err)
		}
	}); n > 8 {
		t.Fatalf("%v allocations", n)
	}
}

// TestCodecLogBounded: at debug, requests decoded leniently are
// lenientLogPerSecond lines a second, the next line saying how many were
// dropped.
func TestCodecLogBounded(t *testing.T) {
	var out bytes.Buffer
	clk := new(clock.Fake)
	c := newCodec(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "invalid"}, []string{"method"}),
		slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})), clk, newDecodeGate())
	invalid := wiretest.RateLimitRequest("edge", 0, wiretest.Descriptor("user_id", "\xff"))
	decode := func() {
		t.Helper()
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(invalid)}, &rlsv3.RateLimitRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		decode()
	}
	if n := bytes.Count(out.Bytes(), []byte("\n")); n != lenientLogPerSecond {
		t.Fatalf("100 requests in a second: %d lines, want %d", n, lenientLogPerSecond)
	}
	out.Reset()
	clk.Add(time.Second)
	decode()
	if !bytes.Contains(out.Bytes(), []byte(`"dropped":90`)) {
		t.Fatalf("a second later: %s, want dropped 90", out.Bytes())
	}
}

// BenchmarkMarshalResponse: the codec on a response of 8 statuses, as the
// service writes one: rlswire's marshalling, into gRPC's pooled buffer,
// in every build.
func BenchmarkMarshalResponse(b *testing.B) {
	r := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range 8 {
		r.Statuses = append(r.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:               rlsv3.RateLimitResponse_OK,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: "per-user", RequestsPerUnit: 1000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
			LimitRemaining:     999,
			DurationUntilReset: durationpb.New(1e6),
		})
	}
	c := newCodec(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "invalid"}, []string{"method"}), slog.Default(), clock.NewMonotonic(), newDecodeGate())
	b.ReportAllocs()
	for b.Loop() {
		d, err := c.Marshal(r)
		if err != nil {
			b.Fatal(err)
		}
		d.Free()
	}
}
