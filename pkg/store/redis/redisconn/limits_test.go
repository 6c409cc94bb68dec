package redisconn

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/redistest"
)

// TestCheckLimits: a real server started with each setting gets the
// verdict and reasons below; a server that refuses CONFIG (renamed away,
// as managed Redis does, or an ACL user without it) is unknown, not
// unsafe.
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
			l := CheckLimits(context.Background(), c, time.Second)
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
		})
	}
}

// TestCheckLimitsCluster: every node of a Cluster is asked; one node left
// unbounded makes the whole unsafe, and names that node.
func TestCheckLimitsCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := dialT(t, Config{Addr: strings.Join(cl.Addrs(), ","), Cluster: true})
	if l := CheckLimits(context.Background(), c, time.Second); l.Verdict != LimitsUnsafe || len(l.Nodes) != 3 {
		t.Fatalf("defaults: %v: %s", l.Verdict, l)
	}
	for _, n := range cl.Nodes[:2] {
		for _, kv := range [][2]string{{"maxmemory", "64mb"}, {"maxmemory-policy", "volatile-ttl"}} {
			if _, err := redistest.Do(n.Addr(), "CONFIG", "SET", kv[0], kv[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	l := CheckLimits(context.Background(), c, time.Second)
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
	if l := CheckLimits(context.Background(), c, time.Second); l.Verdict != LimitsSafe {
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

// TestCountKeysMaster: a node counts only when CLUSTER NODES says it is
// a master itself.
func TestCountKeysMaster(t *testing.T) {
	const (
		master  = "07c3 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460\n1a2b 127.0.0.1:30002@40002 slave 07c3 0 1 1 connected\n"
		replica = "07c3 127.0.0.1:30001@40001 master - 0 0 1 connected 0-5460\n1a2b 127.0.0.1:30002@40002 myself,slave 07c3 0 1 1 connected\n"
	)
	if !isMaster(master) || isMaster(replica) || isMaster("") {
		t.Fatal("isMaster misreads CLUSTER NODES")
	}
}
