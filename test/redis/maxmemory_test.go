package redis

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/internal/tgproc"
	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/store"
	rstore "github.com/tokengate/tokengate/pkg/store/redis"
	"github.com/tokengate/tokengate/pkg/store/redis/redisconn"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// The bounded-keys tests: a flood of distinct keys into a redis-server
// with a small maxmemory, through the store, as an attacker's made-up
// values would arrive (1.13M keys in 28s were seen). The keys and the
// real users share one slow rule, capacity 10 refilled 1/h: a flood key
// charged 1 is full in 1h (TTL 13h with the 6h tolerance), a drained
// user's bucket in 10h (TTL 16-22h).

const (
	floodWorkers  = 96 // concurrent decisions; rueidis pipelines them
	floodMaxKeys  = 250_000
	floodLimit    = 75 * time.Second
	memoryMargin  = 1 << 20 // allowed above maxmemory: one call's writes and the client buffers
	perKeySamples = 20_000  // keys written before eviction begins, to measure a key
)

// TestMaxMemoryFlood: 250k distinct keys into 16 MiB under volatile-ttl
// (about 60k fit: the memory turns over three times, as 1M into 64 MiB
// would, in a quarter of the time).
// Redis's used_memory never goes past maxmemory (sampled every 50ms), no
// decision fails (eviction makes room; noeviction would refuse them), and
// the five real users drained before the flood and asked again at each
// quarter of it are still drained at the end: eviction took the flood's
// keys, whose buckets are full sooner, not theirs. With fewer keys than
// 250k within floodLimit (a slow machine) the test still needs the memory to
// have turned over once.
func TestMaxMemoryFlood(t *testing.T) {
	const maxMemory = 16 << 20
	f := newFlood(t, maxMemory, "volatile-ttl")
	if l := f.st.CheckLimits(context.Background()); l.Verdict != redisconn.LimitsSafe {
		t.Fatalf("CheckLimits: %v: %s", l.Verdict, l)
	}
	f.drainUsers()
	begin := time.Now()
	bucketBytes, idBytes, perKey := f.measureKey()
	n, maxUsed := f.run(perKeySamples, floodMaxKeys, begin.Add(floodLimit), floodMaxKeys/4)
	n += perKeySamples
	took := time.Since(begin)
	used, evicted, dbsize := f.info("memory", "used_memory"), f.info("stats", "evicted_keys"), f.dbsize()
	maxUsed = max(maxUsed, used)
	t.Logf("%d keys in %v (%.0f/s, %d workers); used_memory max %d (maxmemory %d, %+d), end %d; %d keys kept, %d evicted",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds(), floodWorkers, maxUsed, maxMemory, maxUsed-maxMemory, used, dbsize, evicted)
	t.Logf("a bucket key: MEMORY USAGE %d B, %.0f B of used_memory each (%d keys, before eviction; %.0f B at maxmemory); a request id key: MEMORY USAGE %d B",
		bucketBytes, perKey, perKeySamples, float64(maxMemory)/float64(dbsize), idBytes)
	if n < floodMaxKeys {
		t.Logf("only %d of %d keys within %v on this machine", n, floodMaxKeys, floodLimit)
	}
	if evicted < dbsize {
		t.Fatalf("%d keys evicted, fewer than the %d kept: the flood did not turn the memory over once", evicted, dbsize)
	}
	if maxUsed > maxMemory+memoryMargin {
		t.Errorf("used_memory reached %d, past maxmemory %d by more than %d", maxUsed, maxMemory, memoryMargin)
	}
	if k, err := f.st.SampleKeys(context.Background()); err != nil || k != f.dbsize() {
		t.Errorf("SampleKeys: %d %v, DBSIZE %d", k, err, f.dbsize())
	}
	if lost := f.lostUsers(); len(lost) > 0 {
		t.Errorf("drained buckets evicted, back full: %v", lost)
	}
}

