package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/tokengate/tokengate/pkg/bucket"
	"github.com/tokengate/tokengate/pkg/clock"
)

const sec = int64(time.Second)

// onePolicy is a file with one limited rule, edge/r, plus a fixed rule.
func onePolicy(capacity int64, refill, onResize string) []byte {
	return fmt.Appendf(nil, `domains:
  edge:
    - name: r
      match: [{key: user_id}]
      capacity: %d
      refill: %s
      on_resize: %s
    - name: fixed
      match: [{key: path}]
      capacity: 5
      refill: 1/s
`, capacity, refill, onResize)
}

// reloader is a service's view of reloads: one Compiler, the policy now
// serving, and a fake clock.
type reloader struct {
	t     *testing.T
	c     Compiler
	clock clock.Fake
	cur   *Policy
}

func (l *reloader) load(data []byte) error {
	p, err := l.c.Compile("policy.yaml", data, l.cur, l.clock.Now())
	if err != nil {
		return err
	}
	p.Activate()
	l.cur = p
	return nil
}

func (l *reloader) mustLoad(data []byte) {
	l.t.Helper()
	if err := l.load(data); err != nil {
		l.t.Fatal(err)
	}
}

// bucketOf is one bucket as a store keeps it: a state and the version it
// was last refilled under.
type bucketOf struct {
	s   bucket.State
	ver *bucket.Version
}

// decide is what a store does for one bucket of a request that matched r.
func (b *bucketOf) decide(r *Rule, now, cost int64) bucket.Result {
	v := r.Version
	if b.ver == nil {
		b.s = v.Params.Full(now)
	} else {
		b.s = v.Bring(b.s, b.ver)
	}
	b.ver = v
	var res bucket.Result
	b.s, res = v.Params.Decide(b.s, now, cost)
	return res
}

func TestCompileKeepsUnchangedVersions(t *testing.T) {
	l := &reloader{t: t}
	l.mustLoad(onePolicy(100, "10/s", "clamp"))
	v1, fixed := l.cur.Rule("edge", "r").Version, l.cur.Rule("edge", "fixed").Version
	if v1.Lineage().Current() != v1 || fixed.ID == v1.ID {
		t.Fatalf("first load: current %v, ids %d %d", v1.Lineage().Current(), v1.ID, fixed.ID)
	}

	// The same parameters written differently are the same version.
	l.clock.Set(sec)
	l.mustLoad(onePolicy(100, "600/m", "clamp"))
	if got := l.cur.Rule("edge", "r").Version; got != v1 {
		t.Fatalf("unchanged rule got a new version %+v", got)
	}

	for _, c := range []struct {
		name string
		data []byte
	}{
		{"capacity", onePolicy(50, "10/s", "clamp")},
		{"refill", onePolicy(50, "1/s", "clamp")},
		{"on_resize", onePolicy(50, "1/s", "scale")},
	} {
		prev := l.cur.Rule("edge", "r").Version
		l.clock.Add(time.Second)
		l.mustLoad(c.data)
		v := l.cur.Rule("edge", "r").Version
		if v == prev || v.ID <= prev.ID || v.Lineage() != v1.Lineage() || v.ActiveAt != l.clock.Now() {
			t.Fatalf("%s change: version %+v after %+v", c.name, v, prev)
		}
		if v.Lineage().Current() != v {
			t.Fatalf("%s change: not published", c.name)
		}
		if got := l.cur.Rule("edge", "fixed").Version; got != fixed {
			t.Fatalf("%s change: the untouched rule got a new version", c.name)
		}
	}
	if v := l.cur.Rule("edge", "r").Version; v.OnResize != bucket.Scale {
		t.Fatalf("on_resize not carried into the version: %+v", v)
	}
}

func TestCompileRemovesAndRestarts(t *testing.T) {
	l := &reloader{t: t}
	l.mustLoad(onePolicy(10, "1/s", "clamp"))
	old := l.cur.Rule("edge", "r").Version.Lineage()

	// r becomes unlimited: its lineage goes, but only once activated.
	unlimited := []byte("domains:\n  edge:\n    - name: r\n      match: [{key: user_id}]\n      unlimited: true\n")
	p, err := l.c.Compile("policy.yaml", unlimited, l.cur, 0)
	if err != nil {
		t.Fatal(err)
	}
	if old.Removed() {
		t.Fatal("removed before Activate")
	}
	p.Activate()
	l.cur = p
	if !old.Removed() || p.Rule("edge", "r").Version != nil {
		t.Fatal("a rule that became unlimited kept its lineage")
	}

	// Limited again: a new lineage, not the removed one.
	l.mustLoad(onePolicy(10, "1/s", "clamp"))
	if v := l.cur.Rule("edge", "r").Version; v.Lineage() == old || v.Lineage().Removed() {
		t.Fatal("a rule that came back reused the removed lineage")
	}
}

