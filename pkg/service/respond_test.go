package service

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
)

func TestCeilSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0},
		{1, 1},
		{time.Second - 1, 1},
		{time.Second, 1},
		{time.Second + 1, 2},
		{1500 * time.Millisecond, 2},
		{-1, 0},
		{-500 * time.Millisecond, 0},
		{-time.Second + 1, 0},
		{-time.Second, -1},
		{-1500 * time.Millisecond, -1},
		{-2 * time.Second, -2},
		{math.MaxInt64, math.MaxInt64/int64(time.Second) + 1},
		{math.MinInt64, math.MinInt64 / int64(time.Second)},
	} {
		t.Run(tc.d.String(), func(t *testing.T) {
			if got := CeilSeconds(tc.d); got != tc.want {
				t.Errorf("CeilSeconds(%v) = %d, want %d", tc.d, got, tc.want)
			}
		})
	}
}

// TestClientReasonHeader: a refusal's reason and the degraded mark are
// internal (rules, costs, the store's state): in the dynamic metadata and
// Decision.Reason always, in the headers only with ClientReasonHeader.
// retry-after is the client's either way.
func TestClientReasonHeader(t *testing.T) {
	for _, tell := range []bool{false, true} {
		t.Run(fmt.Sprintf("ClientReasonHeader=%v", tell), func(t *testing.T) {
			on := func(o *Options) { o.ClientReasonHeader = tell }
			f := newFixtureWith(t, testPolicy, memoryStore, on)
			refused := descr("user_id", "a", "path", "/upload/x")
			refused.HitsAddend = wrapperspb.UInt64(11) // max_cost 10
			r := f.call(t, 0, refused)
			const why = "cost 11 exceeds max_cost 10 of rule edge/upload"
			if r.OverallCode != over || reasonOf(r) != why || header(r, HeaderRetryAfter) != "" {
				t.Fatalf("refused: %v, want OVER_LIMIT with reason %q in the metadata", r, why)
			}
			if got, want := header(r, HeaderReason), map[bool]string{true: why}[tell]; got != want {
				t.Fatalf("refused: %s %q, want %q", HeaderReason, got, want)
			}
			d, err := f.svc.Decide(context.Background(), "edge", []*ratelimitv3.RateLimitDescriptor{refused}, 0)
			if err != nil || d.Reason != why {
				t.Fatalf("Decide: reason %q, %v; want %q", d.Reason, err, why)
			}
			for range 5 {
				f.call(t, 0, descr("user_id", "b"))
			}
			if r := f.call(t, 0, descr("user_id", "b")); r.OverallCode != over || header(r, HeaderRetryAfter) != "1" || len(r.ResponseHeadersToAdd) != 1 {
				t.Fatalf("over the limit: %v, want retry-after 1 alone", r)
			}

			g := newFixtureWith(t, testPolicy, func(*clock.Fake) store.Store { return failing{} }, on)
			r = g.call(t, 0, descr("tenant", "x")) // on_store_error: allow
			if r.OverallCode != ok || !degradedOf(r) {
				t.Fatalf("degraded: %v, want OK marked degraded in the metadata", r)
			}
			if got, want := header(r, HeaderDegraded), map[bool]string{true: "store-error"}[tell]; got != want {
				t.Fatalf("degraded: %s %q, want %q", HeaderDegraded, got, want)
			}
		})
	}
}
