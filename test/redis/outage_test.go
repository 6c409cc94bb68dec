package redis

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/internal/tgproc"
)

const outagePolicy = `
revision: 3
domains:
  edge:
    - name: strict
      match: [{key: tenant}]
      capacity: 1000000
      refill: 1000/s
      on_store_error: deny
    - name: open
      match: [{key: path}]
      capacity: 1000000
      refill: 1000/s
      on_store_error: allow
    - name: per-user
      match: [{key: user_id}]
      capacity: 10
      refill: 1/h
      on_store_error: local
`

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// TestRedisOutage kills Redis under load and brings it back: each
// on_store_error mode answers as documented, marked degraded (an outage
// never looks like an ordinary rejection), fast, counted; tokengate stays
// ready and tokengate_store_degraded reports the outage; the service recovers without a restart, and after SCRIPT FLUSH too.
func TestRedisOutage(t *testing.T) {
	srv := redistest.Start(t)
	p := start(t, "--store", "redis", "--redis-addr", srv.Addr(), "--policy", writeFile(t, outagePolicy),
		"--redis-timeout", "50ms", "--redis-local-share", "0.5")
	if r := p.ask(t, descriptor("tenant", "a")); r.OverallCode != ok || degraded(r) {
		t.Fatalf("healthy: %v", r)
	}
	if code, _ := p.Get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz with Redis up: %d", code)
	}

	// Load on the deny and allow rules while Redis dies: an answer is
	// either the store's (OK, not degraded) or on_store_error's (degraded).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Value
	var sawDegraded atomic.Bool
	for _, kv := range [][2]string{{"tenant", "load"}, {"path", "/load"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := p.ask(t, descriptor(kv[0], kv[1]))
				deg := degraded(r)
				sawDegraded.Store(sawDegraded.Load() || deg)
				switch {
				case !deg && r.OverallCode != ok,
					deg && kv[0] == "tenant" && r.OverallCode != over,
					deg && kv[0] == "path" && r.OverallCode != ok:
					bad.Store(kv[0] + ": " + r.String())
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	srv.Kill()
	poll.Eventually(t, tgproc.Timeout, sawDegraded.Load, "degraded answers under load")
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if b := bad.Load(); b != nil {
		t.Fatalf("an answer under load broke its rule's on_store_error: %v", b)
	}

	// Each mode, while Redis is down, answers quickly.
	timed := func(what string, ds ...string) *rlsv3.RateLimitResponse {
		t.Helper()
		begin := time.Now()
		r := p.ask(t, descriptor(ds...))
		if d := time.Since(begin); d > 500*time.Millisecond {
			t.Errorf("%s took %v with Redis down", what, d)
		}
		if !degraded(r) {
			t.Fatalf("%s: not marked degraded: %v", what, r)
		}
		return r
	}
	if r := timed("deny", "tenant", "a"); r.OverallCode != over {
		t.Fatalf("on_store_error deny: %v", r)
	}
	if r := timed("allow", "path", "/x"); r.OverallCode != ok {
		t.Fatalf("on_store_error allow: %v", r)
	}
	for i := range 5 { // the local share: half of 10
		if r := timed("local", "user_id", "u"); r.OverallCode != ok || r.Statuses[0].LimitRemaining != uint32(4-i) {
			t.Fatalf("on_store_error local, call %d: %v", i, r)
		}
	}
	if r := timed("local spent", "user_id", "u"); r.OverallCode != over || header(r, "retry-after") == "" {
		t.Fatalf("on_store_error local past its share: %v", r)
	}
	poll.Eventually(t, tgproc.Timeout, func() bool { return p.Metric(t, "tokengate_store_degraded") == "1" }, "degraded")
	if code, _ := p.Get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz with Redis down: %d, want 200 (on_store_error answers)", code)
	}
	poll.Eventually(t, tgproc.Timeout, func() bool { return p.Metric(t, "tokengate_redis_circuit_open") == "1" }, "the circuit to open")
	if n, _ := strconv.ParseFloat(p.Metric(t, `tokengate_store_errors_total{store="redis"}`), 64); n < 1 {
		t.Fatalf("store errors not counted: %v", n)
	}
	if n, _ := strconv.ParseFloat(p.Metric(t, `tokengate_store_fallbacks_total{mode="local"}`), 64); n < 6 {
		t.Fatalf("local fallbacks counted %v, want at least 6", n)
	}

	// Redis comes back (empty, no script cached): no restart needed.
	srv.Restart()
	poll.Eventually(t, tgproc.Timeout, func() bool {
		r := p.ask(t, descriptor("user_id", "u"))
		return r.OverallCode == ok && !degraded(r)
	}, "answers from Redis again")
	poll.Eventually(t, tgproc.Timeout, func() bool { return p.Metric(t, "tokengate_store_degraded") == "0" }, "not degraded")
	if g := p.Metric(t, "tokengate_redis_circuit_open"); g != "0" {
		t.Fatalf("circuit gauge %q after recovery", g)
	}

	// FUNCTION FLUSH: the next call loads the library again.
	reloads := p.Metric(t, "tokengate_redis_script_reloads_total")
	if _, err := redistest.Do(srv.Addr(), "FUNCTION", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if r := p.ask(t, descriptor("user_id", "u")); r.OverallCode != ok || degraded(r) || r.Statuses[0].LimitRemaining != 8 {
		t.Fatalf("after FUNCTION FLUSH: %v", r)
	}
	if after := p.Metric(t, "tokengate_redis_script_reloads_total"); after == reloads {
		t.Fatalf("no script reload counted after FUNCTION FLUSH (%s)", after)
	}
}

// TestStartWithRedisDown: tokengate started while Redis is unreachable
// serves anyway (degraded, on_store_error answering whoever calls) but is
// not ready until Redis has answered once: it cannot tell a Redis down from
// a misspelt one. It connects when Redis comes up, without a restart.
func TestStartWithRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	p := start(t, "--store", "redis", "--redis-addr", srv.Addr(), "--policy", writeFile(t, outagePolicy),
		"--redis-timeout", "50ms", "--redis-dial-timeout", "200ms")
	if r := p.ask(t, descriptor("tenant", "a")); r.OverallCode != over || !degraded(r) {
		t.Fatalf("Redis down at start, on_store_error deny: %v", r)
	}
	if code, body := p.Get(t, "/readyz"); code != 503 || !strings.Contains(body, "redis has not answered since the start") {
		t.Fatalf("/readyz with Redis down at start: %d %q, want 503 (Redis never answered)", code, body)
	}
	if g := p.Metric(t, "tokengate_store_degraded"); g != "1" {
		t.Fatalf("tokengate_store_degraded %q with Redis down at start, want 1", g)
	}
	srv.Restart()
	poll.Eventually(t, tgproc.Timeout, func() bool {
		r := p.ask(t, descriptor("tenant", "a"))
		return r.OverallCode == ok && !degraded(r)
	}, "answers from Redis")
	poll.Eventually(t, tgproc.Timeout, func() bool { return p.Metric(t, "tokengate_store_degraded") == "0" }, "not degraded")
	tgproc.WaitHealth(t, p.Conn, "", serving)
}
