package redistest

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokengate/tokengate/internal/poll"
)

// Cluster is a Redis Cluster of three masters, with or without a replica
// each.
type Cluster struct {
	Nodes []*Server
}

// Addrs are the nodes' host:port addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// StartCluster starts three cluster-enabled nodes and joins them with
// `redis-cli --cluster create`, then waits until every node reports
// cluster_state:ok. Everything stops when the test ends.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return startCluster(t, 0)
}

// StartClusterWithReplicas is StartCluster with a replica of each master
// (six nodes), and waits until every replica is in sync. A node is taken
// for failed after 2s (cluster-node-timeout): a master killed is replaced
// by its replica a few seconds later. The other masters serve their slots
// meanwhile (cluster-require-full-coverage no; with the default, yes,
// every node refuses every command from the failure's detection to the
// replica's promotion).
func StartClusterWithReplicas(t testing.TB) *Cluster {
	t.Helper()
	return startCluster(t, 1)
}

// startCluster starts a cluster of three masters with replicas replicas
// each.
func startCluster(t testing.TB, replicas int) *Cluster {
	t.Helper()
	bin := Binary(t)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli not found in PATH: install redis-server (it ships redis-cli)")
	}
	c := &Cluster{}
	for range 3 * (1 + replicas) {
		s := &Server{t: t, dir: t.TempDir()}
		s.args = []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir,
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
			"--cluster-require-full-coverage", map[bool]string{true: "no", false: "yes"}[replicas > 0]}
		var err error
		for try := 0; try < 5; try++ {
			s.Port = freePort(t, true)
			if err = s.start(bin); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("redistest: cluster node: %v", err)
		}
		t.Cleanup(s.Stop)
		c.Nodes = append(c.Nodes, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	poll.Eventually(t, 20*time.Second, func() error {
		for _, n := range c.Nodes {
			out, err := Do(n.Addr(), "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			if !strings.Contains(out, "cluster_state:ok") {
				return fmt.Errorf("node %s: %s", n.Addr(), out)
			}
			repl, err := Do(n.Addr(), "INFO", "replication")
			if err != nil {
				return err
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("replica %s not in sync: %s", n.Addr(), repl)
			}
		}
		return nil
	}, "redistest: cluster_state:ok on every node, every replica in sync")
	return c
}

// Owner is the master that serves key now: the node that answers a GET
// of it without a redirection.
func (c *Cluster) Owner(t testing.TB, key string) *Server {
	t.Helper()
	for _, n := range c.Nodes {
		if !n.running() {
			continue
		}
		if _, err := Do(n.Addr(), "GET", key); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
			if role, _ := Do(n.Addr(), "INFO", "replication"); strings.Contains(role, "role:master") {
				return n
			}
		}
	}
	t.Fatalf("redistest: no master serves %q", key)
	return nil
}
