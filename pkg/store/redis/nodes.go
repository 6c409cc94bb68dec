package redis

// Cluster nodes: each master node has its batcher, so that the calls of
// concurrent requests whose buckets live on one node share a call, as on
// a single Redis (batch.go), and its circuit breaker (guards.go), so that
// a failed master fails the requests of its buckets only.
//
// The store keeps which node serves each hash slot, as it last read it
// (CLUSTER SLOTS): it is read when the store is prepared (or on the first
// call, which goes alone meanwhile) and again, at most every
// topologyEvery, after a call failed. It only groups calls: a batch is
// sent with one of its keys as its routing key, so the client delivers
// it to the node that serves that key's slot (following MOVED and ASK),
// and the script reads every key of the batch before it writes any
// (lua/batch.lua). A batch built on a stale map (a slot moved by
// resharding or failover) therefore fails whole, with nothing written,
// as a store error; the map is read again, and later batches group by
// the new one. A slot the map does not know is sent alone, under the
// store's own breaker. A node's open circuit also has the map read again,
// so that once a replica took over the failed master's slots, they are
// the replica's, behind its closed circuit.

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/pkg/store/redis/internal/breaker"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// topologyEvery is the least time between two readings of the topology.
const topologyEvery = 100 * time.Millisecond

// node is a master node's batcher (nil when batching is off) and breaker,
// and its address as the topology first named it. A node is not changed
// once made.
type node struct {
	batch   *batcher
	breaker *breaker.Breaker
	addr    string
}

// nodeMap is one reading of the topology: each slot's node.
type nodeMap struct {
	of [clusterSlots]*node // nil: no node known
}

// clusterNodes are a Cluster store's nodes.
type clusterNodes struct {
	s       *Store
	o       BatchOptions
	m       atomic.Pointer[nodeMap]
	reading atomic.Bool
	next    atomic.Int64 // the earliest start of the next reading, on s.opts.Clock
	mu      sync.Mutex   // one reading at a time: byID
	byID    map[string]*node
}

func newClusterNodes(s *Store, o BatchOptions) *clusterNodes {
	return &clusterNodes{s: s, o: o, byID: map[string]*node{}}
}

// of is the node serving slot sl, nil when none is known (the map is then
// read, in the background).
func (n *clusterNodes) of(sl uint16) *node {
	if m := n.m.Load(); m != nil && m.of[sl] != nil {
		return m.of[sl]
	}
	n.stale()
	return nil
}

// each calls f with every node of the latest reading.
func (n *clusterNodes) each(f func(*node)) {
	n.mu.Lock()
	nodes := make([]*node, 0, len(n.byID))
	for _, nd := range n.byID {
		nodes = append(nodes, nd)
	}
	n.mu.Unlock()
	for _, nd := range nodes {
		f(nd)
	}
}

// stale reads the topology again, in the background, unless a reading is
// under way or began within topologyEvery.
func (n *clusterNodes) stale() {
	now := n.s.opts.Clock.Now()
	if now < n.next.Load() || !n.reading.CompareAndSwap(false, true) {
		return
	}
	n.next.Store(now + int64(topologyEvery))
	go func() {
		defer n.reading.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = n.read(ctx) // a failure leaves the map as it was; the next failed call tries again
	}()
}

// read reads the topology (CLUSTER SLOTS) and replaces the map. A node
// keeps its batcher and breaker across readings (by node ID); a node no
// longer serving a slot is dropped, its calls in flight left to return.
func (n *clusterNodes) read(ctx context.Context) error {
	c := n.s.client
	ranges, err := c.Do(ctx, c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return fmt.Errorf("redis: read the cluster's slots: %w", err)
	}
	type slots struct {
		lo, hi   int64
		id, addr string
	}
	rs := make([]slots, len(ranges))
	masters := map[string]bool{}
	for i, r := range ranges {
		lo, hi, id, addr, err := slotRange(r.ToArray())
		if err != nil {
			return fmt.Errorf("redis: read the cluster's slots: %w", err)
		}
		rs[i], masters[id] = slots{lo, hi, id, addr}, true
	}
	o := n.o
	o.MaxInFlight = perMaster(n.o.MaxInFlight, len(masters))
	clients := n.s.client.Nodes()
	n.mu.Lock()
	defer n.mu.Unlock()
	m := &nodeMap{}
	byID := make(map[string]*node, len(n.byID))
	for _, r := range rs {
		nd := byID[r.id]
		if nd == nil {
			if nd = n.byID[r.id]; nd == nil {
				nd = &node{batch: newBatcher(n.s, o), breaker: n.s.newBreaker(r.id), addr: r.addr}
				if nd.batch != nil {
					nd.batch.client = clients[r.addr]
				}
			}
			byID[r.id] = nd
		}
		for sl := r.lo; sl <= r.hi; sl++ {
			m.of[sl] = nd
		}
	}
	n.byID = byID
	n.m.Store(m)
	return nil
}

// perMaster shares calls in flight (nil: the default, 2; 0: batching
// off) out among masters, at least one each: a call costs Redis a fixed
// part whatever its batch's size (its arguments, the batch's tables, its
// reply: about three one-bucket requests' worth, replayed), so a replica
// keeps as few calls out as it can without leaving a master unused. On
// three masters the default is one call each (measured: about 10% less
// Redis CPU a request than two each, at more requests a second;
// BENCHMARKS.md).
func perMaster(inFlight *int, masters int) *int {
	total := 2
	if inFlight != nil {
		total = *inFlight
	}
	if total == 0 {
		return new(0)
	}
	return new(max(1, total/max(masters, 1)))
}

// slotRange reads one range of a CLUSTER SLOTS reply: its first and last
// slot and the ID and host:port of its master.
func slotRange(r []rueidis.RedisMessage, err error) (lo, hi int64, id, addr string, _ error) {
	if err != nil {
		return 0, 0, "", "", err
	}
	if len(r) < 3 {
		return 0, 0, "", "", fmt.Errorf("a slot range of %d fields", len(r))
	}
	lo, err = r[0].AsInt64()
	if err == nil {
		hi, err = r[1].AsInt64()
	}
	var node []rueidis.RedisMessage
	if err == nil {
		node, err = r[2].ToArray()
	}
	if err == nil && len(node) < 3 {
		err = fmt.Errorf("a node of %d fields", len(node))
	}
	var host string
	var port int64
	if err == nil {
		host, err = node[0].ToString()
	}
	if err == nil {
		port, err = node[1].AsInt64()
	}
	if err == nil {
		id, err = node[2].ToString()
	}
	if err == nil && (lo < 0 || hi >= clusterSlots || lo > hi) {
		err = fmt.Errorf("slots %d-%d", lo, hi)
	}
	return lo, hi, id, net.JoinHostPort(host, strconv.FormatInt(port, 10)), err
}

// reachable lets each node that answers a ping probe at once (its
// breaker's Reachable), when a ping of every node the client knows
// failed: one master down keeps no other's circuit open.
func (n *clusterNodes) reachable(ctx context.Context) {
	// The failed ping may have spent ctx's time.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(n.s.opts.Timeout, 250*time.Millisecond))
	defer cancel()
	clients := n.s.client.Nodes()
	n.each(func(nd *node) {
		if c := clients[nd.addr]; c != nil && c.Do(ctx, c.B().Ping().Build()).Error() == nil {
			nd.breaker.Reachable()
		}
	})
}
