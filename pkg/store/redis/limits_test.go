package redis

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// TestCheckLimits: a real server started with each setting gets the
// verdict and reasons below, and the gauges say the same; a server that
// refuses CONFIG (renamed away, as managed Redis does, or an ACL user
// without it) is unknown, not unsafe.
func TestCheckLimits(t *testing.T) {
	mem := func(policy string) []string { return []string{"--maxmemory", "64mb", "--maxmemory-policy", policy} }
	for _, tc := range []struct {
		name    string
		args    []string
		user    bool // connect as an ACL user without +config
		verdict LimitsVerdict
		reasons []string
		refused string // the refusal's text, for unknown
	}{
		{"defaults", nil, false, LimitsUnsafe, []string{ReasonNoMaxMemory, ReasonNoEviction}, ""},
		{"volatile-ttl", mem("volatile-ttl"), false, LimitsSafe, nil, ""},
		{"no maxmemory", []string{"--maxmemory-policy", "volatile-ttl"}, false, LimitsUnsafe, []string{ReasonNoMaxMemory}, ""},
		{"noeviction", mem("noeviction"), false, LimitsUnsafe, []string{ReasonNoEviction}, ""},
		{"volatile-lru", mem("volatile-lru"), false, LimitsUnsafe, []string{ReasonPolicy}, ""},
		{"volatile-lfu", mem("volatile-lfu"), false, LimitsUnsafe, []string{ReasonPolicy}, ""},
		{"volatile-random", mem("volatile-random"), false, LimitsUnsafe, []string{ReasonPolicy}, ""},
		{"allkeys-lru", mem("allkeys-lru"), false, LimitsUnsafe, []string{ReasonPolicy}, ""},
		{"allkeys-random", mem("allkeys-random"), false, LimitsUnsafe, []string{ReasonPolicy}, ""},
		{"CONFIG renamed away", append(mem("noeviction"), "--rename-command", "CONFIG", ""), false, LimitsUnknown, nil, "unknown command"},
		{"ACL user without config", mem("noeviction"), true, LimitsUnknown, nil, "NOPERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.args...)
			opt := rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true}
			if tc.user {
				if _, err := redistest.Do(srv.Addr(), "ACL", "SETUSER", "tokengate", "on", ">pw", "~*", "&*", "+@all", "-config"); err != nil {
					t.Fatal(err)
				}
				opt.Username, opt.Password = "tokengate", "pw"
			}
			c, err := rueidis.NewClient(opt)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			s := newStore(t, c, Options{Registerer: prometheus.NewRegistry()})
			l := s.CheckLimits(context.Background())
			if l.Verdict != tc.verdict || !slices.Equal(l.Reasons(), tc.reasons) || len(l.Nodes) != 1 {
				t.Fatalf("got %v %v (%s), want %v %v", l.Verdict, l.Reasons(), l, tc.verdict, tc.reasons)
			}
			n := l.Nodes[0]
			if n.Addr != srv.Addr() {
				t.Errorf("node %q, want %q", n.Addr, srv.Addr())
			}
			switch {
			case tc.refused != "":
				if !n.Refused || n.Err == nil || !strings.Contains(n.Err.Error(), tc.refused) {
					t.Errorf("refusal: %v (refused %v), want %q", n.Err, n.Refused, tc.refused)
				}
			case n.Err != nil || n.Samples != 5 || n.Policy == "":
				t.Errorf("node %+v", n)
			case tc.args != nil && slices.Contains(tc.args, "64mb") && n.MaxMemory != 64<<20:
				t.Errorf("maxmemory %d, want %d", n.MaxMemory, 64<<20)
			}
			for _, r := range limitsReasons {
				want := 0.0
				if slices.Contains(tc.reasons, r) {
					want = 1
				}
				if got := testutil.ToFloat64(s.metrics.configUnsafe.WithLabelValues(r)); got != want {
					t.Errorf("tokengate_redis_config_unsafe{reason=%q} = %v, want %v", r, got, want)
				}
			}
			if got := testutil.ToFloat64(s.metrics.configChecks.WithLabelValues(tc.verdict.String())); got != 1 {
				t.Errorf("tokengate_redis_config_checks_total{result=%q} = %v, want 1", tc.verdict, got)
			}
		})
	}
}

