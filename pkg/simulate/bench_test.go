package simulate

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/policy"
)

// millionTrace is a million requests over 100 s (one every 100 µs) from
// 10,000 users, every fourth with a path descriptor too, in the format
// asked for.
func millionTrace(jsonLines bool) []byte {
	var b strings.Builder
	if !jsonLines {
		b.WriteString(header)
	}
	for i := range 1_000_000 {
		at := FormatSeconds(int64(i) * 100_000)
		user := strconv.Itoa(i * 7919 % 10_000)
		path := i%4 == 0
		switch {
		case jsonLines && path:
			b.WriteString(`{"t":` + at + `,"domain":"edge","descriptors":[[{"key":"user","value":"` + user + `"}],[{"key":"path","value":"/p` + strconv.Itoa(i%16) + `"}]]}` + "\n")
		case jsonLines:
			b.WriteString(`{"t":` + at + `,"domain":"edge","descriptors":[[{"key":"user","value":"` + user + `"}]]}` + "\n")
		case path:
			b.WriteString(at + ",edge,user=" + user + "|path=/p" + strconv.Itoa(i%16) + ",\n")
		default:
			b.WriteString(at + ",edge,user=" + user + ",\n")
		}
	}
	return []byte(b.String())
}

// BenchmarkMillionRequests replays a million-request trace, read and
// parsed as it goes, through one policy; req/s is requests decided per
// second of wall time.
func BenchmarkMillionRequests(b *testing.B) {
	pol := parsePolicy(b, "p.yaml", testPolicy)
	for _, format := range []string{"csv", "jsonl"} {
		b.Run(format, func(b *testing.B) {
			trace := BytesTrace("t."+format, millionTrace(format == "jsonl"))
			var res []*Result
			for b.Loop() {
				var err error
				if res, err = Run(context.Background(), trace, []*policy.Policy{pol}, RunOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			if res[0].Requests != 1_000_000 {
				b.Fatalf("%d requests decided", res[0].Requests)
			}
			b.ReportMetric(float64(res[0].Requests)*float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}
