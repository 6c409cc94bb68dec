package candidate

import (
	"cmp"
	"slices"
	"sync"
	"unsafe"

	"github.com/tokengate/tokengate/pkg/keyhash"
)

// topKey is one bucket's disagreements of one kind: the bucket (its rule's
// row and its key's keyed hash, the name the decision log and the dynamic
// metadata give it) of the policy that rejected. Two buckets of a rule
// share a name only by chance (keyhash.Length), and then one entry.
type topKey struct {
	kind Kind // its policy is the one that rejected (Kind.Rejecter)
	row  *row
	hash [keyhash.Length]byte
}

type topEntry struct {
	count, over uint64 // over: the most count may exceed the truth by
}

// topList is a space-saving top list (Metwally et al.): at most n entries;
// a bucket not listed when the list is full takes the place of the least
// counted one, with that count plus one, and remembers the count it
// inherited as the most it overcounts by. Every bucket whose true count is
// above total/n is listed; a listed count is exact when over is 0.
type topList struct {
	mu      sync.Mutex
	hasher  *keyhash.Hasher // names the keys, under mu
	entries map[topKey]*topEntry
}

// add counts a disagreement of kind decided by the bucket of row whose key
// is key, in a list of at most n entries.
func (l *topList) add(kind Kind, r *row, key string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := topKey{kind: kind, row: r}
	// A hash.Hash neither keeps nor changes what it is given to write.
	l.hasher.Sum(&k.hash, unsafe.Slice(unsafe.StringData(key), len(key)))
	if e := l.entries[k]; e != nil {
		e.count++
		return
	}
	if l.entries == nil {
		l.entries = make(map[topKey]*topEntry, n)
	}
	if len(l.entries) < n {
		l.entries[k] = &topEntry{count: 1}
		return
	}
	var (
		minKey topKey
		minE   *topEntry
	)
	for k2, e := range l.entries {
		if minE == nil || e.count < minE.count {
			minKey, minE = k2, e
		}
	}
	delete(l.entries, minKey)
	l.entries[k] = &topEntry{count: minE.count + 1, over: minE.count}
}

type topItem struct {
	topKey
	topEntry
}

// snapshot is the list, most counted first (ties by row, kind, hash, so
// that the order is stable).
func (l *topList) snapshot() []topItem {
	l.mu.Lock()
	out := make([]topItem, 0, len(l.entries))
	for k, e := range l.entries {
		out = append(out, topItem{k, *e})
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b topItem) int {
		return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.row.domain, b.row.domain), cmp.Compare(a.row.rule, b.row.rule),
			cmp.Compare(a.kind, b.kind), cmp.Compare(string(a.hash[:]), string(b.hash[:])))
	})
	return out
}
