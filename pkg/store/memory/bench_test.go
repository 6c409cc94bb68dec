package memory

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// keys16 returns n distinct 16-byte keys.
func keys16(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%011d", i)
	}
	return keys
}

// key16 writes key number i into buf as keys16 spells it and returns it as
// a string that aliases buf, valid until the next call.
func key16(buf []byte, i uint64) string {
	for j := len(buf) - 1; j >= 5; j-- {
		buf[j] = byte('0' + i%10)
		i /= 10
	}
	return unsafe.String(&buf[0], len(buf))
}

// BenchmarkDecide is one single-bucket request on the store. Run it with
// -cpu 1,2: "hot" is every goroutine on one key (one shard lock), "1M-keys"
// spreads requests over a million stored buckets (cache misses dominate).
func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{1, 1_000_000} {
		name := "hot"
		if n > 1 {
			name = "1M-keys"
		}
		b.Run(name, func(b *testing.B) {
			s := New(Options{MaxBuckets: 2 * n})
			v := storetest.Version(b, 1, 1_000_000_000, "1/h")
			for i, k := range keys16(n) {
				decide(b, s, int64(i), "", store.Item{Key: k, Version: v, Cost: 1})
			}
			var seq atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				x := seq.Add(0x9e3779b97f4a7c15) | 1
				items := []store.Item{{Version: v, Cost: 1}}
				res := make([]store.Result, 1)
				req := &store.Request{Items: items}
				// Keys are built in a reused buffer, as the service does.
				buf := []byte("user:00000000000")
				for pb.Next() {
					x ^= x << 13
					x ^= x >> 7
					x ^= x << 17
					items[0].Key = key16(buf, x%uint64(n))
					req.Now = int64(n) + int64(x>>40)
					if _, err := s.Decide(context.Background(), req, res); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkBytesPerBucket stores 1M buckets of 16-byte keys and reports the
// heap in use per bucket.
func BenchmarkBytesPerBucket(b *testing.B) {
	keys := keys16(1_000_000)
	v := storetest.Version(b, 1, 10, "1/h")
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := New(Options{MaxBuckets: 2_000_000})
		for i, k := range keys {
			decide(b, s, int64(i), "", store.Item{Key: k, Version: v, Cost: 1})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if s.Stats().Buckets != len(keys) {
			b.Fatalf("%d buckets stored", s.Stats().Buckets)
		}
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(len(keys)), "B/bucket")
		runtime.KeepAlive(s)
	}
}

// BenchmarkPostPaidPair is one post-paid request's two calls with its
// request id, as Envoy makes them: a check and its report, each on a key
// of 1,000 users. "reserve" holds 100 tokens at the check and settles them
// at the report; "plain" is the same pair without a reservation. Both pay
// for the request ids' replay records; the difference is the reservation.
func BenchmarkPostPaidPair(b *testing.B) {
	for _, reserve := range []int64{0, 100} {
		name := "plain"
		if reserve > 0 {
			name = "reserve"
		}
		b.Run(name, func(b *testing.B) {
			s := New(Options{})
			v := storetest.PostPaidVersion(b, 1, 1_000_000_000, "1000000/s", 1_000_000)
			keys := keys16(1000)
			check := []store.Item{{Version: v, Charge: store.Check}}
			if reserve > 0 {
				check[0].Reserve, check[0].ReserveTTL = reserve, int64(time.Minute)
			}
			report := []store.Item{{Version: v, Charge: store.Report, Cost: 80}}
			res := make([]store.Result, 1)
			id := []byte("request-00000000")
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				check[0].Key, report[0].Key = keys[i%len(keys)], keys[i%len(keys)]
				rid := key16(id, uint64(i))
				now := int64(i) * 1000
				if _, err := s.Decide(context.Background(), &store.Request{Now: now, ID: rid, Items: check}, res); err != nil || !res[0].Allowed {
					b.Fatal(err, res[0])
				}
				if _, err := s.Decide(context.Background(), &store.Request{Now: now + 500, ID: rid, Items: report}, res); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