// TestMaxMemoryPolicies is why CheckLimits accepts volatile-ttl alone: a
// flood of about 9 times what fits (11k keys), with the real users
// drained first and then quiet, keeps every drained bucket under
// volatile-ttl and evicts them under volatile-lru and volatile-lfu (the
// flood's keys are all more recent, and as often used).
func TestMaxMemoryPolicies(t *testing.T) {
	const maxMemory = 4 << 20
	for _, tc := range []struct {
		policy string
		keeps  bool
	}{
		{"volatile-ttl", true},
		{"volatile-lru", false},
		{"volatile-lfu", false},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			f := newFlood(t, maxMemory, tc.policy)
			f.drainUsers()
			n, _ := f.run(0, 100_000, time.Now().Add(floodLimit), 0)
			if evicted := f.info("stats", "evicted_keys"); evicted < 3*f.dbsize() {
				t.Fatalf("%d keys, %d evicted, %d kept: not enough turnover", n, evicted, f.dbsize())
			}
			lost := f.lostUsers()
			t.Logf("%s: %d keys, %d evicted; drained buckets lost: %d of %d", tc.policy, n, f.info("stats", "evicted_keys"), len(lost), len(f.users))
			switch {
			case tc.keeps && len(lost) > 0:
				t.Errorf("drained buckets evicted, back full: %v", lost)
			case !tc.keeps && len(lost) == 0:
				t.Errorf("every drained bucket kept: %s may be safe after all (redisconn/limits.go acceptedPolicies)", tc.policy)
			}
		})
	}
}

// flood is a redis-server with a maxmemory and policy, a store on it that
// takes every decision to Redis (no deny cache), and five real users.
type flood struct {
	t     *testing.T
	srv   *redistest.Server
	st    *rstore.Store
	clk   clock.Clock
	v     *bucket.Version
	users []string
}

func newFlood(t *testing.T, maxMemory int, policy string) *flood {
	t.Helper()
	srv := redistest.Start(t, "--maxmemory", strconv.Itoa(maxMemory), "--maxmemory-policy", policy)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	clk := clock.NewMonotonic()
	st, err := rstore.New(rstore.Options{Client: c, Clock: clk, Timeout: 5 * time.Second, DenyCacheBytes: new(0)})
	if err != nil {
		t.Fatal(err)
	}
	return &flood{t: t, srv: srv, st: st, clk: clk, v: storetest.Version(t, 1, 10, "1/h"),
		users: []string{"user-a", "user-b", "user-c", "user-d", "user-e"}}
}

func (f *flood) decide(key, id string, cost int64) (store.Result, error) {
	var res [1]store.Result
	req := &store.Request{Now: f.clk.Now(), ID: id, Items: []store.Item{{Key: key, Version: f.v, Cost: cost, Revision: 1}}}
	_, err := f.st.Decide(context.Background(), req, res[:])
	return res[0], err
}

// drainUsers spends every token of the real users' buckets.
func (f *flood) drainUsers() {
	f.t.Helper()
	for _, u := range f.users {
		if r, err := f.decide(u, "", 10); err != nil || !r.Allowed {
			f.t.Fatalf("drain %s: %+v %v", u, r, err)
		}
	}
}

// lostUsers are the real users whose bucket allows a request again: it
// was evicted, and came back full.
func (f *flood) lostUsers() []string {
	f.t.Helper()
	var lost []string
	for _, u := range f.users {
		r, err := f.decide(u, "", 1)
		if err != nil {
			f.t.Fatalf("%s: %v", u, err)
		}
		if r.Allowed || r.RetryAfter <= 0 {
			lost = append(lost, u)
		}
	}
	return lost
}

