package redisconn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// Bounded keys. Every distinct bucket key a client can make up is a
// Redis key until its bucket is full again and one to two
// ClockStepTolerance more (doc.go), so a flood of new keys grows Redis
// without bound unless Redis bounds it: maxmemory, and an eviction policy
// that drops the buckets that carry least. A key's TTL is its bucket's
// time until full plus between one and two tolerances (a write sets two,
// KEEPTTL keeps at least one; a bucket left alone refills as its TTL runs
// down), so volatile-ttl (shortest TTL first) evicts the buckets that are
// full soonest first: a bucket is never evicted before one that is full
// more than a tolerance sooner (up to Redis's sampling, maxmemory-samples).
//
// Every key tokengate writes has a TTL, so volatile-* and allkeys-* choose
// among tokengate's keys alike (volatile-* spares whatever else, without a
// TTL, shares the database), and the shortest TTLs are the clock key's
// (5s) and the request ids' (the replay window): under volatile-ttl those
// go first when sampled. A lost id makes a retry be charged again, never
// oversold; a lost clock key matters only to a replica that starts before
// the next replica republishes it (within a second): it anchors on the
// Redis host's TIME (clock.go).
//
// CheckLimits reads the two settings where CONFIG is allowed and says
// which of three things is true; CountKeys counts the keys.

// LimitsVerdict is what CheckLimits found out about Redis's memory bound.
type LimitsVerdict int

const (
	// LimitsUnknown: CONFIG GET was refused (managed Redis: unknown
	// command; an ACL user without +config: NOPERM) or failed on some
	// node, and no node answered unsafe settings.
	LimitsUnknown LimitsVerdict = iota
	// LimitsSafe: every node has a maxmemory and an accepted policy.
	LimitsSafe
	// LimitsUnsafe: some node has no maxmemory or a policy not accepted.
	LimitsUnsafe
)

func (v LimitsVerdict) String() string {
	switch v {
	case LimitsSafe:
		return "safe"
	case LimitsUnsafe:
		return "unsafe"
	}
	return "unknown"
}

// The reasons a node's settings are unsafe (the Redis store's label
// values of tokengate_redis_config_unsafe).
const (
	// ReasonNoMaxMemory: maxmemory 0, no bound. Redis grows with every new
	// key until the kernel kills it, and every bucket is lost with it.
	ReasonNoMaxMemory = "no_maxmemory"
	// ReasonNoEviction: at maxmemory Redis refuses every call that may
	// write (OOM), and every decision is one, so decisions fail and
	// on_store_error answers, for every client, until keys expire.
	ReasonNoEviction = "noeviction"
	// ReasonPolicy: an eviction policy that does not order buckets by
	// their time until full: *-random evicts drained buckets as readily as
	// any other, *-lru and *-lfu evict the bucket of a drained client that
	// paused before the flood's fresh keys. An evicted bucket comes back
	// full: the client gets its capacity again.
	ReasonPolicy = "policy"
)

// AllReasons are the Reason constants, in their order.
var AllReasons = [...]string{ReasonNoMaxMemory, ReasonNoEviction, ReasonPolicy}

// acceptedPolicies are the maxmemory-policy values CheckLimits calls
// safe: volatile-ttl alone, the one that evicts by time until full. A
// flood of five times what fits (test/redis TestMaxMemoryPolicies) kept
// every drained bucket of a quiet client under volatile-ttl and evicted
// every one under volatile-lru and volatile-lfu; with 1M keys into 64 MiB,
// volatile-lru evicted them even when their clients came back at each
// quarter of the flood.
var acceptedPolicies = []string{"volatile-ttl"}

// NodeLimits is one node's answer.
type NodeLimits struct {
	Addr      string
	MaxMemory int64  // bytes; 0: unbounded
	Policy    string // maxmemory-policy
	Samples   int    // maxmemory-samples (0 when not reported)
	// Unsafe lists the node's reasons (Reason*), empty when it is safe.
	Unsafe []string
	// Err is why nothing is known about the node: CONFIG GET refused
	// (Refused) or failed.
	Err     error
	Refused bool
}

func (n NodeLimits) String() string {
	if n.Err != nil {
		return n.Addr + ": " + n.Err.Error()
	}
	s := fmt.Sprintf("%s: maxmemory %d, maxmemory-policy %s", n.Addr, n.MaxMemory, n.Policy)
	if len(n.Unsafe) > 0 {
		s += " (" + strings.Join(n.Unsafe, ", ") + ")"
	}
	return s
}

// Limits is what CheckLimits found, node by node.
type Limits struct {
	Verdict LimitsVerdict
	Nodes   []NodeLimits // by address
}

