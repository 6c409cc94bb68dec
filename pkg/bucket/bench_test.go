package bucket

import "testing"

// BenchmarkDecide is one decision with refill, the arithmetic every store
// pays per bucket: "hot" is a bucket asked every microsecond (it drains and
// then mostly rejects, working out a retry time), "idle" one asked every
// 1.3 s that refills whole tokens each time (a 128-bit division).
func BenchmarkDecide(b *testing.B) {
	for _, c := range []struct {
		name string
		step int64
	}{{"hot", 1_000}, {"idle", 1_300_000_007}} {
		b.Run(c.name, func(b *testing.B) {
			p := mustParams(b, 1000, "7/3s")
			s := p.Full(0)
			now := int64(0)
			b.ReportAllocs()
			for b.Loop() {
				now += c.step
				s, _ = p.Decide(s, now, 1)
			}
		})
	}
}
