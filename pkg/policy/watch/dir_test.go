package watch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/internal/poll"
	"github.com/tokengate/tokengate/pkg/policy"
)

// refFile is an envoyproxy/ratelimit file of one domain whose key k allows
// rpu a minute.
func refFile(domain string, rpu int) []byte {
	return fmt.Appendf(nil, "domain: %s\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", domain, rpu)
}

func limitOf(p *policy.Policy, domain string) uint32 {
	r := p.Match(domain, []policy.Entry{{Key: "k", Value: "v"}})
	if r == nil {
		return 0
	}
	return r.Limit.RequestsPerUnit
}

// A directory of reference files: a change to any file reloads the set;
// a bad file (here a second file for a domain) keeps the last good set.
func TestDirectoryOfFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), refFile("alpha", 1))
	write(t, filepath.Join(dir, "b.yaml"), refFile("beta", 2))
	write(t, filepath.Join(dir, "notes.txt"), []byte("not a policy"))
	f := start(t, dir, -1)
	if p := f.w.Current(); strings.Join(p.Domains(), ",") != "alpha,beta" || limitOf(p, "beta") != 2 {
		t.Fatalf("first load: %v", p.Summary())
	}

	write(t, filepath.Join(dir, "b.yaml"), refFile("beta", 3))
	poll.Eventually(t, waitLimit, func() bool { return limitOf(f.w.Current(), "beta") == 3 }, "beta at 3")
	write(t, filepath.Join(dir, "c.yaml"), refFile("gamma", 4))
	poll.Eventually(t, waitLimit, func() bool { return limitOf(f.w.Current(), "gamma") == 4 }, "gamma")
	good := f.w.Current()

	write(t, filepath.Join(dir, "d.yaml"), refFile("alpha", 5))
	f.waitFailure(t, filepath.Join(dir, "d.yaml")+`:1: domain "alpha": repeated domain: also in `+filepath.Join(dir, "a.yaml")+":1")
	write(t, filepath.Join(dir, "e.yaml"), []byte("domain: eps\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"))
	f.waitFailure(t, filepath.Join(dir, "e.yaml")+`:4: domain "eps": rate_limit: k: invalid rate limit unit`)
	if f.w.Current() != good {
		t.Fatal("a bad file replaced the policy")
	}

	os.Remove(filepath.Join(dir, "d.yaml"))
	write(t, filepath.Join(dir, "e.yaml"), refFile("eps", 6))
	poll.Eventually(t, waitLimit, func() bool { return limitOf(f.w.Current(), "eps") == 6 }, "eps")
	if limitOf(f.w.Current(), "alpha") != 1 {
		t.Fatal("alpha changed")
	}
}

// A ConfigMap mounted as a directory: every file is a symlink into
// ..data, and an update swaps ..data.
func TestDirectoryConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	publish := func(rev int) {
		ts := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", rev, rev)
		if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, ts, "a.yaml"), refFile("alpha", rev))
		write(t, filepath.Join(dir, ts, "b.yaml"), refFile("beta", 10*rev))
		swapData(t, dir, ts)
	}
	publish(1)
	for _, name := range []string{"a.yaml", "b.yaml"} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	f := start(t, dir, -1)
	for rev := 2; rev <= 3; rev++ {
		publish(rev)
		poll.Eventually(t, waitLimit, func() bool {
			p := f.w.Current()
			return limitOf(p, "alpha") == uint32(rev) && limitOf(p, "beta") == uint32(10*rev)
		}, fmt.Sprintf("revision %d", rev))
	}
}
