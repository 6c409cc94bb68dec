package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// report writes r as one line of space-separated key=value fields after
// "RESULT name" (see the package comment for the fields and their units).
func report(out io.Writer, r *result) error {
	var b strings.Builder
	name := r.Name
	if name == "" {
		name = "-"
	}
	secs := r.Window.Seconds()
	fmt.Fprintf(&b, "RESULT %s rps=%.0f reqs=%d ok=%d over_limit=%d errors=%d",
		name, float64(r.Reqs)/secs, r.Reqs, r.OK, r.OverLimit, r.Errors)
	for _, code := range slices.Sorted(maps.Keys(r.ByCode)) {
		fmt.Fprintf(&b, " errors.%s=%d", code, r.ByCode[code])
	}
	fmt.Fprintf(&b, " cut=%d", r.Cut)
	for _, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.50}, {"p90", 0.90}, {"p99", 0.99}, {"p99.9", 0.999}} {
		fmt.Fprintf(&b, " %s=%s", q.name, ms(r.Latency.quantile(q.q)))
	}
	fmt.Fprintf(&b, " max=%s", ms(r.Latency.max))
	fmt.Fprintf(&b, " client_cpu=%.2f client_cpu_us_per_req=%s", r.ClientCPU.Seconds()/secs, perReq(r.ClientCPU, r.Reqs))
	for i, p := range r.Config.Pids {
		fmt.Fprintf(&b, " %s_cpu=%.2f %s_cpu_us_per_req=%s", p.Name, r.ProcCPU[i].Seconds()/secs, p.Name, perReq(r.ProcCPU[i], r.Reqs))
	}
	c := r.Config
	keys := c.Keys
	if c.Hot {
		keys = 1
	}
	fmt.Fprintf(&b, " c=%d conns=%d descs=%d keys=%d rate=%.0f window=%.3fs\n",
		c.Workers, c.Conns, c.Descs, keys, c.Rate, secs)
	_, err := io.WriteString(out, b.String())
	return err
}

// ms formats d in milliseconds with microsecond digits.
func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

// perReq formats cpu / n in microseconds; "NaN" when no call counted.
func perReq(cpu time.Duration, n uint64) string {
	if n == 0 {
		return "NaN"
	}
	return fmt.Sprintf("%.2f", float64(cpu)/float64(time.Microsecond)/float64(n))
}
