package monitoring_test

// What a running tokengate exports: the binary built from the main module,
// started with the memory store and with the Redis store (against a real
// redis-server), driven until every series the rules and the dashboard
// read exists, and scraped.

import (
	"fmt"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/internal/tgproc"
	"github.com/tokengate/tokengate/tools/internal/build"
)

// exported maps each sample name (a histogram's _bucket, _sum and _count)
// to its label names and, for each, the values seen.
type exported map[string]map[string]map[string]bool

// add reads one /metrics page.
func (e exported) add(page string) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(page))
	if err != nil {
		return err
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				e.sample(name+"_bucket", m, "le")
				e.sample(name+"_sum", m)
				e.sample(name+"_count", m)
			case dto.MetricType_SUMMARY:
				e.sample(name, m, "quantile")
				e.sample(name+"_sum", m)
				e.sample(name+"_count", m)
			default:
				e.sample(name, m)
			}
		}
	}
	return nil
}

func (e exported) sample(name string, m *dto.Metric, extra ...string) {
	ls := e[name]
	if ls == nil {
		ls = map[string]map[string]bool{}
		e[name] = ls
	}
	for _, l := range m.GetLabel() {
		if ls[l.GetName()] == nil {
			ls[l.GetName()] = map[string]bool{}
		}
		ls[l.GetName()][l.GetValue()] = true
	}
	for _, l := range extra {
		if ls[l] == nil {
			ls[l] = map[string]bool{}
		}
	}
}

// scrapeTokengate builds tokengate, runs it with each store and returns
// the union of what both exported.
func scrapeTokengate(t *testing.T) exported {
	t.Helper()
	bin := build.Tokengate(t)
	e := exported{}
	for name, run := range map[string]func(*testing.T, string) string{"memory": driveMemory, "redis": driveRedis} {
		page := run(t, bin)
		if err := e.add(page); err != nil {
			t.Fatalf("%s store: /metrics: %v", name, err)
		}
	}
	return e
}

// memoryPolicy has a bucket that runs dry, a shadow rule and a capacity a
// cost can exceed.
const memoryPolicy = `revision: 1
domains:
  edge:
    - name: per-user
      match: [{key: user_id}]
      capacity: 2
      refill: 1/h
    - name: per-tenant
      match: [{key: tenant}]
      capacity: 1
      refill: 1/h
      shadow: true
`

// driveMemory runs the memory store with room for 4 buckets, so that new
// users evict buckets that are not full, and with a policy file that is
// then replaced by one that does not validate.
func driveMemory(t *testing.T, bin string) string {
	path := tgproc.PolicyFile(t, memoryPolicy)
	p := tgproc.Start(t, bin, "--policy", path, "--max-buckets", "4")
	for range 3 { // ok, ok, over_limit
		p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "u0"))
	}
	p.Ask(t, "edge", 5, tgproc.Descriptor("user_id", "u1"))       // refused: above the capacity
	p.Ask(t, "edge", 0, tgproc.Descriptor("tenant", "t"))         // ok
	p.Ask(t, "edge", 0, tgproc.Descriptor("tenant", "t"))         // shadow_over_limit
	p.Ask(t, "edge", 0, tgproc.Descriptor("remote_address", "x")) // no_rule
	for i := range 64 {
		p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", fmt.Sprint("spray-", i)))
	}
	if n := p.Metric(t, `tokengate_bucket_evictions_total{reason="idle"}`); n == "" || n == "0" {
		t.Fatal("64 users in 4 buckets evicted none that was not full")
	}
	tgproc.WritePolicy(t, path, "domains: {edge: [{name: broken, capacity: -1}]}\n")
	poll.Eventually(t, tgproc.Timeout, func() bool {
		return p.Metric(t, `tokengate_policy_reload_failures_total{reason="invalid"}`) != ""
	}, "a refused reload")
	_, page := p.Get(t, "/metrics")
	return page
}

// redisPolicy has a rule for each on_store_error mode.
const redisPolicy = `revision: 2
domains:
  edge:
    - name: deny
      match: [{key: user_id}]
      capacity: 2
      refill: 1/h
      on_store_error: deny
    - name: allow
      match: [{key: tenant}]
      capacity: 2
      refill: 1/h
      on_store_error: allow
    - name: local
      match: [{key: remote_address}]
      capacity: 2
      refill: 1/h
      on_store_error: local
`

// driveRedis runs the Redis store, spends a bucket, then stops Redis and
// asks until the circuit breaker opens.
func driveRedis(t *testing.T, bin string) string {
	srv := redistest.Start(t)
	p := tgproc.Start(t, bin, "--policy", tgproc.PolicyFile(t, redisPolicy), "--store", "redis", "--redis-addr", srv.Addr())
	ask := func() {
		p.Ask(t, "edge", 0, tgproc.Descriptor("user_id", "u0"))
		p.Ask(t, "edge", 0, tgproc.Descriptor("tenant", "t0"))
		p.Ask(t, "edge", 0, tgproc.Descriptor("remote_address", "a0"))
	}
	for range 3 {
		ask()
	}
	srv.Stop()
	poll.Eventually(t, tgproc.Timeout, func() bool {
		ask()
		return p.Metric(t, "tokengate_redis_circuit_open") == "1"
	}, "the Redis circuit breaker to open")
	_, page := p.Get(t, "/metrics")
	return page
}
