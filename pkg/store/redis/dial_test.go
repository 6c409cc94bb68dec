package redis

import (
	"context"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/internal/redistest"
	"github.com/tokengate/tokengate/pkg/store"
	"github.com/tokengate/tokengate/pkg/store/storetest"
)

// decideThrough dials cfg, decides one request of cost 3 on a new bucket of 10
// twice and checks the answers.
func decideThrough(t *testing.T, key string, cfg Config) {
	t.Helper()
	c, err := Dial(cfg)
	if err != nil {
		t.Fatalf("dial %+v: %v", cfg, err)
	}
	t.Cleanup(c.Close)
	s := newStore(t, c, Options{})
	res := make([]store.Result, 1)
	item := store.Item{Key: key, Version: storetest.Version(t, 1, 10, "1/h"), Cost: 3}
	for want := int64(7); want >= 4; want -= 3 {
		out, err := s.Decide(context.Background(), &store.Request{Items: []store.Item{item}}, res)
		if err != nil || !out.Allowed || res[0].Remaining != want {
			t.Fatalf("decision through %+v: %+v %+v %v, want %d left", cfg, out, res[0], err, want)
		}
	}
}

// TestDialSentinel: with a Sentinel address and a master set name, the
// store finds the master through the Sentinel and decides there.
func TestDialSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, "tokengate-master", master)
	decideThrough(t, "via-sentinel", Config{Addr: sentinel.Addr(), SentinelMaster: "tokengate-master"})
	if n, err := redistest.Do(master.Addr(), "DBSIZE"); err != nil || n == "0" {
		t.Fatalf("the master holds %s keys (%v): the decision did not reach it", n, err)
	}
}

// TestDialTLS: rediss:// with the CA file of a private CA reaches a
// TLS-only port; without the CA the certificate is refused.
func TestDialTLS(t *testing.T) {
	srv := redistest.StartTLS(t)
	decideThrough(t, "via-url", Config{URL: "rediss://" + srv.TLSAddr(), CAFile: srv.CAFile})
	decideThrough(t, "via-addr", Config{Addr: srv.TLSAddr(), CAFile: srv.CAFile})
	c, err := Dial(Config{URL: "rediss://" + srv.TLSAddr()})
	if err == nil {
		c.Close()
		t.Fatal("a certificate of an unknown CA was accepted")
	}
	if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("refusal does not name the certificate: %v", err)
	}
	if _, err := Dial(Config{Addr: srv.TLSAddr(), CAFile: t.TempDir() + "/missing.pem"}); err == nil {
		t.Fatal("a missing CA file was accepted")
	}
}