// TestInvalidReloadChangesNothing: a bad file returns Errors, consumes no
// version ID and publishes nothing.
func TestInvalidReloadChangesNothing(t *testing.T) {
	l := &reloader{t: t}
	l.mustLoad(onePolicy(10, "1/s", "clamp"))
	before, lastID := l.cur, l.c.lastID.Load()
	v := before.Rule("edge", "r").Version
	if err := l.load(onePolicy(20, "1/q", "clamp")); err == nil {
		t.Fatal("a bad refill was accepted")
	}
	if l.cur != before || l.c.lastID.Load() != lastID || v.Lineage().Current() != v || v.Lineage().Removed() {
		t.Fatal("a refused file changed something")
	}
}

// TestReloadTransitions drives one bucket through reloads the way a store
// does (Bring, then Decide), with the clock injected.
func TestReloadTransitions(t *testing.T) {
	t.Run("capacity 100 to 10 while holding 80", func(t *testing.T) {
		for _, c := range []struct {
			mode string
			want int64
		}{{"clamp", 10}, {"scale", 8}} {
			l := &reloader{t: t}
			l.mustLoad(onePolicy(100, "10/s", "clamp"))
			var b bucketOf
			if r := b.decide(l.cur.Rule("edge", "r"), 0, 30); r.Remaining != 70 {
				t.Fatalf("%s: first decision %+v", c.mode, r)
			}
			l.clock.Set(sec) // +10 at the OLD rate up to the reload: 80
			l.mustLoad(onePolicy(10, "10/s", c.mode))
			if r := b.decide(l.cur.Rule("edge", "r"), l.clock.Now(), 0); r.Remaining != c.want {
				t.Errorf("%s: %d tokens after the reload, want %d", c.mode, r.Remaining, c.want)
			}
		}
	})
	t.Run("rate 10/s to 1/s", func(t *testing.T) {
		l := &reloader{t: t}
		l.mustLoad(onePolicy(100, "10/s", "clamp"))
		var b bucketOf
		b.decide(l.cur.Rule("edge", "r"), 0, 100)
		l.clock.Set(2 * sec) // 20 tokens under the old rate
		l.mustLoad(onePolicy(100, "1/s", "clamp"))
		if r := b.decide(l.cur.Rule("edge", "r"), 4*sec, 0); r.Remaining != 22 {
			t.Errorf("10/s for 2s then 1/s for 2s: %d tokens, want 22", r.Remaining)
		}
	})
	// Three reloads between two requests of one bucket are walked in
	// order, each refilling under its own parameters; a refused file in the
	// middle changes nothing.
	for _, invalid := range []bool{false, true} {
		t.Run(fmt.Sprintf("three reloads, invalid in the middle %v", invalid), func(t *testing.T) {
			l := &reloader{t: t}
			l.mustLoad(onePolicy(100, "10/s", "clamp"))
			var b bucketOf
			b.decide(l.cur.Rule("edge", "r"), 0, 100) // empty at 0
			l.clock.Set(sec)
			l.mustLoad(onePolicy(50, "10/s", "clamp")) // 10 at the old rate, kept
			if invalid {
				l.clock.Set(sec + sec/2)
				if err := l.load(onePolicy(1, "1/s", "grow")); err == nil {
					t.Fatal("a bad on_resize was accepted")
				}
			}
			l.clock.Set(2 * sec)
			l.mustLoad(onePolicy(50, "1/s", "clamp")) // 20 at 10/s
			l.clock.Set(3 * sec)
			l.mustLoad(onePolicy(200, "1/s", "scale")) // 21 at 1/s, scaled x4: 84
			if r := b.decide(l.cur.Rule("edge", "r"), 4*sec, 0); r.Remaining != 85 {
				t.Errorf("%d tokens after three reloads, want 85", r.Remaining)
			}
		})
	}
}
