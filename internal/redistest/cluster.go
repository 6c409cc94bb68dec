package redistest

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tokengate/tokengate/internal/poll"
)

// Cluster is a Redis Cluster of three masters and no replicas.
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
	bin := Binary(t)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli not found in PATH: install redis-server (it ships redis-cli)")
	}
	c := &Cluster{}
	for range 3 {
		s := &Server{t: t, dir: t.TempDir()}
		s.args = []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir,
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}
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
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
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
		}
		return nil
	}, "redistest: cluster_state:ok on every node")
	return c
}
