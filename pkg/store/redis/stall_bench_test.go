package redis

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// BenchmarkStalls: 64 callers at once, each request one bucket of 10,000,
// for b.N requests in all, with the default deadline (15ms), as serve
// runs the store. It reports the answers that were store errors (which
// on_store_error answers: false denials under deny) per million, by why
// (late: sent, not answered in time; queued: never sent; other), and the
// latency quantiles. Run it with -trace or GODEBUG=gctrace=1 to see where
// the stalls come from.
func BenchmarkStalls(b *testing.B) {
	for _, mode := range []string{"single", "cluster"} {
		b.Run(mode, func(b *testing.B) {
			var addrs []string
			if mode == "cluster" {
				addrs = redistest.StartCluster(b).Addrs()
			} else {
				addrs = []string{redistest.Start(b).Addr()}
			}
			c := newClient(b, addrs...)
			s, err := New(Options{Client: c})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Prepare(context.Background()); err != nil {
				b.Fatal(err)
			}
			stalls(b, s)
		})
	}
}

func stalls(b *testing.B, s *Store) {
	v := storetest.Version(b, 1, 1<<40, "1/h")
	const callers = 64
	lat := make([][]time.Duration, callers)
	var late, queued, other [callers]int
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]store.Result, 1)
			for i := g; i < b.N; i += callers {
				req := &store.Request{Items: []store.Item{{Key: "s" + strconv.Itoa(i%10000), Version: v, Cost: 1}}}
				t0 := time.Now()
				_, err := s.Decide(context.Background(), req, res)
				lat[g] = append(lat[g], time.Since(t0))
				switch {
				case err == nil:
				case errors.Is(err, errLate):
					late[g]++
				case errors.Is(err, errQueued):
					queued[g]++
				default:
					other[g]++
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	var all []time.Duration
	var nl, nq, no int
	for g := range callers {
		all = append(all, lat[g]...)
		nl, nq, no = nl+late[g], nq+queued[g], no+other[g]
	}
	slices.Sort(all)
	perM := func(n int) float64 { return float64(n) * 1e6 / float64(len(all)) }
	b.ReportMetric(perM(nl), "late/M")
	b.ReportMetric(perM(nq), "queued/M")
	b.ReportMetric(perM(no), "other/M")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(all[len(all)*999/1000].Microseconds()), "p999-µs")
	b.ReportMetric(float64(all[len(all)-1].Microseconds()), "max-µs")
}
