package redis

// FuzzLuaMatchesBucket is TestLuaMatchesBucket with the fuzzer choosing
// the sequences: its input is the bit stream rapid.MakeFuzz hands
// checkSequence (each 8 bytes, little-endian, one word), so the bytes are
// decoded into a bucket's parameters, a start instant and up to 12 steps of
// (dt, cost) or parameter changes, and the script's answers must be
// pkg/bucket's. An input too short for its sequence is padded with zero
// words. The seeds are written with rapidStream, which encodes
// chosen draws the way rapid v1.3.0 decodes them.

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/bucket"
)

func FuzzLuaMatchesBucket(f *testing.F) {
	for _, s := range luaSeeds {
		f.Add(s.encode().bytes())
	}
	srv := redistest.Start(f)
	c := newClient(f, srv.Addr())
	seq := 0
	f.Fuzz(func(t *testing.T, data []byte) {
		seq++
		s := newStore(t, c, Options{RequestTime: true, KeyPrefix: fmt.Sprintf("fuzz%d:", seq)})
		// Zero words after the input: where it runs short, the remaining
		// draws are their generators' smallest values rather than a skip.
		padded := append(data[:len(data):len(data)], make([]byte, 8*luaPadWords)...)
		rapid.MakeFuzz(func(rt *rapid.T) { checkSequence(rt, s, false) })(t, padded)
	})
}

// luaPadWords is more words than any sequence draws: 12 steps of at most
// 24 words (dt, kind, mode, new parameters), and 22 for the first
// parameters, the start and the number of steps.
const luaPadWords = 320

// luaParams are the draws of drawParams: the rate n/per (before reducing)
// and the capacity; n = 0 is a budget of the capacity.
type luaParams struct{ n, per, capacity int64 }

// luaStep is one step of checkSequence: dt, then a decision of cost, or,
// when next is set, a parameter change with on_resize mode.
type luaStep struct {
	dt   int64
	cost int64
	next *luaParams
	mode int64
}

// luaSeed is one sequence of checkSequence.
type luaSeed struct {
	params luaParams
	start  int64
	steps  []luaStep
}

var luaSeeds = []luaSeed{
	// Drain, deny, refill, time going backwards, a check that costs 0.
	{luaParams{1, int64(time.Second), 3}, 0, []luaStep{
		{dt: 0, cost: 1}, {dt: 0, cost: 1}, {dt: 0, cost: 1}, {dt: 0, cost: 1},
		{dt: int64(time.Second), cost: 1}, {dt: -int64(time.Second), cost: 1}, {dt: int64(time.Hour), cost: 0},
	}},
	// A cost above the capacity, refunds into a full and an empty bucket,
	// a rate that reduces (7/3s).
	{luaParams{7, 3 * int64(time.Second), 10}, 1 << 40, []luaStep{
		{dt: 0, cost: 11}, {dt: 0, cost: -5}, {dt: 1, cost: 10}, {dt: 1, cost: -3}, {dt: int64(time.Millisecond), cost: 3},
	}},
	// Capacities around the plain-number bound for a period of an hour
	// (capacity*per near 2^52), steps around 2^52 ns.
	{luaParams{1, int64(time.Hour), fastLimit/int64(time.Hour) + 1}, -(1 << 50), []luaStep{
		{dt: 0, cost: 2}, {dt: fastLimit - 1, cost: 1}, {dt: fastLimit + 1<<31, cost: 3}, {dt: 5, cost: -1},
	}},
	// Parameter changes mid-sequence, in both on_resize modes.
	{luaParams{10, int64(time.Second), 100}, 0, []luaStep{
		{dt: 0, cost: 60},
		{dt: int64(time.Millisecond), next: &luaParams{1, int64(time.Second), 50}, mode: 1},
		{dt: 0, cost: 3},
		{dt: int64(time.Second), next: &luaParams{1000, 1, 1000}, mode: 0},
		{dt: 1, cost: 999}, {dt: 1 << 62, cost: 1},
	}},
	// The largest capacity and rate, from an instant near the end of int64's
	// reach in the encoding, with a step that would overflow (stays put).
	{luaParams{bucket.MaxRateTokens, 1, bucket.MaxCapacity}, 1<<59 - 1, []luaStep{
		{dt: 0, cost: bucket.MaxCapacity}, {dt: 1, cost: bucket.MaxCapacity + 1}, {dt: 1 << 62, cost: 3},
		{dt: 1 << 62, cost: 0}, {dt: 1 << 62, cost: 2},
	}},
	// A budget: spent, refused for ever, refunded; converted to a rate and
	// back, in both on_resize modes.
	{luaParams{0, 0, 10}, 0, []luaStep{
		{dt: 0, cost: 7}, {dt: 1 << 62, cost: 4}, {dt: 1, cost: -2},
		{dt: int64(time.Second), next: &luaParams{1, int64(time.Second), 20}, mode: 1},
		{dt: int64(time.Second), cost: 1},
		{dt: int64(time.Millisecond), next: &luaParams{0, 0, 5}, mode: 0},
		{dt: int64(time.Hour), cost: 5}, {dt: 0, cost: 1},
	}},
	// The longest period.
	{luaParams{3, bucket.MaxRatePer, 2}, 0, []luaStep{{dt: 0, cost: 2}, {dt: bucket.MaxRatePer / 3, cost: 1}, {dt: 1 << 40, cost: 1}}},
}

