package service

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestDecideSharesShouldRateLimit: Decide and ShouldRateLimit decide over
// the same buckets, and Decide names each descriptor's rule.
func TestDecideSharesShouldRateLimit(t *testing.T) {
	f := newFixture(t, nil)
	for range 3 {
		f.call(t, 0, descr("user_id", "gina"))
	}
	d, err := f.svc.Decide(context.Background(), "edge", []*ratelimitv3.RateLimitDescriptor{
		descr("user_id", "gina"), descr("nobody", "x"), descr("path", "/healthz"),
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Response.OverallCode != ok || d.Response.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("fourth of five: %v", d.Response)
	}
	if d.Rules[0].Name != "per-user" || d.Rules[1] != nil || d.Rules[2].Name != "health" {
		t.Fatalf("rules: %v", d.Rules)
	}
	f.call(t, 0, descr("user_id", "gina"))
	d, _ = f.svc.Decide(context.Background(), "edge", []*ratelimitv3.RateLimitDescriptor{descr("user_id", "gina")}, 0)
	if d.Response.OverallCode != over || header(d.Response, HeaderRetryAfter) != "1" {
		t.Fatalf("sixth: %v", d.Response)
	}
	if _, err := f.svc.Decide(context.Background(), "", []*ratelimitv3.RateLimitDescriptor{descr("user_id", "x")}, 0); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty domain: %v", err)
	}
	if _, err := f.svc.Decide(context.Background(), "edge", nil, 0); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no descriptors: %v", err)
	}
}

// TestShadowRetryAfter: a shadow rule over its limit does not lengthen the
// Retry-After of a request an enforced rule refuses.
func TestShadowRetryAfter(t *testing.T) {
	f := newFixture(t, nil)
	for range 5 {
		f.call(t, 0, descr("user_id", "hank"), descr("remote_address", "10.9.9.9"))
	}
	r := f.call(t, 0, descr("user_id", "hank"), descr("remote_address", "10.9.9.9"))
	if r.OverallCode != over || header(r, HeaderRetryAfter) != "1" {
		t.Fatalf("retry-after %q, want 1 (the shadow rule waits a minute): %v", header(r, HeaderRetryAfter), r)
	}
}