// TestCheckLimitsCluster: every node of a Cluster is asked; one node left
// unbounded makes the whole unsafe, and names that node.
func TestCheckLimitsCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	s := newStore(t, newClient(t, cl.Addrs()...), Options{})
	if l := s.CheckLimits(context.Background()); l.Verdict != LimitsUnsafe || len(l.Nodes) != 3 {
		t.Fatalf("defaults: %v: %s", l.Verdict, l)
	}
	for _, n := range cl.Nodes[:2] {
		for _, kv := range [][2]string{{"maxmemory", "64mb"}, {"maxmemory-policy", "volatile-ttl"}} {
			if _, err := redistest.Do(n.Addr(), "CONFIG", "SET", kv[0], kv[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	l := s.CheckLimits(context.Background())
	var unsafe []string
	for _, n := range l.Nodes {
		if len(n.Unsafe) > 0 {
			unsafe = append(unsafe, n.Addr)
		}
	}
	if l.Verdict != LimitsUnsafe || !slices.Equal(unsafe, []string{cl.Nodes[2].Addr()}) {
		t.Fatalf("two of three set: %v, unsafe nodes %v: %s", l.Verdict, unsafe, l)
	}
	for _, kv := range [][2]string{{"maxmemory", "64mb"}, {"maxmemory-policy", "volatile-ttl"}} {
		if _, err := redistest.Do(cl.Nodes[2].Addr(), "CONFIG", "SET", kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	if l := s.CheckLimits(context.Background()); l.Verdict != LimitsSafe {
		t.Fatalf("all set: %v: %s", l.Verdict, l)
	}
}

// TestLimitsVerdict: unsafe beats unknown beats safe, and no node at all
// is unknown.
func TestLimitsVerdict(t *testing.T) {
	safe := NodeLimits{Addr: "a", MaxMemory: 1, Policy: "volatile-ttl"}
	unsafe := NodeLimits{Addr: "b", Unsafe: []string{ReasonPolicy}}
	unknown := NodeLimits{Addr: "c", Err: context.DeadlineExceeded}
	for _, tc := range []struct {
		nodes []NodeLimits
		want  LimitsVerdict
	}{
		{nil, LimitsUnknown},
		{[]NodeLimits{safe}, LimitsSafe},
		{[]NodeLimits{safe, unknown}, LimitsUnknown},
		{[]NodeLimits{unknown, unsafe, safe}, LimitsUnsafe},
	} {
		if got := verdict(tc.nodes); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.nodes, got, tc.want)
		}
	}
}

// TestSampleKeys: the gauge is the database's keys: every bucket written,
// and the clock key.
func TestSampleKeys(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Options{Registerer: prometheus.NewRegistry()})
	writeBuckets(t, s, 50)
	n, err := s.SampleKeys(context.Background())
	if err != nil || n != 51 {
		t.Fatalf("SampleKeys: %d %v, want 50 buckets and the clock key", n, err)
	}
	if got := testutil.ToFloat64(s.metrics.keys); got != 51 {
		t.Fatalf("tokengate_redis_keys = %v, want 51", got)
	}
}

// TestSampleKeysCluster: summed over the masters.
func TestSampleKeysCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	s := newStore(t, newClient(t, cl.Addrs()...), Options{})
	writeBuckets(t, s, 50)
	if n, err := s.SampleKeys(context.Background()); err != nil || n != 51 {
		t.Fatalf("SampleKeys: %d %v, want 50 buckets and the clock key", n, err)
	}
}

// TestSampleKeysMaster: a node counts only when CLUSTER NODES says it is
// a master itself.
func TestSampleKeysMaster(t *testing.T) {
	const (
		master  = "07c3 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460\n1a2b 127.0.0.1:30002@40002 slave 07c3 0 1 1 connected\n"
		replica = "07c3 127.0.0.1:30001@40001 master - 0 0 1 connected 0-5460\n1a2b 127.0.0.1:30002@40002 myself,slave 07c3 0 1 1 connected\n"
	)
	if !isMaster(master) || isMaster(replica) || isMaster("") {
		t.Fatal("isMaster misreads CLUSTER NODES")
	}
}

// writeBuckets drains n distinct buckets of a slow rule, so none is full.
func writeBuckets(t *testing.T, s *Store, n int) {
	t.Helper()
	v := storetest.Version(t, 1, 10, "1/h")
	for i := range n {
		res := make([]store.Result, 1)
		item := store.Item{Key: "k" + strconv.Itoa(i), Version: v, Cost: 10, Revision: 1}
		if _, err := s.Decide(context.Background(), &store.Request{Now: s.opts.Clock.Now(), Items: []store.Item{item}}, res); err != nil || !res[0].Allowed {
			t.Fatalf("bucket %d: %+v %v", i, res[0], err)
		}
	}
}