// encode writes the seed as checkSequence draws it (see drawParams and
// checkSequence: their generators, in order).
func (sd luaSeed) encode() *rapidStream {
	s := new(rapidStream)
	capacity := sd.params.capacity
	s.params(sd.params)
	s.intRange(math.MinInt64, math.MaxInt64, sd.start)
	s.intRange(1, 12, int64(len(sd.steps)))
	for _, st := range sd.steps {
		const lo, hi = fastLimit - 1<<32, fastLimit + 1<<32
		switch {
		case st.dt >= lo && st.dt <= hi:
			s.index(3, 2)
			s.intRange(lo, hi, st.dt)
		case st.dt >= -int64(time.Second) && st.dt <= int64(time.Hour):
			s.index(3, 0)
			s.intRange(-int64(time.Second), int64(time.Hour), st.dt)
		default:
			s.index(3, 1)
			s.intRange(0, 1<<62, st.dt)
		}
		if st.next != nil {
			s.intRange(0, 4, 0)
			s.intRange(0, 1, st.mode)
			s.params(*st.next)
			capacity = st.next.capacity
			continue
		}
		s.intRange(0, 4, 1)
		if st.cost >= 0 && st.cost <= 3 {
			s.index(2, 1)
			s.intRange(0, 3, st.cost)
		} else {
			s.index(2, 0)
			s.intRange(-capacity, capacity+1, st.cost)
		}
	}
	return s
}

// params writes drawParams' draws; n = 0 is a budget's (bucket.NewBudget:
// only its capacity is drawn).
func (s *rapidStream) params(p luaParams) {
	if p.n == 0 {
		s.intRange(0, 4, 0)
		s.capacity(2, p.capacity)
		return
	}
	s.intRange(0, 4, 1)
	if p.n <= 10 {
		s.index(2, 0)
		s.intRange(1, 10, p.n)
	} else {
		s.index(2, 1)
		s.intRange(1, bucket.MaxRateTokens, p.n)
	}
	sampled := []int64{1, int64(time.Millisecond), int64(time.Second), int64(time.Hour)}
	if i := indexOf(sampled, p.per); i >= 0 {
		s.index(2, 0)
		s.index(len(sampled), i)
	} else {
		s.index(2, 1)
		s.intRange(1, bucket.MaxRatePer, p.per)
	}
	edge := min(max(int64(fastLimit)/p.per, 3), bucket.MaxCapacity-2)
	if p.capacity >= edge-2 && p.capacity <= edge+2 {
		s.index(3, 2)
		s.intRange(edge-2, edge+2, p.capacity)
		return
	}
	s.capacity(3, p.capacity)
}

