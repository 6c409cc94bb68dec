package main

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestBucketBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := rapid.Uint64Range(0, 1<<(maxShift+subBits)-1).Draw(t, "v")
		i := bucketOf(v)
		lo, hi := bucketBounds(i)
		if i < 0 || i >= numBuckets || v < lo || v >= hi {
			t.Fatalf("bucketOf(%d) = %d, bounds [%d, %d)", v, i, lo, hi)
		}
		// A bucket is at most 1/half of its lower bound wide.
		if hi-lo > 1 && (hi-lo)*half > lo {
			t.Fatalf("bucket %d [%d, %d) is wider than 1/%d of %d", i, lo, hi, half, lo)
		}
		if i+1 < numBuckets {
			if next, _ := bucketBounds(i + 1); next != hi {
				t.Fatalf("bucket %d ends at %d, bucket %d starts at %d", i, hi, i+1, next)
			}
		}
	})
	if got := bucketOf(1 << 62); got != numBuckets-1 {
		t.Errorf("bucketOf(2^62) = %d, want the last bucket %d", got, numBuckets-1)
	}
}

func TestQuantile(t *testing.T) {
	var h histogram
	if got := h.quantile(0.5); got != 0 {
		t.Errorf("empty: p50 %v, want 0", got)
	}
	// 1, 2, …, 1000 µs.
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0.5, 500 * time.Microsecond},
		{0.9, 900 * time.Microsecond},
		{0.99, 990 * time.Microsecond},
		{0.999, 999 * time.Microsecond},
		{1, 1000 * time.Microsecond},
	} {
		got := h.quantile(tc.q)
		if d := got - tc.want; d < -tc.want/128 || d > tc.want/128 {
			t.Errorf("quantile(%v) = %v, want %v within 0.8 %%", tc.q, got, tc.want)
		}
	}
	if h.max != time.Millisecond || h.total != 1000 {
		t.Errorf("max %v, total %d: want 1ms, 1000", h.max, h.total)
	}
	var m histogram
	m.record(5 * time.Millisecond)
	m.merge(&h)
	if m.total != 1001 || m.max != 5*time.Millisecond || m.quantile(1) != 5*time.Millisecond {
		t.Errorf("merged: total %d, max %v, p100 %v", m.total, m.max, m.quantile(1))
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	h := new(histogram)
	if n := testing.AllocsPerRun(1000, func() { h.record(1234 * time.Microsecond) }); n != 0 {
		t.Errorf("record: %v allocations, want 0", n)
	}
}