// measureKey writes the first perKeySamples flood keys and one request id
// and returns MEMORY USAGE of a bucket key and of the id's key, and the
// used_memory each bucket key added.
func (f *flood) measureKey() (bucketBytes, idBytes int64, perKey float64) {
	f.t.Helper()
	used, keys := f.info("memory", "used_memory"), f.dbsize()
	f.run(0, perKeySamples, time.Now().Add(floodLimit), 0)
	// The clock key (5s) may have expired meanwhile: count what is there.
	added := f.dbsize() - keys
	if added < perKeySamples-1 || f.info("stats", "evicted_keys") != 0 {
		f.t.Fatalf("%d keys added, %d evicted: want %d and none", added, f.info("stats", "evicted_keys"), perKeySamples)
	}
	perKey = float64(f.info("memory", "used_memory")-used) / float64(added)
	if _, err := f.decide("with-id", "0123456789abcdef", 1); err != nil {
		f.t.Fatal(err)
	}
	usage := func(match string) int64 {
		out, err := redistest.Do(f.srv.Addr(), "SCAN", "0", "MATCH", match, "COUNT", "100000")
		if err != nil {
			f.t.Fatal(err)
		}
		lines := strings.Split(out, "\n")
		if len(lines) < 2 {
			f.t.Fatalf("no key matches %s", match)
		}
		u, err := redistest.Do(f.srv.Addr(), "MEMORY", "USAGE", lines[1], "SAMPLES", "0")
		if err != nil {
			f.t.Fatal(err)
		}
		n, _ := strconv.ParseInt(u, 10, 64)
		return n
	}
	return usage("tokengate:{*}"), usage("tokengate:{*}:id:*"), perKey
}

// run decides the fresh keys flood-from … flood-(to-1), charged 1 each,
// from floodWorkers goroutines, until to or the deadline, asking the real
// users again every touchEvery keys (0: never). It returns how many keys
// it wrote and the largest used_memory seen (every 50ms). A decision that
// fails fails the test: with eviction there is always room.
func (f *flood) run(from, to int64, deadline time.Time, touchEvery int64) (n, maxUsed int64) {
	var (
		next    atomic.Int64
		written atomic.Int64
		peak    atomic.Int64
		wg      sync.WaitGroup
		failed  sync.Once
	)
	next.Store(from)
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if u := f.infoQuiet("memory", "used_memory"); u > peak.Load() {
				peak.Store(u)
			}
		}
	}()
	for range floodWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= to || i%1024 == 0 && time.Now().After(deadline) {
					return
				}
				if touchEvery > 0 && i > from && i%touchEvery == 0 {
					for _, u := range f.users {
						f.decide(u, "", 1)
					}
				}
				if _, err := f.decide("flood-"+strconv.FormatInt(i, 10), "", 1); err != nil {
					failed.Do(func() { f.t.Errorf("flood key %d: %v", i, err) })
					continue
				}
				written.Add(1)
			}
		}()
	}
	wg.Wait()
	close(done)
	return written.Load(), peak.Load()
}

// info is one integer field of INFO section.
func (f *flood) info(section, field string) int64 {
	f.t.Helper()
	n, err := strconv.ParseInt(redistest.Info(f.t, f.srv.Addr(), section, field), 10, 64)
	if err != nil {
		f.t.Fatalf("INFO %s %s: %v", section, field, err)
	}
	return n
}

