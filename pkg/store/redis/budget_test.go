package redis

import (
	"context"
	"testing"
	"time"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/store"
)

// after is a horizon ending every bucket d after its instant.
type after time.Duration

func (d after) End(at int64) int64 { return at + int64(d) }

// TestTTLAtHorizon: a budget's bucket (it never refills, so it is never
// full again) lives until its version's horizon and twice the tolerance,
// as a refilling one lives until full (TestTTLUntilFull), in a compact
// call and in one laid out in full alike; its waits are
// bucket.MaxDuration; a refund that fills it deletes it, and once its key
// expired it is new, full, again.
func TestTTLAtHorizon(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	const tol = 50 * time.Millisecond
	s := newStore(t, c, Options{ClockStepTolerance: tol})
	p, err := bucket.NewBudget(10)
	if err != nil {
		t.Fatal(err)
	}
	v := bucket.NewVersion(1, p, 0)
	v.Horizon = after(3 * time.Second)
	pttl := func(key string) int64 {
		t.Helper()
		ms, err := c.Do(context.Background(), c.B().Pttl().Key(s.bucketKey(tagBytes(key))).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	exists := func(key string) bool {
		n, _ := c.Do(context.Background(), c.B().Exists().Key(s.bucketKey(tagBytes(key))).Build()).AsInt64()
		return n == 1
	}
	_, res := decide(t, s, 0, store.Item{Key: "a", Version: v, Cost: 4})
	if !res[0].Allowed || res[0].Remaining != 6 || res[0].ResetAfter != bucket.MaxDuration {
		t.Fatalf("first charge: %+v", res[0])
	}
	if got, want := pttl("a"), 3000+2*tol.Milliseconds(); got > want || got < want-200 {
		t.Fatalf("PTTL %dms, want about %dms (until the horizon and twice the tolerance)", got, want)
	}
	// A request id's call is laid out in full, not compact: the same life.
	req := &store.Request{Now: s.opts.Clock.Now(), ID: "r1", Items: []store.Item{{Key: "c", Version: v, Cost: 1}}}
	if _, err := s.Decide(context.Background(), req, res); err != nil || res[0].Remaining != 9 {
		t.Fatalf("with a request id: %+v, %v", res[0], err)
	}
	if got, want := pttl("c"), 3000+2*tol.Milliseconds(); got > want || got < want-200 {
		t.Fatalf("with a request id: PTTL %dms, want about %dms", got, want)
	}
	_, res = decide(t, s, 0, store.Item{Key: "a", Version: v, Cost: 7})
	if res[0].Allowed || res[0].Remaining != 6 || res[0].RetryAfter != bucket.MaxDuration {
		t.Fatalf("a charge beyond the budget: %+v, want rejected, 6 left, retry MaxDuration", res[0])
	}
	decide(t, s, 0, store.Item{Key: "a", Version: v, Cost: -4})
	if exists("a") {
		t.Fatal("a full budget's key was kept")
	}
	// A short horizon: the key expires at it, and the bucket is new again.
	short := bucket.NewVersion(2, p, 0)
	short.Horizon = after(100 * time.Millisecond)
	decide(t, s, 0, store.Item{Key: "b", Version: short, Cost: 10})
	if got := pttl("b"); got > 100+2*tol.Milliseconds() || got <= 0 {
		t.Fatalf("PTTL %dms, want at most %dms", got, 100+2*tol.Milliseconds())
	}
	poll.Eventually(t, 2*time.Second, func() bool { return !exists("b") }, "an empty budget's key to expire at its horizon")
	if _, res := decide(t, s, 0, store.Item{Key: "b", Version: short}); res[0].Remaining != 10 {
		t.Fatalf("after expiry: %d tokens, want 10", res[0].Remaining)
	}
}
