package service

import (
	"context"
	"slices"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tokengate/tokengate/pkg/store"
)

// lateCall is an ambiguous store error that records how it was resolved.
type lateCall struct{ resolved []bool }

var _ store.Ambiguous = (*lateCall)(nil)

func (l *lateCall) Error() string       { return "timed out after it was sent" }
func (l *lateCall) Resolve(passed bool) { l.resolved = append(l.resolved, passed) }

type lateStore struct{ late *lateCall }

func (s lateStore) Decide(context.Context, *store.Request, []store.Result) (store.Outcome, error) {
	return store.Outcome{}, s.late
}

// TestAmbiguousIsResolved: when a store call may have charged (an
// ambiguous error), the service tells the store once whether the request
// went through on on_store_error's answer: refused under deny, through
// under allow, refused when one descriptor of the request is refused; a
// shadow rule's call is resolved as through (its charge stands).
func TestAmbiguousIsResolved(t *testing.T) {
	for _, c := range []struct {
		name string
		ds   []*ratelimitv3.RateLimitDescriptor
		want []bool // the enforced call's, then the shadow call's
	}{
		{"deny", []*ratelimitv3.RateLimitDescriptor{descr("tenant", "a")}, []bool{false}},
		{"allow", []*ratelimitv3.RateLimitDescriptor{descr("path", "/")}, []bool{true}},
		{"allow and deny", []*ratelimitv3.RateLimitDescriptor{descr("path", "/"), descr("tenant", "a")}, []bool{false}},
		{"shadow", []*ratelimitv3.RateLimitDescriptor{descr("remote_address", "1")}, []bool{true}},
		{"deny and shadow", []*ratelimitv3.RateLimitDescriptor{descr("tenant", "a"), descr("remote_address", "1")}, []bool{false, true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			svc, flaky, _ := flakyService(t, "answers.yaml", answersPolicy)
			late := &lateCall{}
			flaky.ok, flaky.fail = lateStore{late}, false
			if _, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: c.ds}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(late.resolved, c.want) {
				t.Errorf("resolved %v, want %v", late.resolved, c.want)
			}
		})
	}
}