// infoQuiet is info for a goroutine that must not fail the test: 0 on an
// error.
func (f *flood) infoQuiet(section, field string) int64 {
	out, err := redistest.Do(f.srv.Addr(), "INFO", section)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

func (f *flood) dbsize() int64 {
	f.t.Helper()
	out, err := redistest.Do(f.srv.Addr(), "DBSIZE")
	if err != nil {
		f.t.Fatal(err)
	}
	n, _ := strconv.ParseInt(out, 10, 64)
	return n
}

// TestRedisLimitsAtStart: the built tokengate checks Redis's memory
// settings once it is connected, at start or after connecting in the
// background: a warning naming the reasons for unsafe settings, an info
// line when CONFIG is refused (as on managed Redis), and the gauges.
func TestRedisLimitsAtStart(t *testing.T) {
	const (
		warn    = "redis does not bound tokengate's keys safely: a flood of distinct keys can fill its memory or evict drained buckets (which then come back full); set maxmemory and maxmemory-policy volatile-ttl"
		unknown = "redis memory settings not checked (CONFIG GET refused or failed): make sure maxmemory is set and maxmemory-policy is volatile-ttl"
		safe    = "redis bounds tokengate's keys"
	)
	mem := []string{"--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"}
	for _, tc := range []struct {
		name, msg, level, result string
		args                     []string
		unsafe                   []string // reasons at 1
		down                     bool     // Redis down at start, up later
	}{
		{"unsafe", warn, "WARN", "unsafe", nil, []string{"no_maxmemory", "noeviction"}, false},
		{"policy", warn, "WARN", "unsafe", []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}, []string{"policy"}, false},
		{"safe", safe, "DEBUG", "safe", mem, nil, false},
		{"CONFIG refused", unknown, "INFO", "unknown", []string{"--rename-command", "CONFIG", ""}, nil, false},
		{"connected in the background", warn, "WARN", "unsafe", nil, []string{"no_maxmemory", "noeviction"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.args...)
			if tc.down {
				srv.Stop()
			}
			p := startLogged(t, "--store", "redis", "--redis-addr", srv.Addr(), "--log-level", "debug")
			if tc.down {
				p.waitFor(t, "redis unreachable at start: not ready until it answers; connecting in the background")
				srv.Restart()
			}
			line := p.waitFor(t, tc.msg)
			if line["level"] != tc.level {
				t.Errorf("logged at %v, want %s: %v", line["level"], tc.level, line)
			}
			if tc.unsafe != nil && line["reasons"] != strings.Join(tc.unsafe, ",") {
				t.Errorf("reasons %v, want %v", line["reasons"], tc.unsafe)
			}
			if !strings.Contains(line["nodes"].(string), srv.Addr()) {
				t.Errorf("nodes %v do not name %s", line["nodes"], srv.Addr())
			}
			if got := p.metric(t, `tokengate_redis_config_checks_total{result="`+tc.result+`"}`); got != "1" {
				t.Errorf("checks_total{result=%q} = %q, want 1", tc.result, got)
			}
			for _, r := range []string{"no_maxmemory", "noeviction", "policy"} {
				want := "0"
				if slices.Contains(tc.unsafe, r) {
					want = "1"
				}
				if got := p.metric(t, `tokengate_redis_config_unsafe{reason="`+r+`"}`); got != want {
					t.Errorf("config_unsafe{reason=%q} = %q, want %s", r, got, want)
				}
			}
			if got := p.metric(t, "tokengate_redis_keys"); got == "" {
				t.Error("tokengate_redis_keys not exported")
			}
			if n := p.count(warn) + p.count(unknown) + p.count(safe); n != 1 {
				t.Errorf("%d check lines, want 1", n)
			}
		})
	}
}

// logged is a tokengate process whose JSON log lines the test reads
// (tgproc.Start only relays them to t.Log).
type logged struct {
	httpAddr string
	mu       sync.Mutex
	lines    []map[string]any
	added    chan struct{} // closed and replaced at each line
}

// startLogged runs tokengate with flags until the test ends and waits
// until it serves.
func startLogged(t *testing.T, flags ...string) *logged {
	t.Helper()
	args := append([]string{"serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json"}, flags...)
	cmd := exec.Command(binary, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	p := &logged{added: make(chan struct{})}
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			p.mu.Lock()
			p.lines = append(p.lines, line)
			close(p.added)
			p.added = make(chan struct{})
			p.mu.Unlock()
		}
		cmd.Wait()
	}()
	serving := p.waitFor(t, "serving")
	p.httpAddr, _ = serving["http"].(string)
	return p
}

// waitFor returns the first line with message msg, waiting up to 20s.
func (p *logged) waitFor(t *testing.T, msg string) map[string]any {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if l["msg"] == msg {
				p.mu.Unlock()
				return l
			}
		}
		added := p.added
		p.mu.Unlock()
		select {
		case <-added:
		case <-timeout:
			t.Fatalf("tokengate did not log %q within 20s", msg)
		}
	}
}

// count is how many lines so far have message msg.
func (p *logged) count(msg string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines {
		if l["msg"] == msg {
			n++
		}
	}
	return n
}

// metric is the value of one sample line of /metrics, "" when absent.
func (p *logged) metric(t *testing.T, sample string) string {
	t.Helper()
	return tgproc.MetricAt(t, p.httpAddr, sample)
}