// capacity writes the draw of capacity c from drawParams' OneOf of n
// generators, the first two 1..100 and 1..MaxCapacity.
func (s *rapidStream) capacity(n int, c int64) {
	if c <= 100 {
		s.index(n, 0)
		s.intRange(1, 100, c)
		return
	}
	s.index(n, 1)
	s.intRange(1, bucket.MaxCapacity, c)
}

func indexOf(xs []int64, x int64) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// rapidStream is a bit stream that rapid v1.3.0's integer generators
// (always biased) decode into chosen values. It records each draw, so
// TestRapidStream can check the encoding against rapid itself.
type rapidStream struct {
	words []uint64
	draws []func(*rapid.T) (got, want int64)
}

func (s *rapidStream) bytes() []byte {
	b := make([]byte, 0, 8*len(s.words))
	for _, w := range s.words {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return b
}

// index writes the draw of element i of n, as OneOf and SampledFrom draw it.
func (s *rapidStream) index(n, i int) {
	s.uintN(uint64(n-1), uint64(i))
	s.draws = append(s.draws, func(rt *rapid.T) (int64, int64) {
		elems := make([]int64, n)
		for j := range elems {
			elems[j] = int64(j)
		}
		return rapid.SampledFrom(elems).Draw(rt, ""), int64(i)
	})
}

// intRange writes v in [lo, hi], as Int64Range (and Int64, IntRange) draw
// it: a coin for the sign, then the distance from the range's end.
func (s *rapidStream) intRange(lo, hi, v int64) {
	if v < lo || v > hi {
		panic(fmt.Sprintf("rapidStream: %d out of [%d, %d]", v, lo, hi))
	}
	switch {
	case lo >= 0:
		s.coin(false)
		s.uintN(uint64(hi-lo), uint64(v-lo))
	case hi <= 0:
		s.coin(true)
		s.uintN(uint64(-lo)-uint64(-hi), uint64(-v)-uint64(-hi))
	case v < 0:
		s.coin(true)
		s.uintN(uint64(-lo)-1, uint64(-v)-1)
	default:
		s.coin(false)
		s.uintN(uint64(hi), uint64(v))
	}
	s.draws = append(s.draws, func(rt *rapid.T) (int64, int64) { return rapid.Int64Range(lo, hi).Draw(rt, ""), v })
}

// coin writes a flip of rapid's biased coin: 0.75 is heads for every
// chance rapid uses (1/2 with both signs, 1 with none positive), 0 is
// tails.
func (s *rapidStream) coin(heads bool) {
	var f float64
	if heads {
		f = 0.75
	}
	s.words = append(s.words, uint64(f*(1<<53)))
}

// uintN writes v in [0, max] as genUintNBiased reads it: a geometric draw
// of the bit length (at least v's, and short of the length that means
// max unless v is max), then the bits.
func (s *rapidStream) uintN(maxV, v uint64) {
	bitlen := bits.Len64(maxV)
	m := math.Max(8, (float64(bitlen)+48)/7)
	n, long := max(bits.Len64(v), 1), 64-(16-int(m))*4
	switch {
	case v == maxV && bitlen >= long:
		n = max(long, bitlen) // a length this long means max
	case n >= bitlen && bitlen >= long:
		panic(fmt.Sprintf("rapidStream: %d of [0, %d] cannot be encoded", v, maxV))
	}
	// genGeom returns floor(log1p(-f)/log1p(-p)); aim at the middle.
	p := 1 / (m + 1)
	f := 1 - math.Pow(1-p, float64(n-1)+0.5)
	s.words = append(s.words, uint64(f*(1<<53)), v)
}

// TestRapidStream: rapid decodes every seed's stream into the draws it
// was written with, so the seeds are the sequences they say (a newer rapid
// that reads its stream differently fails here, not silently).
func TestRapidStream(t *testing.T) {
	for i, sd := range luaSeeds {
		s := sd.encode()
		rapid.MakeFuzz(func(rt *rapid.T) {
			for j, draw := range s.draws {
				if got, want := draw(rt); got != want {
					rt.Fatalf("seed %d draw %d: %d, want %d", i, j, got, want)
				}
			}
		})(t, s.bytes())
	}
}
