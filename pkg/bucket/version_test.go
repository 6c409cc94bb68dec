package bucket

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestBringWalksVersionsInOrder: bringing a bucket across several versions
// equals applying each Transition in turn, and a bucket older than the
// remembered history converts directly; a balance in debt as well.
func TestBringWalksVersionsInOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawParams(t, "v0 ")
		v := NewVersion(1, p, 0)
		chain := []*Version{v}
		at := int64(0)
		n := rapid.IntRange(1, MaxHistory+4).Draw(t, "versions")
		for i := 1; i <= n; i++ {
			at += rapid.Int64Range(0, int64(time.Hour)).Draw(t, "gap")
			mode := ResizeMode(rapid.IntRange(0, 1).Draw(t, "mode"))
			v = v.Next(uint64(i+1), drawParams(t, "next "), at, mode)
			chain = append(chain, v)
		}
		from := rapid.IntRange(0, n).Draw(t, "from")
		// A debt too (drawParams draws a debt bound): Bring carries it.
		s := State{Tokens: rapid.Int64Range(-chain[from].Params.maxDebt, chain[from].Params.capacity).Draw(t, "tokens"), At: chain[from].ActiveAt}

		want := s
		if n-from < MaxHistory {
			for i := from + 1; i <= n; i++ {
				want = Transition(want, chain[i-1].Params, chain[i].Params, chain[i].ActiveAt, chain[i].OnResize)
			}
		} else {
			want = Transition(want, chain[from].Params, v.Params, v.ActiveAt, v.OnResize)
		}
		if got := v.Bring(s, chain[from]); got != want {
			t.Fatalf("from version %d of %d: got %+v, want %+v", from, n, got, want)
		}
		if v.Lineage() != chain[0].Lineage() {
			t.Fatal("versions of one rule do not share a lineage")
		}
	})
}

func TestTransitionExamples(t *testing.T) {
	// on_resize (docs/policy.md): capacity 100 -> 10 while a bucket holds
	// 80, after refilling with the OLD rate up to the change.
	old := mustParams(t, 100, "10/s")
	s, _ := old.Decide(old.Full(0), 0, 30) // 70 left
	at := sec                              // +10 at the old rate
	for _, c := range []struct {
		mode ResizeMode
		want int64
	}{{Clamp, 10}, {Scale, 8}} {
		got := Transition(s, old, mustParams(t, 10, "10/s"), at, c.mode)
		if got.Tokens != c.want || got.Frac != 0 || got.At != at {
			t.Errorf("%v: got %+v, want %d tokens at %d", c.mode, got, c.want, at)
		}
	}
	// Rate 10/s -> 1/s: the old rate applies up to the change only.
	slow := mustParams(t, 100, "1/s")
	s, _ = old.Decide(old.Full(0), 0, 100)
	s = Transition(s, old, slow, 2*sec, Clamp) // 20 tokens under the old rate
	if _, r := slow.Decide(s, 4*sec, 0); r.Remaining != 22 {
		t.Errorf("10/s for 2s then 1/s for 2s: got %d tokens, want 22", r.Remaining)
	}
}
