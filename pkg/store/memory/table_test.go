package memory

import (
	"testing"

	"github.com/tokengate/tokengate/pkg/bucket"
	"pgregory.net/rapid"
)

// TestTableMatchesMap runs random inserts, finds, removals and sweeps that
// remove while they scan, against a Go map. Hashes are drawn from a small
// space so that probe runs collide and wrap around the table's end.
func TestTableMatchesMap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var tb table
		model := map[keyHash]int64{}
		hash := func() keyHash {
			return keyHash{rapid.Uint64Range(0, 7).Draw(rt, "a"), rapid.Uint64Range(0, 40).Draw(rt, "b")}
		}
		for range rapid.IntRange(1, 300).Draw(rt, "ops") {
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0:
				h := hash()
				if _, ok := model[h]; !ok {
					tok := rapid.Int64().Draw(rt, "tokens")
					tb.insert(h, bucket.State{Tokens: tok}, 1)
					model[h] = tok
				}
			case 1:
				h := hash()
				sl := tb.find(h)
				want, ok := model[h]
				if (sl != nil) != ok || ok && sl.s.Tokens != want {
					rt.Fatalf("find %v: got %v, model %v %v", h, sl, want, ok)
				}
			case 2:
				h := hash()
				if i, ok := tb.lookup(h); ok {
					tb.remove(i)
					delete(model, h)
				}
			case 3:
				// A sweep that removes every entry with an odd b, staying on
				// an index after removing (an entry may have moved there).
				for i := 0; i < len(tb.slots); {
					if sl := tb.slots[i]; sl.ver != 0 && sl.h.b%2 == 1 {
						tb.remove(uint64(i))
						delete(model, sl.h)
						continue
					}
					i++
				}
			}
			if tb.n != len(model) {
				rt.Fatalf("table holds %d, model %d", tb.n, len(model))
			}
		}
		for h, want := range model {
			if sl := tb.find(h); sl == nil || sl.s.Tokens != want {
				rt.Fatalf("lost %v", h)
			}
		}
	})
}
