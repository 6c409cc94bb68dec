//go:build vtprotobuf

package server

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestVTMarshalBuilt: with the vtprotobuf tag (make, the Dockerfile), the
// codec's fast path is compiled in: every message the RateLimitService
// answers with has go-control-plane's marshallers.
func TestVTMarshalBuilt(t *testing.T) {
	for _, m := range []any{&rlsv3.RateLimitResponse{}, &rlsv3.RateLimitResponse_DescriptorStatus{}} {
		if _, ok := m.(vtMarshaler); !ok {
			t.Errorf("%T has no vtprotobuf marshalling", m)
		}
	}
}
