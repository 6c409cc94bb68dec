package main

// The latency histogram is log-linear, like HdrHistogram: values below
// 2^subBits nanoseconds have a bucket each; above, every power of two is
// split into 2^(subBits-1) equal buckets, so a bucket is at most 1/64 of
// its lower bound wide (subBits = 7) and a percentile read from its middle
// is within 0.8 % of the true value. It is a fixed array, so recording
// allocates nothing and costs a bits.Len64 and an increment.

import (
	"math"
	"math/bits"
	"time"
)

const (
	subBits  = 7
	subCount = 1 << subBits
	half     = subCount / 2
	// maxShift bounds the histogram at 2^(maxShift+subBits) ns (about 36
	// minutes); longer values are recorded in the last bucket. No call of
	// a bounded run lasts that long.
	maxShift   = 34
	numBuckets = maxShift*half + subCount
)

// histogram counts latencies. The zero value is empty and ready to use. It
// is not safe for concurrent use: each worker records into its own and the
// run merges them when the workers have stopped.
type histogram struct {
	counts [numBuckets]uint64
	total  uint64
	max    time.Duration
}

// bucketOf returns the index of the bucket that holds v nanoseconds.
func bucketOf(v uint64) int {
	shift := bits.Len64(v) - subBits
	if shift <= 0 {
		return int(v)
	}
	if shift > maxShift {
		return numBuckets - 1
	}
	return shift*half + int(v>>shift)
}

// bucketBounds returns the values bucket i holds: [lo, hi).
func bucketBounds(i int) (lo, hi uint64) {
	if i < subCount {
		return uint64(i), uint64(i) + 1
	}
	shift := i/half - 1
	mantissa := uint64(i - shift*half)
	return mantissa << shift, (mantissa + 1) << shift
}

// record adds one latency; a negative one (which a monotonic clock does
// not produce) counts as zero.
func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.total++
	if d > h.max {
		h.max = d
	}
}

// merge adds o's counts to h.
func (h *histogram) merge(o *histogram) {
	for i, n := range o.counts {
		h.counts[i] += n
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// quantile returns the latency below which a fraction q (0 < q <= 1) of the
// recorded ones lie: the middle of the bucket that holds it, never more
// than the largest recorded value. It returns 0 for an empty histogram.
func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i, n := range h.counts {
		seen += n
		if seen >= rank {
			lo, hi := bucketBounds(i)
			return min(time.Duration(lo+(hi-lo)/2), h.max)
		}
	}
	return h.max
}
