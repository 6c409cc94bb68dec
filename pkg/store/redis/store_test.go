package redis

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// testTimeout is generous: tests run with -race on a small shared machine.
const testTimeout = 2 * time.Second

func newClient(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("redis client for %v: %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

// tag is a bucket key's hash tag, as the store writes it.
func tag(key string) string {
	t := tagBytes(key)
	return hex.EncodeToString(t[:])
}

func newStore(t testing.TB, c rueidis.Client, opts Options) *Store {
	t.Helper()
	opts.Client = c
	if opts.Timeout == 0 {
		opts.Timeout = testTimeout
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	n := 0
	storetest.Run(t, func(t *testing.T) store.Store {
		n++
		// A fresh prefix per store: each starts empty.
		return newStore(t, c, Options{RequestTime: true, KeyPrefix: "t" + time.Now().Format("150405.000000000") + ":"})
	})
}

func TestConformanceCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := newClient(t, cl.Addrs()...)
	if c.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("client mode %s, want cluster", c.Mode())
	}
	storetest.Run(t, func(t *testing.T) store.Store {
		return newStore(t, c, Options{RequestTime: true, KeyPrefix: "t" + time.Now().Format("150405.000000000") + ":"})
	})
}
