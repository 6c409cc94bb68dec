package xds

import (
	"strings"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/tokengate/tokengate/pkg/policy"
)

// FuzzConfig: any RateLimitConfig a management server can send (wire
// bytes) is rendered and compiled, or refused with the resource named, in
// well under 5 s; none panics, and one that renders is within the policy
// file limit.
func FuzzConfig(f *testing.F) {
	chain := func(levels int) *rlsconf.RateLimitConfig {
		var ds []*rlsconf.RateLimitDescriptor
		for range levels {
			ds = []*rlsconf.RateLimitDescriptor{{Key: "k", Value: "v*", Descriptors: ds,
				RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 3, Name: "n"}}}
		}
		return &rlsconf.RateLimitConfig{Name: "chain", Domain: "edge", Descriptors: ds}
	}
	wide := &rlsconf.RateLimitConfig{Name: "wide", Domain: "edge"}
	for i := range 50 {
		wide.Descriptors = append(wide.Descriptors, &rlsconf.RateLimitDescriptor{Key: "k", Value: strings.Repeat("x", i),
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1, Replaces: []*rlsconf.RateLimitReplace{{Name: "n"}}}})
	}
	for _, c := range []*rlsconf.RateLimitConfig{chain(3), chain(policy.MaxMatchEntries), chain(policy.MaxMatchEntries + 1), chain(200), wide} {
		data, err := proto.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c rlsconf.RateLimitConfig
		if proto.Unmarshal(data, &c) != nil {
			return
		}
		begin := time.Now()
		file, err := File(&c)
		if err == nil {
			if len(file.Data) > policy.MaxFileSize {
				t.Fatalf("rendered %d bytes, past the file limit", len(file.Data))
			}
			_, err = policy.ParseFiles("xds", []policy.File{file})
		} else if !strings.HasPrefix(err.Error(), "RateLimitConfig ") {
			t.Fatalf("refused without naming the resource: %v", err)
		}
		if took := time.Since(begin); took > 5*time.Second {
			t.Fatalf("took %v (%v)", took, err)
		}
	})
}
