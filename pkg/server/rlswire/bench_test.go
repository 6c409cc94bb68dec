package rlswire

import (
	"fmt"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// BenchmarkDecodeRequest: the shared benchmark's request (benchRequest)
// of 1 and 8 descriptors into a new message, as gRPC decodes each.
func BenchmarkDecodeRequest(b *testing.B) {
	for _, n := range []int{1, 8} {
		data := benchRequest(n)
		b.Run(fmt.Sprintf("proto/descriptors=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := proto.Unmarshal(data, new(rlsv3.RateLimitRequest)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("rlswire/descriptors=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !DecodeRequest(data, new(rlsv3.RateLimitRequest)) {
					b.Fatal("gave up")
				}
			}
		})
	}
}