// Reasons are the reasons of every unsafe node, each once, in the order
// of the Reason constants.
func (l Limits) Reasons() []string {
	var out []string
	for _, r := range AllReasons {
		for _, n := range l.Nodes {
			if slices.Contains(n.Unsafe, r) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

func (l Limits) String() string {
	parts := make([]string, len(l.Nodes))
	for i, n := range l.Nodes {
		parts[i] = n.String()
	}
	return strings.Join(parts, "; ")
}

// CheckLimits reads maxmemory and maxmemory-policy (CONFIG GET) on every
// node c knows (a Cluster's replicas too: each may become a master) and
// says whether they bound tokengate's keys safely. Each node is asked at
// once, within timeout. It is safe for concurrent use, and meant for once
// at start.
func CheckLimits(ctx context.Context, c rueidis.Client, timeout time.Duration) Limits {
	nodes := c.Nodes()
	out := Limits{Nodes: make([]NodeLimits, 0, len(nodes))}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for addr, node := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			n := nodeLimits(cctx, addr, node)
			mu.Lock()
			out.Nodes = append(out.Nodes, n)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.SortFunc(out.Nodes, func(a, b NodeLimits) int { return strings.Compare(a.Addr, b.Addr) })
	out.Verdict = verdict(out.Nodes)
	return out
}

// verdict: unsafe when any node is, else unknown when any node is (or
// there are none), else safe.
func verdict(nodes []NodeLimits) LimitsVerdict {
	v := LimitsSafe
	if len(nodes) == 0 {
		v = LimitsUnknown
	}
	for _, n := range nodes {
		switch {
		case len(n.Unsafe) > 0:
			return LimitsUnsafe
		case n.Err != nil:
			v = LimitsUnknown
		}
	}
	return v
}

// nodeLimits asks one node. CONFIG GET with a glob is one call on every
// Redis version (several patterns need 7.0).
func nodeLimits(ctx context.Context, addr string, c rueidis.Client) NodeLimits {
	n := NodeLimits{Addr: addr}
	m, err := c.Do(ctx, c.B().ConfigGet().Parameter("maxmemory*").Build()).AsStrMap()
	if err != nil {
		_, n.Refused = rueidis.IsRedisErr(err)
		n.Err = fmt.Errorf("CONFIG GET maxmemory*: %w", err)
		return n
	}
	mem, ok := m["maxmemory"]
	policy, pok := m["maxmemory-policy"]
	if !ok || !pok {
		n.Err = errors.New("CONFIG GET maxmemory* did not answer maxmemory and maxmemory-policy")
		return n
	}
	if n.MaxMemory, err = strconv.ParseInt(mem, 10, 64); err != nil {
		n.Err = fmt.Errorf("CONFIG GET maxmemory: %q is not a number of bytes", mem)
		return n
	}
	n.Policy = policy
	n.Samples, _ = strconv.Atoi(m["maxmemory-samples"])
	n.Unsafe = unsafeReasons(n.MaxMemory, n.Policy)
	return n
}

// unsafeReasons judges one node's settings.
func unsafeReasons(maxMemory int64, policy string) []string {
	var r []string
	if maxMemory <= 0 {
		r = append(r, ReasonNoMaxMemory)
	}
	switch {
	case policy == "noeviction":
		r = append(r, ReasonNoEviction)
	case !slices.Contains(acceptedPolicies, policy):
		r = append(r, ReasonPolicy)
	}
	return r
}

// CountKeys returns the keys of the database c talks to (DBSIZE, O(1);
// summed over a Cluster's masters, each found by CLUSTER NODES, so that
// replicas' copies do not count twice). That is every bucket that is not
// full or has been full for less than its key's tolerance, every request
// id within its replay window, the clock key, and whatever else shares
// the database: the number maxmemory has to hold. It is safe for
// concurrent use.
func CountKeys(ctx context.Context, c rueidis.Client) (int64, error) {
	if c.Mode() != rueidis.ClientModeCluster {
		n, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
		if err != nil {
			return 0, fmt.Errorf("redis: DBSIZE: %w", err)
		}
		return n, nil
	}
	var n int64
	for addr, node := range c.Nodes() {
		res := node.DoMulti(ctx, node.B().ClusterNodes().Build(), node.B().Dbsize().Build())
		nodes, err := res[0].ToString()
		if err != nil {
			return 0, fmt.Errorf("redis: %s: CLUSTER NODES: %w", addr, err)
		}
		if !isMaster(nodes) {
			continue
		}
		k, err := res[1].AsInt64()
		if err != nil {
			return 0, fmt.Errorf("redis: %s: DBSIZE: %w", addr, err)
		}
		n += k
	}
	return n, nil
}

// isMaster reports whether the CLUSTER NODES reply's own line ("myself"
// among its flags, the third field) says master.
func isMaster(clusterNodes string) bool {
	for _, line := range strings.Split(clusterNodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		flags := strings.Split(f[2], ",")
		if slices.Contains(flags, "myself") {
			return slices.Contains(flags, "master")
		}
	}
	return false
}
