package service

import (
	"context"
	"crypto/sha256"
	"strings"
	"sync"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tokengate/tokengate/pkg/store"
)

// idRecorder is a store that allows everything and records the request ids
// it is asked with, copied (they alias the service's request state).
type idRecorder struct {
	mu  sync.Mutex
	ids []string
}

var _ store.Store = (*idRecorder)(nil)

func (r *idRecorder) Decide(_ context.Context, req *store.Request, results []store.Result) (store.Outcome, error) {
	r.mu.Lock()
	r.ids = append(r.ids, strings.Clone(req.ID))
	r.mu.Unlock()
	for i := range req.Items {
		results[i] = store.Result{}
		results[i].Allowed = true
	}
	return store.Outcome{Allowed: true}, nil
}

// TestRequestIDIsHashed: the store sees 16 bytes of SHA-256 for any id,
// nothing for an empty one, and the shadow call goes without it.
func TestRequestIDIsHashed(t *testing.T) {
	long := strings.Repeat("x", 1_000_000)
	for _, tc := range []struct {
		name string
		ds   []*ratelimitv3.RateLimitDescriptor
		want []string // one per store call
	}{
		{"short", []*ratelimitv3.RateLimitDescriptor{descr("user_id", "u"), descr("request_id", "abc-123")}, []string{sha("abc-123")}},
		{"1 MB", []*ratelimitv3.RateLimitDescriptor{descr("request_id", long), descr("user_id", "u")}, []string{sha(long)}},
		{"empty", []*ratelimitv3.RateLimitDescriptor{descr("user_id", "u"), descr("request_id", "")}, []string{""}},
		{"none", []*ratelimitv3.RateLimitDescriptor{descr("user_id", "u")}, []string{""}},
		{"the last of two", []*ratelimitv3.RateLimitDescriptor{descr("request_id", "a"), descr("user_id", "u"), descr("request_id", "b")}, []string{sha("b")}},
		{"shadow without", []*ratelimitv3.RateLimitDescriptor{descr("user_id", "u"), descr("remote_address", "10.0.0.1"), descr("request_id", "abc")}, []string{sha("abc"), ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := new(idRecorder)
			f := newFixture(t, rec)
			if r := f.call(t, 0, tc.ds...); r.OverallCode != ok {
				t.Fatalf("response: %v", r)
			}
			if len(rec.ids) != len(tc.want) {
				t.Fatalf("%d store calls, want %d", len(rec.ids), len(tc.want))
			}
			for i, id := range rec.ids {
				if id != tc.want[i] {
					t.Errorf("call %d: id %x (%d bytes), want %x", i, id, len(id), tc.want[i])
				}
			}
		})
	}
}

func sha(id string) string {
	sum := sha256.Sum256([]byte(id))
	return string(sum[:16])
}

// TestRequestIDReplayAfterHashing: through the memory store, a repeat of
// an id with the same request replays, free; another id, or the same id
// asking for another bucket, is decided and charged. remaining is what ivy
// has left after both calls.
func TestRequestIDReplayAfterHashing(t *testing.T) {
	long := strings.Repeat("r", 1_000_000)
	for _, tc := range []struct {
		name      string
		first     []*ratelimitv3.RateLimitDescriptor
		then      []*ratelimitv3.RateLimitDescriptor
		remaining uint32
	}{
		{"same id, same request", []*ratelimitv3.RateLimitDescriptor{descr("user_id", "ivy"), descr("request_id", "r-1")},
			[]*ratelimitv3.RateLimitDescriptor{descr("user_id", "ivy"), descr("request_id", "r-1")}, 4},
		{"same 1 MB id", []*ratelimitv3.RateLimitDescriptor{descr("user_id", "ivy"), descr("request_id", long)},
			[]*ratelimitv3.RateLimitDescriptor{descr("user_id", "ivy"), descr("request_id", long)}, 4},
		{"another id", []*ratelimitv3.RateLimitDescriptor{descr("user_id", "ivy"), descr("request_id", "r-1")},
			[]*ratelimitv3.RateLimitDescriptor{descr("user_id", "ivy"), descr("request_id", "r-2")}, 3},
		{"ids that differ past 4 KiB", []*ratelimitv3.RateLimitDescriptor{descr("user_id", "ivy"), descr("request_id", long+"1")},
			[]*ratelimitv3.RateLimitDescriptor{descr("user_id", "ivy"), descr("request_id", long+"2")}, 3},
		{"same id, another user", []*ratelimitv3.RateLimitDescriptor{descr("user_id", "jo"), descr("request_id", "r-1")},
			[]*ratelimitv3.RateLimitDescriptor{descr("user_id", "ivy"), descr("request_id", "r-1")}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			f.call(t, 0, tc.first...)
			f.call(t, 0, tc.then...)
			if got := f.call(t, 0, descr("user_id", "ivy")).Statuses[0].LimitRemaining; got != tc.remaining-1 {
				t.Fatalf("ivy has %d left, want %d", got, tc.remaining-1)
			}
		})
	}
}

// TestRequestIDAllocatesNothing: hashing the id costs the hot path no
// allocation; a request with an id allocates what one without does.
func TestRequestIDAllocatesNothing(t *testing.T) {
	if raceEnabled {
		// The pooled request state is dropped at random: counts vary by run.
		t.Skip("allocation counts under the race detector vary; make test runs this without it")
	}
	f := newFixture(t, &nopStore{})
	with := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descr("user_id", "u"), descr("request_id", strings.Repeat("i", 4096))}}
	without := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descr("user_id", "u"), descr("user_id", "v")}}
	allocs := func(req *rlsv3.RateLimitRequest) float64 {
		return testing.AllocsPerRun(100, func() {
			if _, err := f.svc.ShouldRateLimit(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		})
	}
	if a, b := allocs(with), allocs(without); a > b {
		t.Fatalf("%v allocations with an id, %v without", a, b)
	}
}

// nopStore allows everything and allocates nothing.
type nopStore struct{}

var _ store.Store = (*nopStore)(nil)

func (*nopStore) Decide(_ context.Context, req *store.Request, results []store.Result) (store.Outcome, error) {
	for i := range req.Items {
		results[i] = store.Result{}
		results[i].Allowed = true
	}
	return store.Outcome{Allowed: true}, nil
}
