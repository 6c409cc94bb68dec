package redis

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// TestAmbiguousTimeouts: Redis paused while a request's call is out, the
// request times out (an ambiguous error), and the call is decided when
// Redis resumes. Resolved as refused, the charge is refunded (a request id
// is released, so a retry is decided afresh); resolved as through, it
// stays. With Redis paused past the late wait the answer is lost: without
// an id it is unknown whether the call charged, with one the recorded
// answer is read and refunded. A post-paid report is usage: refused, its
// charge is kept all the same.
func TestAmbiguousTimeouts(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	v := storetest.Version(t, 1, 10, "1/h")
	post := storetest.PostPaidVersion(t, 2, 10, "1/h", 10)
	for i, tc := range []struct {
		name    string
		pause   time.Duration
		id      string
		passed  bool
		outcome string
		left    int64 // tokens after the resolution
		report  bool  // the request is a report of a post-paid rule
	}{
		{"a report, refused: kept", 120 * time.Millisecond, "", false, "kept", 6, true},
		{"refused: refunded", 120 * time.Millisecond, "", false, "refunded", 10, false},
		{"through: kept", 120 * time.Millisecond, "", true, "kept", 6, false},
		{"refused, with an id: refunded and released", 120 * time.Millisecond, "req-1", false, "refunded", 10, false},
		// Unknown it is: the client drops a connection whose command timed
		// out, and Redis what that connection had sent, or it ran the call.
		{"answer lost: unknown", lateWait + 300*time.Millisecond, "", false, "unknown", -1, false},
		// With an id, the record under it says: the client dropped the
		// connection, and the call never ran (no record), or it ran and
		// its charge is refunded; either way nothing stays charged.
		{"answer lost, with an id: the record says", lateWait + 300*time.Millisecond, "req-2", false, "uncharged|refunded", 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			s := newStore(t, c, Options{Registerer: reg, KeyPrefix: "amb" + strconv.Itoa(i) + ":"})
			decideID := func(ctx context.Context, id string, cost int64) (store.Outcome, int64, error) {
				it := store.Item{Key: "k", Version: v, Cost: cost}
				if tc.report {
					it.Version = post
					if cost != 0 {
						it.Charge = store.Report
					}
				}
				res := make([]store.Result, 1)
				out, err := s.Decide(ctx, &store.Request{ID: id, Items: []store.Item{it}}, res)
				return out, res[0].Remaining, err
			}
			decide := func(ctx context.Context, cost int64) (store.Outcome, int64, error) { return decideID(ctx, tc.id, cost) }
			if _, _, err := decideID(context.Background(), "", 0); err != nil { // the clock anchored, the library loaded
				t.Fatal(err)
			}
			// An answer that comes late: writes held (an FCALL is one) until
			// the call is out past its deadline, then resumed, well within
			// its late wait. One lost: all commands held past the late wait.
			resumed := time.Now().Add(tc.pause)
			var resume func()
			if tc.pause < lateWait {
				resume = pauseWrites(t, srv.Addr())
			} else if _, err := redistest.Do(srv.Addr(), "CLIENT", "PAUSE", strconv.FormatInt(tc.pause.Milliseconds(), 10), "ALL"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
			defer cancel()
			_, _, err := decide(ctx, 4)
			if resume != nil {
				resume()
				resumed = time.Now()
			}
			var amb store.Ambiguous
			if !errors.As(err, &amb) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a call out when its deadline passed: %v, want an ambiguous timeout", err)
			}
			amb.Resolve(tc.passed)
			amb.Resolve(!tc.passed) // only the first counts
			// tc.outcome names the resolution, or those it may be ("a|b").
			outcomes := []string{"uncharged", "kept", "refunded", "refund_failed", "unknown"}
			counted := func() (got string, total float64) {
				for _, o := range outcomes {
					if n := testutil.ToFloat64(s.metrics.ambiguous.WithLabelValues(o)); n > 0 {
						got, total = o, total+n
					}
				}
				return got, total
			}
			poll.Eventually(t, 5*time.Second, func() bool { _, total := counted(); return total > 0 }, "a "+tc.outcome+" resolution")
			time.Sleep(20 * time.Millisecond) // a second resolution would be counted by now
			got, total := counted()
			if total != 1 || !slices.Contains(strings.Split(tc.outcome, "|"), got) {
				t.Fatalf("resolved %v times, as %s; want once, as %s", total, got, tc.outcome)
			}
			// The client's connections are not ordered among each other:
			// read once Redis has run what it held.
			time.Sleep(time.Until(resumed.Add(50 * time.Millisecond)))
			if tc.id != "" && got == "refunded" {
				// A retry of the refunded request is decided (and charged),
				// not replayed.
				out, left, err := decide(context.Background(), 4)
				if err != nil {
					t.Fatal(err)
				}
				if out.Replayed || left != tc.left-4 {
					t.Errorf("retry of the refunded id: replayed %v, %d tokens, want decided with %d left", out.Replayed, left, tc.left-4)
				}
				return
			}
			_, left, err := decideID(context.Background(), "", 0)
			if err != nil {
				t.Fatal(err)
			}
			if left != tc.left && !(tc.left == -1 && (left == 6 || left == 10)) {
				t.Errorf("%d tokens after the resolution, want %d", left, tc.left)
			}
		})
	}
}
