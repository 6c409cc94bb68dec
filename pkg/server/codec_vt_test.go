//go:build vtprotobuf

package server

import (
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// TestVTMarshalBuilt: with the vtprotobuf tag (make, the Dockerfile), the
// codec's vtprotobuf path is compiled in: the responses of ext_authz and
// RLQS have go-control-plane's marshallers (the RateLimitService's is
// rlswire's in every build).
func TestVTMarshalBuilt(t *testing.T) {
	for _, m := range []any{&authv3.CheckResponse{}, &rlqsv3.RateLimitQuotaResponse{}} {
		if _, ok := m.(vtMarshaler); !ok {
			t.Errorf("%T has no vtprotobuf marshalling", m)
		}
	}
}
